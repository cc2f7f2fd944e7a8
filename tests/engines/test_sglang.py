"""The SGLang adapter against hand-built engine outputs (tests/data/sglang/,
replayed by a fake engine).

No live SGLang runs here: the fixtures follow the shape of ``sglang.Engine.generate`` results as
SGLang 0.5.23's source builds them (and, converted, 0.5.9's; see tests/data/sglang/toy.py and
docs/backends.md).  The fake engine answers a request only
if it matches a recorded one exactly (token ids, sampling parameters, logprob options), so these
tests pin the request protocol (token-id prompts, continuation from prompt + trace, probe = prompt +
trace[:p] + the exact suffix, ≤ 50 new tokens, same sampling, per-trace seeds) as well as the
parsing of ``meta_info``.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mars.engines.base import Problem
from mars.engines.generate import generate_pool, run_batch
from mars.engines.sglang import (
    EngineOutputError,
    SGLangBackend,
    parse_generation,
    probe_seed,
    trace_seed,
)
from mars.engines.tokens import LOGPROB_FLOOR, PROBE_SUFFIX
from mars.errors import MarsError
from mars.method.answers import normalize_answer
from mars.store import schema
from mars.store.consolidate import consolidate
from mars.store.pool import open_pool

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang"
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
    """Answers ``generate`` from recorded exchanges; an unrecorded request is an error.  Reports
    the recorded ``get_server_info()`` (updated by ``server_info``) and context length."""

    def __init__(
        self,
        exchanges,
        tuples: bool = True,
        server_info: dict | None = None,
        context_len: int | None = SESSION["context_len"],
    ):
        self.info = {**SESSION["server_info"], **(server_info or {})}
        self.tokenizer_manager = types.SimpleNamespace(context_len=context_len)
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

    def get_server_info(self):
        return dict(self.info)

    def shutdown(self):
        self.shut = True


PROBLEM = Problem(**SESSION["problem"])
NONDET = {"enable_deterministic_inference": False}  # an engine started without it


def make_backend(engine=None, **kw) -> SGLangBackend:
    return SGLangBackend(
        SESSION["model"],
        engine=engine or ReplayEngine(SESSION["exchanges"]),
        tokenizer=toy.ToyTokenizer(SESSION["vocab"], SESSION["eos_token_id"]),
        **{"max_tokens": SESSION["max_tokens"], **kw},
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
    _, records = run(be)
    # rebuild trace 0's confidences from the recorded top logprobs of its generate calls (all of
    # them carry the trace's seed)
    confs, clamped = [], []
    seed0 = trace_seed(SESSION["seed"], PROBLEM.qid, 0)
    for call in be.engine.calls:
        for req in call:
            if req["return_logprob"] and req["sampling_params"]["sampling_seed"] == seed0:
                resp = be.engine.table[_key(req["input_ids"], req["sampling_params"], True, 20)]
                for top in resp["meta_info"]["output_top_logprobs"]:
                    assert len(top) == 20
                    lps = [e[0] for e in top]
                    if min(lps) == toy.CLAMPED:
                        clamped.append(len(confs))
                    confs.append(round(-float(np.mean(np.maximum(lps, LOGPROB_FLOOR))), 3))
    got = records[0].result.confs
    assert np.array_equal(got, np.array(confs, np.float64).astype(np.float16))
    # the token whose top-20 tail underflowed (SGLang clamps its log-probabilities to -3.4e38):
    # floored at ln(2^-149), a large but finite confidence, not 1.7e37 (inf in float16)
    assert clamped == [12] and np.isfinite(got).all()
    assert 3 * 103.28 / 20 < float(got[12]) < 3 * 103.28 / 20 + 20
    # a probe's conf: mean of the confidences before it
    p, pr = records[0].probes[0]
    assert pr.conf == pytest.approx(float(got[:p].astype(np.float64).mean()))


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
    seeds = [trace_seed(SESSION["seed"], PROBLEM.qid, t) for t in range(batch.n)]
    assert len(set(seeds)) == batch.n
    gen_sp = None
    for call in be.engine.calls:
        for req in call:
            ids, sp = req["input_ids"], req["sampling_params"]
            assert ids[: len(prompt)] == prompt
            body = ids[len(prompt) :]
            if body[-len(be.suffix_ids) :] == be.suffix_ids:  # a probe
                p = len(body) - len(be.suffix_ids)
                j = next(j for j in range(batch.n) if batch.token_ids(j)[:p] == body[:p])
                assert p % SESSION["spacing"] == 0
                assert sp["max_new_tokens"] == 50 and not req["return_logprob"]
                assert sp["sampling_seed"] == probe_seed(SESSION["seed"], PROBLEM.qid, j, p)
            else:  # generation continues from prompt + the trace so far (radix-cache prefix)
                assert req["return_logprob"]
                # every request of a trace sends the trace's one seed
                j = seeds.index(sp["sampling_seed"])
                assert batch.token_ids(j)[: len(body)] == body
                assert len(body) + sp["max_new_tokens"] in (8, 16, 24)
            rest = {k: v for k, v in sp.items() if k not in ("max_new_tokens", "sampling_seed")}
            assert gen_sp is None or rest == gen_sp  # probes sample like the traces
            gen_sp = rest
    assert gen_sp == {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
    # later probes of a trace extend its earlier probes' prefix: the radix cache serves it
    p8, p16 = records[1].probes[0][1], records[1].probes[1][1]
    assert p16.cached_tokens > p8.cached_tokens >= len(prompt)
    assert p8.prompt_tokens == len(prompt) + 8 + len(be.suffix_ids)
    # a probe at p finds prompt + trace but its last token cached (that token's KV was never
    # computed): P + p - 1
    for rec in records:
        for p, pr in rec.probes:
            assert pr.cached_tokens == len(prompt) + p - 1


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
    assert g["retractions"] == 0
    # no logprobs (a probe request): ids from output_ids, no confidences
    bare = {
        "text": "5}",
        "output_ids": [47, 2],
        "meta_info": {
            "id": "x",
            "finish_reason": {"type": "stop", "matched": 2},
            "prompt_tokens": 70,
            "weight_version": "default",
            "num_retractions": 1,
            "reasoning_tokens": 0,
            "completion_tokens": 2,
            "cached_tokens": 0,
            "cached_tokens_details": None,
            "e2e_latency": 0.1,
        },
    }
    g = parse_generation(bare, 50)
    assert g["ids"] == [47, 2] and g["confs"] is None and g["cached_tokens"] == 0
    assert g["matched"] == 2 and g["retractions"] == 1
    # a position without top log-probabilities comes back as None: NaN (the reference skips it)
    empty = copy.deepcopy(ex)
    empty["meta_info"]["output_top_logprobs"][3] = None
    confs = parse_generation(empty, 8)["confs"]
    assert np.isnan(confs[3]) and not np.isnan(np.delete(confs, 3)).any()
    # and the trace stores the confidence of the token before it (a pool holds finite ones)
    from mars.engines.tokens import finite_confs

    stored = finite_confs(confs, [])
    assert stored[3] == confs[2] and np.isfinite(stored).all()
    assert finite_confs([float("nan"), 1.0], [2.5]) == [2.5, 1.0]
    assert finite_confs([float("nan")], []) == [0.0]
    # log-probabilities clamped to the float32 minimum: a finite confidence
    clamped = copy.deepcopy(ex)
    clamped["meta_info"]["output_top_logprobs"][0] = [[toy.CLAMPED, 7, None]] * 20
    conf = parse_generation(clamped, 8)["confs"][0]
    assert conf == round(-LOGPROB_FLOOR, 3) and np.isfinite(np.float16(conf))
    # finish_reason is always a dict for a finished request; anything else is refused
    for fr in ("stop", None):
        with pytest.raises(EngineOutputError, match="not a dict"):
            parse_generation({**bare, "meta_info": {**bare["meta_info"], "finish_reason": fr}})
    with pytest.raises(EngineOutputError, match="aborted"):
        parse_generation(
            {
                "text": "",
                "output_ids": [],
                "meta_info": {
                    "id": "y",
                    "finish_reason": {
                        "type": "abort",
                        "message": "out of memory",
                        "status_code": 500,
                        "err_type": None,
                    },
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
    with pytest.raises(EngineOutputError, match="output_token_logprobs_length"):
        bad = copy.deepcopy(ex)
        bad["meta_info"]["output_token_logprobs_length"] = 7
        parse_generation(bad, 8)


def test_fixtures_have_the_engine_result_shape():
    """The recorded exchanges carry every meta_info key SGLang 0.5.23 returns, in its order."""
    logprob_keys = [
        "id",
        "finish_reason",
        "prompt_tokens",
        "weight_version",
        "num_retractions",
        "input_token_logprobs",
        "output_token_logprobs",
        "output_token_logprobs_length",
        "input_top_logprobs",
        "output_top_logprobs",
        "reasoning_tokens",
        "completion_tokens",
        "cached_tokens",
        "cached_tokens_details",
        "e2e_latency",
    ]
    plain_keys = [k for k in logprob_keys if "logprobs" not in k]
    for ex in SESSION["exchanges"]:
        req, out = ex["request"], ex["response"]
        assert list(out) == ["text", "output_ids", "meta_info"]
        m = out["meta_info"]
        assert list(m) == (logprob_keys if req["return_logprob"] else plain_keys)
        assert isinstance(m["finish_reason"], dict) and m["finish_reason"]["type"] in (
            "stop",
            "length",
        )
        assert m["prompt_tokens"] == len(req["input_ids"]) and m["weight_version"] == "default"
        assert m["cached_tokens"] < len(req["input_ids"])
        assert m["cached_tokens_details"] == (
            {"device": m["cached_tokens"], "host": 0} if m["cached_tokens"] else None
        )
        if req["return_logprob"]:
            assert m["input_token_logprobs"] == [] and m["input_top_logprobs"] == []
            n = len(out["output_ids"])
            assert m["output_token_logprobs_length"] == n == len(m["output_top_logprobs"])
            assert all(e is None or len(e) == 20 for e in m["output_top_logprobs"])
    # the server report the replay engine gives the adapter
    info = SESSION["server_info"]
    assert info["enable_deterministic_inference"] and not info["disable_radix_cache"]


def test_the_0_5_9_result_shape_replays_to_the_same_records():
    """0.5.9 names the retraction count total_retractions, has no reasoning_tokens /
    output_token_logprobs_length, and returns one input position of log-probabilities."""
    old = [
        {**ex, "response": toy.as_v0_5_9(ex["response"], ex["request"]["input_ids"])}
        for ex in SESSION["exchanges"]
    ]
    m = old[0]["response"]["meta_info"]
    assert "total_retractions" in m and "num_retractions" not in m
    assert m["input_top_logprobs"] == [None]
    be = make_backend(engine=ReplayEngine(old))
    _, records = run(be)
    _, records2 = run(make_backend())
    for a, b in zip(records, records2):
        assert np.array_equal(a.result.confs, b.result.confs) and a.result.text == b.result.text
        assert [(p, pr.answer, pr.cached_tokens) for p, pr in a.probes] == [
            (p, pr.answer, pr.cached_tokens) for p, pr in b.probes
        ]


def test_sampling_settings_reach_the_engine():
    be = make_backend(top_k=None)  # top-k off -> -1: not what was recorded
    with pytest.raises(AssertionError, match="unrecorded request"):
        run(be)
    assert be.sampling_params(5, 11) == {
        "max_new_tokens": 5,
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": -1,
        "sampling_seed": 11,
    }
    # a seedless request would get SGLang's default seed 42: never sent
    with pytest.raises(ValueError, match="default seed"):
        be.sampling_params(5, None)
    nondet = ReplayEngine(SESSION["exchanges"], server_info=NONDET)
    sp = make_backend(nondet, seed_per_trace=False).sampling_params(5, None)
    assert "sampling_seed" not in sp


def test_describe_records_the_logprob_mode_and_the_engine(monkeypatch):
    monkeypatch.delenv("SGLANG_RETURN_ORIGINAL_LOGPROB", raising=False)
    d = make_backend().describe()
    assert "temperature" in d["logprobs"]
    assert d["engine"] == {
        "version": "0.5.23",
        "enable_deterministic_inference": True,
        "attention_backend": "fa3",
        "sampling_backend": "pytorch",
        "disable_radix_cache": False,
        "context_length": SESSION["context_len"],
    }
    assert d["sampling"]["sampling_seed"].startswith("per trace (seed, qid, trace_idx)")
    monkeypatch.setenv("SGLANG_RETURN_ORIGINAL_LOGPROB", "1")
    assert make_backend().describe()["logprobs"].startswith("log_softmax(logits) ")
    # an engine without deterministic inference, no seeds: recorded as such
    nondet = ReplayEngine(SESSION["exchanges"], server_info=NONDET)
    d = make_backend(nondet, seed_per_trace=False).describe()
    assert d["engine"]["enable_deterministic_inference"] is False
    assert d["sampling"]["sampling_seed"] is None


def test_shutdown_only_stops_an_engine_it_started():
    be = make_backend()
    be.shutdown()
    assert not be.engine.shut


def test_cli_without_sglang_is_a_clean_error(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from mars.cli import app
    from mars.engines.factory import make_backend as real_backend

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
        with pytest.raises(ValueError, match=r"'mars-stopping\[sglang\]' \(in a checkout: pip"):
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


# -- reproducibility: SGLang's deterministic inference (issue 13, item 16) ------------------------


def _one_line_error(fn, *match):
    with pytest.raises(MarsError) as err:
        fn()
    text = str(err.value)
    assert "\n" not in text, text
    for m in match:
        assert m in text, text
    return text


def test_injected_engine_settings_that_break_seeds_or_probes_are_refused():
    def engine(**info):
        return ReplayEngine(SESSION["exchanges"], server_info=info)

    # seeds sent to an engine without deterministic inference would be ignored
    e = engine(enable_deterministic_inference=False)
    _one_line_error(lambda: make_backend(e), "ignores sampling_seed", "seed_per_trace=False")
    # no seeds to a deterministic engine: every request would get seed 42 (identical traces)
    e2 = engine()
    _one_line_error(lambda: make_backend(e2, seed_per_trace=False), "seed 42", "identical")
    # min_p asserts in SGLang's seeded sampler
    e3 = engine()
    _one_line_error(lambda: make_backend(e3, min_p=0.05), "min_p=0.05", "does not implement")
    # an attention backend with which SGLang silently turns the radix cache off
    e4 = engine(attention_backend="flashinfer", disable_radix_cache=True)
    _one_line_error(lambda: make_backend(e4), "attention_backend='flashinfer'", "fa3, fa4, triton")
    # ... or the radix cache off for any other reason under deterministic inference
    e5 = engine(disable_radix_cache=True)
    _one_line_error(lambda: make_backend(e5), "radix cache is off")
    # refused before any request; an injected engine is not stopped by the backend
    assert all(not x.calls and not x.shut for x in (e, e2, e3, e4, e5))
    # the consistent settings pass: no seeds, no deterministic inference (the reference's way)
    ok = engine(enable_deterministic_inference=False, attention_backend="flashinfer")
    assert make_backend(ok, seed_per_trace=False, min_p=0.05).deterministic is False


class FakeSGLang:
    """Stands in for the ``sglang`` module: records how the backend starts its Engine and reports
    the settings as SGLang resolves them (under deterministic inference, an unset attention backend
    becomes the GPU's default — fa3 on Hopper, flashinfer on Blackwell — and one outside fa3, fa4,
    triton turns the radix cache off)."""

    def __init__(self, gpu_default: str = "fa3", refuse: str | None = None):
        self.started: list = []
        self.gpu_default = gpu_default
        self.refuse = refuse
        fake = self

        class Engine:
            def __init__(self, **kw):
                if fake.refuse:
                    raise ValueError(fake.refuse + "\nmore lines of the engine's message")
                fake.started.append(self)
                self.kw = kw
                self.shut = False
                det = bool(kw.get("enable_deterministic_inference"))
                ab = kw.get("attention_backend") or (fake.gpu_default if det else None)
                self.info = {
                    "version": "0.5.23",
                    "enable_deterministic_inference": det,
                    "attention_backend": ab,
                    "sampling_backend": "pytorch" if det else "flashinfer",
                    "disable_radix_cache": bool(kw.get("disable_radix_cache"))
                    or (det and ab not in ("fa3", "fa4", "triton")),
                    "max_total_num_tokens": 400000,
                }
                self.tokenizer_manager = types.SimpleNamespace(context_len=4096)

            def get_server_info(self):
                return dict(self.info)

            def generate(self, **kw):
                raise AssertionError("no request expected")

            def shutdown(self):
                self.shut = True

        self.Engine = Engine


def _own(monkeypatch, fake: FakeSGLang, **kw) -> SGLangBackend:
    monkeypatch.setitem(sys.modules, "sglang", fake)
    return SGLangBackend("org/model", tokenizer=toy.ToyTokenizer(), **kw)


def test_the_backend_starts_its_engine_deterministic_and_checks_it(monkeypatch):
    fake = FakeSGLang()
    be = _own(monkeypatch, fake, tp_size=2)
    (eng,) = fake.started
    assert eng.kw == {
        "model_path": "org/model",
        "dp_size": 1,
        "tp_size": 2,
        "enable_deterministic_inference": True,
    }
    assert be.describe()["engine"]["enable_deterministic_inference"] is True
    assert be.describe()["engine"]["attention_backend"] == "fa3"
    be.shutdown()
    assert eng.shut
    # without per-trace seeds: the engine's own randomness, and min_p is allowed
    be = _own(monkeypatch, fake, seed_per_trace=False, min_p=0.05)
    assert fake.started[-1].kw["enable_deterministic_inference"] is False
    assert be.describe()["sampling"]["sampling_seed"] is None
    # refused before the engine starts (minutes saved): nothing more is started
    n = len(fake.started)
    for kw, match in [
        ({"min_p": 0.1}, "min_p=0.1"),
        ({"engine_kwargs": {"attention_backend": "flashinfer"}}, "radix cache off"),
        ({"engine_kwargs": {"enable_deterministic_inference": False}}, "ignores sampling_seed"),
        (
            {"seed_per_trace": False, "engine_kwargs": {"enable_deterministic_inference": True}},
            "seed 42",
        ),
    ]:
        _one_line_error(lambda kw=kw: _own(monkeypatch, fake, **kw), match)
    assert len(fake.started) == n
    # on Blackwell SGLang's deterministic default is flashinfer, which drops the radix cache:
    # refused once the engine says so, and the engine is stopped again
    blackwell = FakeSGLang(gpu_default="flashinfer")
    _one_line_error(lambda: _own(monkeypatch, blackwell), "attention_backend='flashinfer'")
    assert blackwell.started[0].shut
    be = _own(monkeypatch, blackwell, engine_kwargs={"attention_backend": "triton"})
    assert be.describe()["engine"]["attention_backend"] == "triton"
    # the engine's own refusal of a setting: one line
    _one_line_error(
        lambda: _own(monkeypatch, FakeSGLang(refuse="bad tp_size")),
        "SGLang refused the engine settings: bad tp_size",
    )


class SeededEngine:
    """SGLang's sampling under deterministic inference, in miniature: the token at sequence
    position ``i`` is drawn from a hash of (``sampling_seed``, ``i − 1``) — whatever request it
    belongs to — and a request without a seed gets 42.  Results have the real ``meta_info``
    shape."""

    VOCAB = 40

    def __init__(self):
        self.requests = 0

    def _draw(self, seed: int, pos: int) -> tuple[int, list[list]]:
        rng = np.random.default_rng([seed, pos])
        lps = np.sort(np.log(rng.dirichlet(np.full(20, 0.5))))[::-1]
        tok = 2 if pos > 84 and rng.random() < 0.1 else int(rng.integers(3, self.VOCAB))
        return tok, [[float(lp), int(t), None] for lp, t in zip(lps, range(3, 23))]

    def generate(self, input_ids, sampling_params, return_logprob=False, top_logprobs_num=None):
        outs = []
        for ids, sp in zip(input_ids, sampling_params):
            self.requests += 1
            seed = sp.get("sampling_seed", 42)
            out, tops = [], []
            for k in range(sp["max_new_tokens"]):
                tok, top = self._draw(seed, len(ids) + k - 1)
                out.append(tok)
                tops.append(top)
                if tok == 2:
                    break
            finish = (
                {"type": "stop", "matched": 2}
                if out[-1] == 2
                else {"type": "length", "length": sp["max_new_tokens"]}
            )
            meta = {
                "id": f"r{self.requests}",
                "finish_reason": finish,
                "prompt_tokens": len(ids),
                "weight_version": "default",
                "num_retractions": 0,
            }
            if return_logprob:
                meta["input_token_logprobs"] = []
                meta["output_token_logprobs"] = [(t[0][0], o, None) for t, o in zip(tops, out)]
                meta["output_token_logprobs_length"] = len(out)
                meta["input_top_logprobs"] = []
                meta["output_top_logprobs"] = [[tuple(e) for e in t] for t in tops]
            meta.update(reasoning_tokens=0, completion_tokens=len(out), cached_tokens=0)
            meta.update(cached_tokens_details=None, e2e_latency=0.01)
            outs.append({"text": None, "output_ids": out, "meta_info": meta})
        return outs

    def get_server_info(self):
        return {**SESSION["server_info"]}


def test_traces_depend_on_seed_question_and_trace_only_not_on_the_checkpoint_grid():
    """One seed per trace: the same trace whatever the spacing, the shard or the batch; distinct
    traces within a question."""

    def traces(spacing, n, first=0, seed=3, problem=PROBLEM):
        be = make_backend(SeededEngine(), max_tokens=64)
        batch = be.start(problem, n, seed, first)
        run_batch(batch, spacing, max_tokens=64)
        return {first + j: (batch.token_ids(j), batch.result(j).confs) for j in range(n)}

    base = traces(8, 4)
    for other in (traces(5, 4), traces(16, 2, first=2), traces(64, 1, first=1)):
        for t, (ids, confs) in other.items():
            assert ids == base[t][0] and np.array_equal(confs, base[t][1])
    ids = [base[t][0] for t in range(4)]
    assert len({tuple(x) for x in ids}) == 4  # no two traces alike
    assert any(x[-1] == 2 for x in ids) and any(len(x) == 64 for x in ids)
    # another seed or another question: other traces
    assert traces(8, 1, seed=4)[0][0] != ids[0]
    q1 = Problem(qid=1, question=PROBLEM.question, answer="5", dataset="toy")
    assert traces(8, 1, problem=q1)[0][0] != ids[0]
    # what the refused setting would do: SGLang's default seed 42 for every request
    seedless = SeededEngine()
    same = seedless.generate([[1, 2, 3]] * 3, [{"max_new_tokens": 8}] * 3)
    assert same[0]["output_ids"] == same[1]["output_ids"] == same[2]["output_ids"]


# -- context length checked upfront (issue 13, item 17) ------------------------------------------


def test_a_question_that_cannot_fit_the_context_is_refused_before_any_request(tmp_path):
    # longest request: prompt 40 + 24 trace tokens + suffix 26 + 50 probe tokens = 140;
    # SGLang serves input + max_new_tokens <= context length - 2 in full
    eng = ReplayEngine(SESSION["exchanges"], context_len=141)
    be = make_backend(eng)
    text = _one_line_error(
        lambda: be.start(PROBLEM, 3, SESSION["seed"]),
        "question 0: prompt 40 + max tokens 24 + probe suffix 26 + probe tokens 50 = 140",
        "context length 141",
        "(139)",
        "--max-tokens 23",
    )
    assert text.startswith("question 0")
    _one_line_error(lambda: be.check_context(PROBLEM), "= 140 tokens")
    assert eng.calls == []
    # nothing generated by generate_pool either
    with pytest.raises(MarsError, match="question 0"):
        generate_pool(be, [PROBLEM], out=tmp_path / "p", n_traces=3, seed=7, spacing=8)
    assert eng.calls == [] and not list(tmp_path.rglob("*.parquet"))
    # exactly enough: runs
    _, records = run(make_backend(ReplayEngine(SESSION["exchanges"], context_len=142)))
    assert [r.result.length for r in records] == [15, 24, 16]
    # a KV pool smaller than the context length is the limit then
    small_pool = ReplayEngine(SESSION["exchanges"], server_info={"max_total_num_tokens": 100})
    _one_line_error(
        lambda: make_backend(small_pool).start(PROBLEM, 3, 7), "KV pool of 100 tokens", "(98)"
    )
    # a prompt that alone is too long
    _one_line_error(
        lambda: make_backend(ReplayEngine([], context_len=60)).start(PROBLEM, 1, 7),
        "the prompt alone is too long",
    )
    # an engine that reports no context length: no check (nothing to check against)
    _, records = run(make_backend(ReplayEngine(SESSION["exchanges"], context_len=None)))
    assert len(records) == 3


# -- the probe stage: stored traces probed again (issue 16) --------------------------------------

PROBE = json.loads((DATA / "probe_toy_q0.json").read_text())


def _probe_stage_pool(tmp_path):
    """The fixtures' traces generated without probes (``--probe none``) into a pool."""
    gen = make_backend(ReplayEngine(PROBE["generation"]))
    return generate_pool(
        gen,
        [PROBLEM],
        SESSION["n_traces"],
        SESSION["seed"],
        tmp_path / "gen",
        probe="none",
    )


