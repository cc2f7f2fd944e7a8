"""What a served question reports it cost (mars/serve/solve.py): the full budget exact where no
trace was stopped, else an estimate with its basis, never the bound presented as a saving."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from mars.engines.base import ProbeResult, TraceResult
from mars.engines.generate import TraceRecord
from mars.serve.solve import full_budget


def _trace(length: int, final: str | None = None, probes=()) -> TraceRecord:
    result = TraceResult(length=length, final_answer=final, finished=final is not None)
    return TraceRecord(result, [(p, ProbeResult(a)) for p, a in probes])


def _main(*lengths: int) -> dict[int, TraceRecord]:
    return {4 + j: _trace(n) for j, n in enumerate(lengths)}


def test_no_trace_stopped_is_exact():
    assert full_budget(_main(100, 300, 250), set(), 1000) == {
        "tokens": 650,
        "at_most": 650,
        "exact": True,
    }


def test_a_stopped_trace_runs_to_the_mean_length_of_those_that_went_past_it():
    """Traces 4 and 5 ended at 900 and 1,300 tokens; trace 6 was stopped at 800 (both went past:
    it counts 1,100), trace 7 at 1,000 (only the 1,300 one went past), trace 8 at 2,000 (none
    did: the cap). The bound counts every stopped trace at the cap."""
    out = full_budget(_main(900, 1300, 800, 1000, 2000), {6, 7, 8}, 4096)
    assert out == {
        "tokens": 900 + 1300 + 1100 + 1300 + 4096,
        "at_most": 900 + 1300 + 3 * 4096,
        "exact": False,
    }


def test_the_votes_held_at_the_stop():
    from mars.serve.solve import held_at_stop

    main = {
        4: _trace(3000, "64", [(2048, "100")]),  # ended before the stop: its final answer
        5: _trace(4096, None, [(2048, "100"), (4096, "64")]),  # stopped at 4096: its probe there
        6: _trace(4096, None, [(2048, "7")]),  # stopped earlier (pruned at 2048): its last probe
        7: _trace(0),  # never launched: no vote
    }
    assert held_at_stop(main, {5, 6}, 4096) == ["64", "64", "7"]
    assert held_at_stop(main, set(), None) == ["64"]  # the budget: final answers only


@pytest.mark.parametrize(
    "method", ["sc-mars-cal", "sc-mars2", "sc-pp", "sc-mars2-launch", "sc-mars2-early"]
)
def test_the_votes_reported_are_the_ones_the_answer_came_from(method):
    """The answer is the leader (or tied leader) of the votes the response reports, whatever
    stopped the question; stopped_by is 'budget' where nothing was saved."""
    import httpx
    from serving import serving

    from mars.serve.requests import Defaults

    with serving(["synthetic"], Defaults(traces=16, warmup=8, spacing=2048)) as running:
        for k in range(6):
            r = httpx.post(
                running.url + "/v1/completions",
                json={
                    "prompt": f"What is {k} squared plus {k}?",
                    "n": 16,
                    "seed": k,
                    "max_tokens": 16384,
                    "mars": {"method": method},
                },
                timeout=120,
            )
            m = r.json()["mars"]
            if m["answer"] is None:
                continue
            top = m["votes"][0]["votes"]
            assert m["answer"] in [v["answer"] for v in m["votes"] if v["votes"] == top], m
            saved = m["traces_stopped"] or (m["traces_started"] or 16) < 16
            assert (m["stopped_by"] == "budget") == (not saved), m


def test_the_synthetic_upstream_knows_the_bundled_questions_inside_any_prompt():
    from mars.serve.upstreams import synthetic_truth
    from mars.store.problems import load_problems

    p = load_problems("aime_2025")[3]
    prompt = f"user: {p.question} Put the answer in \\boxed{{}}.\n"
    assert synthetic_truth(prompt) == p.answer
    other = synthetic_truth("Write a haiku about the sea.")
    assert other == synthetic_truth("Write a haiku about the sea.") and other.isdigit()


def test_a_trace_never_launched_counts_in_the_full_budget():
    """A staged method that stopped before its second launch: the traces it never started cost
    what the ended ones did on average, in the full budget it is measured against."""
    import httpx
    from serving import serving

    from mars.serve.requests import Defaults

    with serving(["synthetic"], Defaults(traces=64, warmup=8, spacing=2048)) as running:
        for k in range(4):
            r = httpx.post(
                running.url + "/v1/completions",
                json={
                    "prompt": f"What is {k} + 40?",
                    "n": 64,
                    "seed": k,
                    "max_tokens": 32768,
                    "mars": {"method": "sc-mars2-launch"},
                },
                timeout=120,
            )
            m = r.json()["mars"]
            if m["traces_started"] < 64:
                break
        else:
            pytest.skip("no question stopped within its first launch")
        full, main = m["full_budget_tokens"], m["tokens"]["main"]
        assert m["full_budget_basis"].startswith("estimate")
        assert m["savings"]["paper"] >= 1 - m["traces_started"] / 64 - 0.15, m
        assert main < full


def test_the_answers_text_is_read_off_the_runs_traces():
    """A trace that ended with the answer gives its text; where only probes gave it (every trace
    that held it was stopped), the last such probe's completion up to its closing brace; the
    warmup's traces are looked at after the main ones."""
    from types import SimpleNamespace

    from mars.serve.solve import _outcome

    def run(traces, answer, stopped=()):
        return SimpleNamespace(
            traces=traces, warmup=1, n_traces=len(traces) - 1, answer=answer,
            stopped_traces=list(stopped), stop_position=8, launched=None,
        )  # fmt: skip

    def probed(raw):
        result = TraceResult(length=8, final_answer=None, finished=False, text="so far")
        return TraceRecord(result, [(8, ProbeResult("5", raw, None, 9, 4, 3))])

    ended = TraceRecord(TraceResult(12, "5", True, text="it is \\boxed{5}"))
    warm = TraceRecord(TraceResult(12, "5", True, text="warm: \\boxed{5}"))
    q, plan = SimpleNamespace(stop=(), return_traces=False), SimpleNamespace(max_tokens=64)
    out = _outcome(run([warm, probed("5} more"), ended], "5", [1]), q, plan, 7, 0.0)
    assert out.content == "it is \\boxed{5}" and out.finish_reason == "stop"
    assert out.votes == [{"answer": "5", "votes": 2}]
    assert (out.probe_generated, out.probe_prompt_uncached) == (3, 5)
    out = _outcome(run([warm, probed("5} more")], "5", [1]), q, plan, 7, 0.0)
    assert out.content == "warm: \\boxed{5}"  # the warmup's, after the main traces
    out = _outcome(run([probed(None), probed("{5}} more")], "5", [1]), q, plan, 7, 0.0)
    assert out.content == "{5}"
    out = _outcome(run([probed(None), probed(None)], "5", [1]), q, plan, 7, 0.0)
    assert out.content == "\\boxed{5}"
