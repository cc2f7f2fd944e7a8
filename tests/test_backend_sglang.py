"""The SGLang adapter against hand-built engine outputs (tests/data/sglang/,
replayed by a fake engine).

No live SGLang runs here: the fixtures follow the documented shape of ``sglang.Engine.generate``
results (see tests/data/sglang/toy.py and docs/backends.md).  The fake engine answers a request only
if it matches a recorded one exactly (token ids, sampling parameters, logprob options), so these
tests pin the request protocol (token-id prompts, continuation from prompt + trace, probe = prompt +
trace[:p] + the exact suffix, ≤ 50 new tokens, same sampling, per-trace seeds) as well as the
parsing of ``meta_info``.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mars import schema
from mars.answers import normalize_answer
from mars.backends.base import Problem
from mars.backends.sglang import EngineOutputError, SGLangBackend, parse_generation, request_seed
from mars.backends.tokens import PROBE_SUFFIX
from mars.generate import generate_pool, run_batch
from mars.pool import open_pool
from mars.shards import consolidate

DATA = Path(__file__).resolve().parent / "data" / "sglang"
SESSION = json.loads((DATA / "session_toy_q0.json").read_text())

_spec = importlib.util.spec_from_file_location("sglang_toy", DATA / "toy.py")
toy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(toy)


def _key(input_ids, sampling_params, return_logprob, top_logprobs_num) -> str:
    return json.dumps(
        [list(input_ids), sampling_params, bool(return_logprob), top_logprobs_num], sort_keys=True
    )


def _tuples(x):
    """JSON lists of [logprob, id, text] back to the tuples the in-process engine returns."""
    if (
        isinstance(x, list)
        and len(x) == 3
        and isinstance(x[1], int)
        and not isinstance(x[0], (list, dict))
    ):
        return tuple(x)
    if isinstance(x, list):
        return [_tuples(e) for e in x]
    if isinstance(x, dict):
        return {k: _tuples(v) for k, v in x.items()}
    return x


class ReplayEngine:
    """Answers ``generate`` from recorded exchanges; an unrecorded request is an error."""

    def __init__(self, exchanges, tuples: bool = True):
        self.table = {}
        for ex in exchanges:
            r = ex["request"]
            self.table[
                _key(
                    r["input_ids"], r["sampling_params"], r["return_logprob"], r["top_logprobs_num"]
                )
            ] = ex["response"]
        self.tuples = tuples
        self.used: list[str] = []
        self.calls: list[list[dict]] = []
        self.shut = False

    def generate(
        self,
        input_ids=None,
        sampling_params=None,
        return_logprob=False,
        top_logprobs_num=None,
        **kw,
    ):
        assert not kw, f"unexpected engine arguments {kw}"
        assert isinstance(input_ids, list) and isinstance(sampling_params, list)
        assert len(input_ids) == len(sampling_params)
        outs, reqs = [], []
        for ids, sp in zip(input_ids, sampling_params):
            assert all(isinstance(t, int) for t in ids), "token ids must be plain ints"
            key = _key(ids, sp, return_logprob, top_logprobs_num if return_logprob else None)
            if key not in self.table:
                raise AssertionError(
                    f"unrecorded request: {len(ids)} ids, {sp}, logprob={return_logprob}"
                )
            self.used.append(key)
            reqs.append(
                {
                    "input_ids": list(ids),
                    "sampling_params": dict(sp),
                    "return_logprob": return_logprob,
                }
            )
            out = copy.deepcopy(self.table[key])
            outs.append(_tuples(out) if self.tuples else out)
        self.calls.append(reqs)
        return outs

    def shutdown(self):
        self.shut = True


PROBLEM = Problem(**SESSION["problem"])


def make_backend(engine=None, **kw) -> SGLangBackend:
    return SGLangBackend(
        SESSION["model"],
        engine=engine or ReplayEngine(SESSION["exchanges"]),
        tokenizer=toy.ToyTokenizer(SESSION["vocab"], SESSION["eos_token_id"]),
        max_tokens=SESSION["max_tokens"],
        **kw,
    )


def run(be: SGLangBackend, **kw):
    batch = be.start(PROBLEM, SESSION["n_traces"], SESSION["seed"])
    return batch, run_batch(batch, SESSION["spacing"], max_tokens=SESSION["max_tokens"], **kw)


def test_replay_gives_the_recorded_traces_probes_and_costs():
    be = make_backend()
    _batch, records = run(be)
    eng = be.engine
    assert sorted(eng.used) == sorted(set(eng.used)) and len(eng.used) == len(SESSION["exchanges"])
    for rec, exp in zip(records, SESSION["expected"]):
        r = rec.result
        assert (r.length, r.finished, r.final_answer) == (
            exp["length"],
            exp["finished"],
            exp["final_answer"],
        )
        assert [
            [p, pr.answer, pr.cached_tokens, pr.generated_tokens] for p, pr in rec.probes
        ] == exp["probes"]
        assert r.confs.dtype == np.float16 and len(r.confs) == r.length and (r.confs > 0).all()
    # trace 0: finished (EOS counted as a token), 1: cut at the cap, 2: EOS exactly at a checkpoint
    assert [r.result.finished for r in records] == [True, False, True]
    assert records[1].result.length == SESSION["max_tokens"]
    assert [p for p, _ in records[2].probes] == [8]  # ended at 16: not probed there
    assert "\\boxed{5}" in records[0].result.text and "<|im_end|>" not in records[0].result.text
    # the probe answer is normalised once (\dfrac -> \frac), unparseable -> None
    assert records[1].probes[1][1].answer == normalize_answer("\\dfrac{12}{2}") == "\\frac{12}{2}"
    assert records[2].probes[0][1].answer is None
    # engine counters kept
    assert be.stats["probe_calls"] == 2 and be.stats["generate_calls"] == 3
    assert be.stats["probe_cached_tokens"] == sum(
        pr.cached_tokens for rec in records for _, pr in rec.probes
    )


def test_confidence_is_minus_mean_top20_logprobs():
    be = make_backend()
    batch, records = run(be)
    # rebuild trace 0's confidences from the recorded top logprobs of its generate calls
    confs = []
    prompt = batch.prompt
    for call in be.engine.calls:
        for req in call:
            body = req["input_ids"][len(prompt) :]
            first = req["sampling_params"]["sampling_seed"] == request_seed(
                SESSION["seed"], PROBLEM.qid, 0, 0
            )
            if req["return_logprob"] and (
                first if not body else body == batch.token_ids(0)[: len(body)]
            ):
                resp = be.engine.table[_key(req["input_ids"], req["sampling_params"], True, 20)]
                for top in resp["meta_info"]["output_top_logprobs"]:
                    assert len(top) == 20
                    confs.append(round(-float(np.mean([e[0] for e in top])), 3))
    assert np.array_equal(records[0].result.confs, np.array(confs, np.float64).astype(np.float16))
    # a probe's conf: mean of the confidences before it
    p, pr = records[0].probes[0]
    assert pr.conf == pytest.approx(float(records[0].result.confs[:p].astype(np.float64).mean()))


def test_request_protocol_token_ids_suffix_radix_prefixes_and_seeds():
    be = make_backend()
    batch, records = run(be)
    tok = be.tokenizer
    prompt = batch.prompt
    # chat-templated prompt: user message = question + boxed instruction, generation prompt added
    text = tok.decode(prompt)
    assert text.startswith("<|im_start|>user\n" + PROBLEM.question) and text.endswith(
        "<|im_start|>assistant\n"
    )
    assert "\\boxed{}" in text
    # the suffix, character for character
    assert tok.decode(be.suffix_ids) == PROBE_SUFFIX
    assert PROBE_SUFFIX == (
        " Considering the limited time by the user, I have to give the solution based on the "
        "thinking directly now.\n</think>\n\n\\boxed{"
    )
    gen_sp = None
    for call in be.engine.calls:
        for req in call:
            ids, sp = req["input_ids"], req["sampling_params"]
            assert ids[: len(prompt)] == prompt
            body = ids[len(prompt) :]
            j = next(j for j in range(batch.n) if batch.token_ids(j)[:1] == body[:1] or not body)
            if body[-len(be.suffix_ids) :] == be.suffix_ids:  # a probe
                p = len(body) - len(be.suffix_ids)
                j = next(j for j in range(batch.n) if batch.token_ids(j)[:p] == body[:p])
                assert p % SESSION["spacing"] == 0
                assert sp["max_new_tokens"] == 50 and not req["return_logprob"]
                assert sp["sampling_seed"] == request_seed(
                    SESSION["seed"], PROBLEM.qid, j, p, probe=True
                )
            else:  # generation continues from prompt + the trace so far (radix-cache prefix)
                assert req["return_logprob"]
                if body:
                    j = next(j for j in range(batch.n) if batch.token_ids(j)[: len(body)] == body)
                else:  # first request of a trace: which one is told by its seed
                    j = [
                        request_seed(SESSION["seed"], PROBLEM.qid, t, 0) for t in range(batch.n)
                    ].index(sp["sampling_seed"])
                assert sp["sampling_seed"] == request_seed(
                    SESSION["seed"], PROBLEM.qid, j, len(body)
                )
                assert len(body) + sp["max_new_tokens"] in (8, 16, 24)
            rest = {k: v for k, v in sp.items() if k not in ("max_new_tokens", "sampling_seed")}
            assert gen_sp is None or rest == gen_sp  # probes sample like the traces
            gen_sp = rest
    assert gen_sp == {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
    # later probes of a trace extend its earlier probes' prefix: the radix cache serves it
    p8, p16 = records[1].probes[0][1], records[1].probes[1][1]
    assert p16.cached_tokens > p8.cached_tokens >= len(prompt)
    assert p8.prompt_tokens == len(prompt) + 8 + len(be.suffix_ids)


def test_json_lists_and_tuples_parse_alike():
    be = make_backend(engine=ReplayEngine(SESSION["exchanges"], tuples=False))
    _, records = run(be)
    _, records2 = run(make_backend())
    for a, b in zip(records, records2):
        assert np.array_equal(a.result.confs, b.result.confs) and a.result.text == b.result.text


def test_generate_pool_manifest_and_shards_consolidate(tmp_path):
    kw = {"n_traces": 3, "seed": SESSION["seed"], "spacing": SESSION["spacing"], "progress": False}
    out = generate_pool(make_backend(), [PROBLEM], out=tmp_path / "pool", **kw)
    pool = open_pool(out)
    d = pool.read_question(0)
    assert d.n_traces == 3 and d.has_confs and d.probe_cost is not None
    m = json.loads((out / schema.POOL_MANIFEST).read_text())
    assert m["backend"] == "sglang" and m["model"] == SESSION["model"] and m["max_tokens"] == 24
    assert m["logprobs"].startswith("log_softmax(logits / temperature)")
    assert m["probe_suffix"] == PROBE_SUFFIX
    t = pq.read_table(out / schema.trace_file_name(0))
    probes = t.column("probes").to_pylist()
    assert (
        probes[1][1]["prompt_tokens"] > probes[1][1]["cached_tokens"] > 0
        and probes[1][1]["generated_tokens"] == 50
    )
    # two shards (traces 0-1 and 2) replay the same requests and consolidate to the same table
    shards = [
        generate_pool(make_backend(), [PROBLEM], out=tmp_path / f"s{s}", shard=s, n_shards=2, **kw)
        for s in range(2)
    ]
    merged = consolidate(shards, tmp_path / "merged")
    assert pq.read_table(merged / schema.trace_file_name(0)).equals(t)


def test_live_mode_stop_sends_no_more_requests():
    be = make_backend()
    batch, records = run(be, on_checkpoint=lambda p, b, probes: p >= 8)
    assert len(be.engine.calls) == 2  # one generate call to 8, one probe call
    assert [r.result.length for r in records] == [8, 8, 8]
    assert all(not r.result.finished for r in records)
    assert batch.ended.all()


def test_parse_generation_shapes_and_errors():
    ex = SESSION["exchanges"][0]["response"]
    g = parse_generation(_tuples(ex), 8)
    assert g["finish"] == "length" and len(g["ids"]) == 8 and len(g["confs"]) == 8
    assert g["prompt_tokens"] == 40 and g["cached_tokens"] == 0 and g["completion_tokens"] == 8
    # string finish reason, no logprobs (probe request): ids from output_ids, no confidences
    bare = {
        "text": "5}",
        "output_ids": [47, 2],
        "meta_info": {
            "id": "x",
            "finish_reason": "stop",
            "prompt_tokens": 70,
            "completion_tokens": 2,
        },
    }
    g = parse_generation(bare, 50)
    assert g["ids"] == [47, 2] and g["confs"] is None and g["cached_tokens"] is None
    # an empty top-logprob list gives NaN (the reference skips such tokens)
    empty = copy.deepcopy(ex)
    empty["meta_info"]["output_top_logprobs"][3] = []
    assert np.isnan(parse_generation(empty, 8)["confs"][3])
    with pytest.raises(EngineOutputError, match="aborted"):
        parse_generation(
            {
                "text": "",
                "output_ids": [],
                "meta_info": {
                    "id": "y",
                    "finish_reason": {"type": "abort", "message": "out of memory"},
                },
            },
            8,
        )
    with pytest.raises(EngineOutputError, match="disagree"):
        parse_generation({**ex, "output_ids": ex["output_ids"][::-1]}, 8)
    with pytest.raises(EngineOutputError, match="finish 'length'"):
        parse_generation(ex, 9)
    with pytest.raises(EngineOutputError, match="for max_new_tokens"):
        parse_generation(ex, 7)
    with pytest.raises(EngineOutputError, match="completion_tokens"):
        bad = copy.deepcopy(ex)
        bad["meta_info"]["completion_tokens"] = 9
        parse_generation(bad, 8)


def test_unrecorded_request_fails_and_sampling_settings_reach_the_engine():
    be = make_backend(top_k=None)  # top-k off -> -1: not what was recorded
    with pytest.raises(AssertionError, match="unrecorded request"):
        run(be)
    assert be.sampling_params(5, None) == {
        "max_new_tokens": 5,
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": -1,
    }
    assert "sampling_seed" not in make_backend(seed_per_trace=False).sampling_params(5, None)


def test_describe_records_the_logprob_mode(monkeypatch):
    monkeypatch.delenv("SGLANG_RETURN_ORIGINAL_LOGPROB", raising=False)
    assert "temperature" in make_backend().describe()["logprobs"]
    monkeypatch.setenv("SGLANG_RETURN_ORIGINAL_LOGPROB", "1")
    assert make_backend().describe()["logprobs"].startswith("log_softmax(logits) ")


def test_shutdown_only_stops_an_engine_it_started():
    be = make_backend()
    be.shutdown()
    assert not be.engine.shut


def test_cli_without_sglang_is_a_clean_error(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from mars.backends.factory import make_backend as real_backend
    from mars.cli import app

    monkeypatch.delenv("MARS_BACKEND_OPTIONS", raising=False)
    with pytest.raises(ValueError, match="needs --model"):
        real_backend("sglang", model=None, max_tokens=100)
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", '{"no_such_option": 1}')
    with pytest.raises(ValueError, match="unknown sglang backend options"):
        real_backend("sglang", model="org/model", max_tokens=100)
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", "[1]")
    with pytest.raises(ValueError, match="JSON object"):
        real_backend("sglang", model="org/model", max_tokens=100)
    monkeypatch.delenv("MARS_BACKEND_OPTIONS")
    if importlib.util.find_spec("sglang") is None:
        with pytest.raises(ValueError, match=r"mars\[sglang\]"):
            real_backend("sglang", model="org/model", max_tokens=100)
        res = CliRunner().invoke(
            app,
            [
                "generate",
                "--backend",
                "sglang",
                "--model",
                "org/model",
                "--problems",
                "aime_2025",
                "--traces",
                "2",
                "--out",
                str(tmp_path / "o"),
                "-q",
            ],
        )
        assert res.exit_code == 2


def test_solve_live_stops_the_engine_and_replays():
    """`mars solve`'s path on the SGLang adapter: the rule fires at the first checkpoint,
    no request follows."""
    from mars.live import solve

    be = make_backend()
    run = solve(
        be,
        PROBLEM,
        "sc-consensus",
        n_traces=SESSION["n_traces"],
        warmup=0,
        seed=SESSION["seed"],
        spacing=SESSION["spacing"],
        consensus=0.5,
    )
    assert len(be.engine.calls) == 2  # generate to 8, probe at 8, then nothing
    assert (run.stopped_by, run.stop_position, run.tokens, run.answer) == ("consensus", 8, 24, "5")
    assert run.stopped_traces == [0, 1, 2] and run.replay_ok and run.correct
    # probe cost = what the engine reported: generated + prompt tokens the radix cache did not serve
    st = be.stats
    assert (
        run.n_probes == 3
        and run.probe_tokens
        == (st["probe_completion_tokens"] + st["probe_prompt_tokens"] - st["probe_cached_tokens"])
        > 0
    )

    full = solve(
        make_backend(),
        PROBLEM,
        "sc",
        n_traces=SESSION["n_traces"],
        warmup=0,
        seed=SESSION["seed"],
        spacing=SESSION["spacing"],
    )
    assert (full.stopped_by, full.tokens, full.answer) == (
        "budget",
        15 + 24 + 16,
        "5",
    ) and full.replay_ok
