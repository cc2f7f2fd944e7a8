"""The SGLang adapter (mars/engines/sglang.py) against hand-built engine outputs
(tests/data/sglang/, replayed by a fake engine: tests/engines/sglang_replay.py).

No live SGLang runs here: the fixtures follow the shape of ``sglang.Engine.generate`` results as
SGLang 0.5.23's source builds them (and, converted, 0.5.9's; see tests/data/sglang/toy.py and
research/engines/results/sglang.md).  The fake engine answers a request only
if it matches a recorded one exactly (token ids, sampling parameters, logprob options), so these
tests pin the request protocol (token-id prompts, continuation from prompt + trace, probe = prompt +
trace[:p] + the exact suffix, ≤ 50 new tokens, same sampling, per-trace seeds) as well as the
parsing of ``meta_info``; and a question that cannot fit the context is refused upfront."""

from __future__ import annotations

import copy
import importlib.util
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from engines.sglang_replay import (
    NONDET,
    PROBLEM,
    SESSION,
    ReplayEngine,
    _key,
    _one_line_error,
    _tuples,
    make_backend,
    run,
    toy,
)
from mars.engines.sglang import (
    EngineOutputError,
    parse_generation,
    probe_seed,
    trace_seed,
)
from mars.engines.tokens import LOGPROB_FLOOR, PROBE_SUFFIX
from mars.errors import MarsError
from mars.generate import generate_pool
from mars.method.answers import normalize_answer
from mars.store import schema
from mars.store.consolidate import consolidate
from mars.store.pool import open_pool


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
    from mars.live import plan_for, solve

    be = make_backend()
    run = solve(
        be,
        PROBLEM,
        plan_for(
            be,
            "sc-consensus",
            n_traces=SESSION["n_traces"],
            warmup=0,
            seed=SESSION["seed"],
            spacing=SESSION["spacing"],
            consensus=0.5,
        ),
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

    be = make_backend()
    full = solve(
        be,
        PROBLEM,
        plan_for(
            be,
            "sc",
            n_traces=SESSION["n_traces"],
            warmup=0,
            seed=SESSION["seed"],
            spacing=SESSION["spacing"],
        ),
    )
    assert (full.stopped_by, full.tokens, full.answer) == (
        "budget",
        15 + 24 + 16,
        "5",
    ) and full.replay_ok


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