def test_probe_stage_requests_go_tier_by_tier_with_exact_prefixes_and_read_cached_tokens(
    tmp_path,
):
    from mars.engines.probe import probe_pool

    pool = _probe_stage_pool(tmp_path)
    stored = pq.read_table(pool / schema.trace_file_name(0)).to_pylist()
    assert all(r["probes"] == [] and len(r["token_ids"]) == r["length"] for r in stored)
    be = make_backend(ReplayEngine(PROBE["probing"]))
    out = probe_pool(pool, tmp_path / "probed", be, spacing=PROBE["spacing"])
    eng = be.engine
    prompt, suffix = be.prompt_ids(PROBLEM.question), be.suffix_ids
    ids = {r["trace_idx"]: r["token_ids"] for r in stored}
    # one engine call per tier: every trace's 1st probe, then every 2nd, then the 3rd
    tiers = []
    for call in eng.calls:
        tier = []
        for req in call:
            body = req["input_ids"][len(prompt) :]
            assert req["input_ids"][: len(prompt)] == prompt and body[-len(suffix) :] == suffix
            d = len(body) - len(suffix)
            t = next(t for t, x in ids.items() if x[:d] == body[:d] and d <= len(x))
            # exactly the prompt + the trace's first d generated ids + the suffix
            assert req["input_ids"] == prompt + ids[t][:d] + suffix
            sp = req["sampling_params"]
            assert sp["sampling_seed"] == probe_seed(SESSION["seed"], PROBLEM.qid, t, d)
            assert sp["max_new_tokens"] == 50 and not req["return_logprob"]
            tier.append((t, d))
        tiers.append(tier)
    assert tiers == [[(0, 8), (1, 8), (2, 8)], [(0, 15), (1, 16), (2, 16)], [(1, 24)]]
    # the engine's token counts land in the pool: each later probe finds its previous prefix
    rows = pq.read_table(out / schema.trace_file_name(0)).to_pylist()
    got = [[[p["position"], p["answer"], p["cached_tokens"]] for p in r["probes"]] for r in rows]
    assert got == PROBE["expected"]
    for r in rows:
        for prev, p in zip(r["probes"], r["probes"][1:]):
            assert p["cached_tokens"] == len(prompt) + prev["position"]
        for p in r["probes"]:
            assert p["prompt_tokens"] == len(prompt) + p["position"] + len(suffix)
    assert be.stats["probe_cached_tokens"] == sum(p[2] for r in got for p in r)
    # at the generation's spacing: the answers inline probing gave (a terminal probe added)
    inline = [[p[:2] for p in e["probes"]] for e in SESSION["expected"]]
    assert [
        [p[:2] for p in r if p[0] % 8 == 0 and p[0] < n] for r, n in zip(got, [15, 24, 16])
    ] == (inline)
    m = json.loads((out / schema.POOL_MANIFEST).read_text())
    assert m["probe"]["probe_input"] == "token ids as generated"
    assert m["probe"]["probe_order"].startswith("tier by tier")
    assert m["probe"]["probe_suffix"] == PROBE_SUFFIX and m["spacing"] == 8
    # the pool records the tokenizer's vocabulary: no tokenizer had to be loaded to compare
    assert json.loads((pool / schema.POOL_MANIFEST).read_text())["tokenizer_vocab"].startswith(
        "sha256:"
    )


