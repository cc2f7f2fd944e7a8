"""The probe stage through SGLang (mars/engines/sglang.py): stored traces probed again (issue 16),
tier by tier with exact prefixes, against the recorded outputs of tests/data/sglang/."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq

from engines.sglang_replay import (
    DATA,
    PROBLEM,
    SESSION,
    ReplayEngine,
    _one_line_error,
    make_backend,
    toy,
)
from mars.engines.sglang import (
    probe_seed,
)
from mars.engines.tokens import PROBE_SUFFIX
from mars.generate import generate_pool
from mars.store import schema
from mars.store.grid import Grid

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
    from mars.generate import probe_pool

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
    from mars.generate import probe_pool

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
    positions = [Grid(PROBE["spacing"]).probe_positions(t.length) for t in traces]
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
    from mars.generate import probe_pool

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