def test_probe_stage_waves_keep_tiers_within_a_wave(tmp_path):
    """A KV pool too small for every trace's prefix at once: traces go in waves (here one trace
    each), tier by tier within a wave."""
    from mars.engines.probe import probe_pool

    pool = _probe_stage_pool(tmp_path)
    small = ReplayEngine(PROBE["probing"], server_info={"max_total_num_tokens": 300})
    be = make_backend(small)
    assert be.wave_size(3, 140) == 1 and make_backend().wave_size(3, 140) == 3
    assert make_backend(probe_wave=2).wave_size(3, 140) == 2
    probe_pool(pool, tmp_path / "probed", be, spacing=PROBE["spacing"])
    sizes = [len(c) for c in small.calls]
    lengths = [len(c[0]["input_ids"]) for c in small.calls]
    assert sizes == [1] * 7 and lengths == [74, 81, 74, 82, 90, 74, 82]
    # requests per engine call are capped
    be = make_backend(ReplayEngine(PROBE["probing"]), probe_batch_size=2)
    probe_pool(pool, tmp_path / "probed2", be, spacing=PROBE["spacing"])
    assert [len(c) for c in be.engine.calls] == [2, 1, 2, 1, 1]


def test_probe_stage_reencodes_traces_of_another_vocabulary():
    """Traces stored in another vocabulary: each prefix is decoded with the generator's tokenizer
    and encoded with the probe model's; the probe sees the same text (EOS, a special token, left
    out), and the provenance says so."""
    from mars.engines.base import GeneratorInfo, StoredTrace
    from mars.engines.probe import probe_positions

    gen_rows = PROBE["generation"]  # one request per trace, to the cap
    other = toy.ToyTokenizer(PROBE["other_vocab"], SESSION["eos_token_id"])
    be = make_backend(ReplayEngine(PROBE["reencoded"]), generator_tokenizer=other)
    prompt_len = len(be.prompt_ids(PROBLEM.question))
    traces = []
    for t, ex in enumerate(gen_rows):
        mine = ex["response"]["output_ids"]
        theirs = other.encode(be.tokenizer.decode(mine))  # the same text in the other vocabulary
        assert theirs != mine and other.decode(theirs) == be.tokenizer.decode(mine)
        traces.append(StoredTrace(t, len(theirs), np.array(theirs, np.int32)))
    positions = [probe_positions(t.length, PROBE["spacing"]) for t in traces]
    gen = GeneratorInfo(PROBE["other_manifest"])
    res = be.reprobe(PROBLEM, traces, positions, gen)
    got = [
        [[int(d), r.answer, r.cached_tokens] for d, r in zip(p, rs)]
        for p, rs in zip(positions, res)
    ]
    assert got == PROBE["expected_reencoded"]
    assert be.describe_probe()["probe_input"] == "re-encoded from toy/Other-Reasoner"
    for call in be.engine.calls:
        for req in call:
            body = req["input_ids"][prompt_len : -len(be.suffix_ids)]
            # the probe model's prefix spells the generator's prefix (no special tokens)
            assert any(
                be.tokenizer.decode(body)
                == other.decode(t.token_ids[:d].tolist(), skip_special_tokens=True)
                for t, ps in zip(traces, positions)
                for d in ps
            )


def test_probe_stage_refuses_a_probe_model_too_short_before_any_request(tmp_path):
    from mars.engines.probe import probe_pool

    pool = _probe_stage_pool(tmp_path)
    # trace 1 (24 tokens) probed at its end: prompt 40 + 24 + suffix 26 + 50 = 140 > 139 - 2
    eng = ReplayEngine(PROBE["probing"], context_len=139)
    text = _one_line_error(
        lambda: probe_pool(pool, tmp_path / "probed", make_backend(eng), spacing=8),
        "question 0, trace 1: the probe at position 24 needs prompt 40 + 24 trace tokens + probe "
        "suffix 26 + probe tokens 50 = 140 tokens",
        "context length 139",
    )
    assert text.startswith("question 0, trace 1")
    assert eng.calls == [] and not (tmp_path / "probed").exists()
    # exactly enough room: probes
    ok = ReplayEngine(PROBE["probing"], context_len=142)
    probe_pool(pool, tmp_path / "probed", make_backend(ok), spacing=8)
    assert len(ok.calls) == 3
