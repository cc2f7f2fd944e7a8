"""The probe stage through the transformers engine: stored traces probed again (issue 16), on the
tiny models and on SmolLM2-135M, by a probe model of the same or another vocabulary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")  # transformers needs it to load GGUF files

from engines.transformers.common import (  # noqa: E402
    GGUF,
    Q2,
    REPO,
    SPACING,
    Q,
    assert_probed_like_inline,
    smol_test,
    tiny_backend,
    tiny_model,
    trace_rows,
    with_settings,
)
from mars.engines.transformers import (  # noqa: E402
    TransformersBackend,
)
from mars.generate import generate_pool  # noqa: E402
from mars.store import schema  # noqa: E402
from mars.store.pool import open_pool  # noqa: E402

# -- the probe stage: stored traces probed again (issue 16) --------------------------------------


def test_probe_stage_at_the_generation_spacing_equals_inline_probing_tiny(tiny, tmp_path):
    """Cheap (not slow): `generate --probe none` + `mars probe` on a tiny model = inline probing,
    with the KV cache branched (default) or every probe prefilled from scratch."""
    from mars.generate import probe_pool

    be = tiny_backend(tiny["a"])
    inline = generate_pool(be, [Q, Q2], 3, 5, tmp_path / "inline", spacing=SPACING)
    bare = generate_pool(be, [Q, Q2], 3, 5, tmp_path / "bare", spacing=SPACING, probe="none")
    pbe = tiny_backend(tiny["a"])
    out = probe_pool(bare, tmp_path / "probed", pbe, spacing=SPACING)
    n = assert_probed_like_inline(inline, out, be, [Q, Q2])
    assert n > 0
    m = json.loads((out / schema.POOL_MANIFEST).read_text())
    assert m["probe"]["probe_input"] == "token ids as generated"
    assert m["probe"]["model_path"] == str(tiny["a"]) and m["spacing"] == SPACING
    # each trace's tokens went through the model once (not once per probe)
    assert pbe.stats["reprobe_trace_tokens"] == sum(
        r["length"] for q in (0, 1) for r in trace_rows(bare, q)
    )
    # naive re-prefill: the same probes, nothing cached
    full_be = tiny_backend(tiny["a"], probe_kv_reuse=False)
    full = probe_pool(bare, tmp_path / "full", full_be, spacing=SPACING)
    for q in (0, 1):
        for a, b in zip(trace_rows(out, q), trace_rows(full, q)):
            for x, y in zip(a["probes"], b["probes"], strict=True):
                assert y["cached_tokens"] == 0 and {**x, "cached_tokens": 0} == y
    assert full_be.stats["reprobe_trace_tokens"] == 0
    assert full_be.stats["prefill_tokens"] > pbe.stats["prefill_tokens"]


def _record_prefills(be: TransformersBackend) -> list[list[int]]:
    """Every sequence the model prefills from scratch (no cache), one list per row."""
    seen: list[list[int]] = []
    forward = be._forward

    def recording(ids, cache=None, last_only=True):
        if cache is None:
            seen.extend(ids.tolist())
        return forward(ids, cache, last_only)

    be._forward = recording  # type: ignore[method-assign]
    return seen


def test_a_probe_model_of_another_vocabulary_sees_the_generators_text(tiny, tmp_path):
    """Cheap: traces of tiny model a probed by tiny model b (another vocabulary): each prefix is
    the generator's text re-encoded by b's tokenizer after b's own chat template; with a model of
    a's vocabulary (a2) the ids go in as they are.  KV reuse and re-prefill agree."""
    from mars.engines.tokens import prefix_text
    from mars.generate import probe_pool

    gen = tiny_backend(tiny["a"])
    pool = generate_pool(gen, [Q], 4, 5, tmp_path / "gen", probe="none")
    m = json.loads((pool / schema.POOL_MANIFEST).read_text())
    assert m["model_path"] == str(tiny["a"]) and m["tokenizer_vocab"] == gen.vocab_digest()
    rows = trace_rows(pool)
    a_tok = gen.tokenizer
    for name, reencoded in (("b", True), ("a2", False)):
        full_be = tiny_backend(tiny[name], probe_kv_reuse=False)
        assert (full_be.vocab_digest() != gen.vocab_digest()) == reencoded
        seen = _record_prefills(full_be)
        full = probe_pool(pool, tmp_path / f"{name}-full", full_be, spacing=SPACING)
        tok, prompt, suffix = full_be.tokenizer, full_be.prompt_ids(Q.question), full_be.suffix_ids
        assert tok.decode(prompt).startswith("<|im_start|>user\n" + Q.question)
        want_texts, want_ids = [], []
        for r in rows:
            for d in [p["position"] for p in trace_rows(full)[r["trace_idx"]]["probes"]]:
                text = prefix_text(a_tok, r["token_ids"], d)
                plain = a_tok.decode(r["token_ids"][:d], skip_special_tokens=True)
                assert text == plain or (plain.endswith("\ufffd") and plain.startswith(text))
                want_texts.append(text)
                want_ids.append(
                    tok.encode(text, add_special_tokens=False) if reencoded else r["token_ids"][:d]
                )
        assert len(seen) == len(want_ids) and all(
            s[: len(prompt)] == prompt and s[len(s) - len(suffix) :] == suffix for s in seen
        )
        bodies = [s[len(prompt) : len(s) - len(suffix)] for s in seen]
        assert sorted(bodies) == sorted(want_ids)
        # what the probe model saw spells the generator's prefix
        assert sorted(tok.decode(b, skip_special_tokens=True) for b in bodies) == sorted(want_texts)
        probe = json.loads((full / schema.POOL_MANIFEST).read_text())["probe"]
        assert probe["probe_input"] == (
            f"re-encoded from {tiny['a']}" if reencoded else "token ids as generated"
        )
        # the KV-cache path (a re-encoded prefix may depart from the previous one at its end:
        # the cache is cut back) gives the same probes
        kv_be = tiny_backend(tiny[name])
        kv = probe_pool(pool, tmp_path / f"{name}-kv", kv_be, spacing=SPACING)
        for a, b in zip(trace_rows(kv), trace_rows(full)):
            for x, y in zip(a["probes"], b["probes"], strict=True):
                assert x["cached_tokens"] == x["prompt_tokens"] - len(suffix)
                assert {**x, "cached_tokens": 0} == y
        assert kv_be.stats["prefill_tokens"] < full_be.stats["prefill_tokens"]


def test_a_probe_that_cannot_fit_the_probe_model_is_refused_before_any_work(tiny, tmp_path):
    """Cheap: prompt + a trace + suffix + probe tokens must fit the probe model's
    max_position_embeddings, the trace counted in the probe model's tokens.  With the generator's
    vocabulary the longest trace is checked before the output is touched; re-encoded, each
    trace's count is known once its text is encoded: the longest stored trace is checked
    upfront, every trace before its question's first forward pass."""
    from transformers import AutoTokenizer

    from mars.engines.tokens import prefix_text
    from mars.errors import MarsError
    from mars.generate import probe_pool

    gen = tiny_backend(tiny["a"])
    pool = generate_pool(gen, [Q], 3, 5, tmp_path / "gen", probe="none")
    rows = trace_rows(pool)
    for name in ("a", "b"):
        tok = AutoTokenizer.from_pretrained(tiny[name])
        probe_be = tiny_backend(tiny[name])
        fixed = len(probe_be.prompt_ids(Q.question)) + len(probe_be.suffix_ids) + 6

        def count(r, name=name, tok=tok):
            if name == "a":
                return r["length"]
            text = prefix_text(gen.tokenizer, r["token_ids"], r["length"])
            return len(tok.encode(text, add_special_tokens=False))

        worst = max(rows, key=count)
        need = fixed + count(worst)
        for room in (need - 1, need):
            be = TransformersBackend(
                model=tiny_model(tok, positions=room),
                tokenizer=tok,
                name=str(tiny[name]),
                device="cpu",
                probe_max_new_tokens=6,
            )
            out = tmp_path / f"{name}{room}"
            if room == need:
                probe_pool(pool, out, be, spacing=SPACING)
                assert len(trace_rows(out)) == 3
                continue
            with pytest.raises(MarsError) as err:
                probe_pool(pool, out, be, spacing=SPACING)
            msg = str(err.value)
            assert "\n" not in msg and msg.startswith(
                f"question 0, trace {worst['trace_idx']}: the probe at position "
                f"{worst['length']} needs prompt "
            )
            assert f"= {need} tokens, more than the model's max_position_embeddings {room}" in msg
            assert ("(re-encoded)" in msg) == (name == "b")
            assert be.stats["forward_calls"] == 0
            assert not out.exists()  # re-encoded: refused while probing, and undone


@pytest.fixture(scope="module")
def bare_pair(tiny, tmp_path_factory):
    """Two questions of two traces each, generated without probes (token ids kept)."""
    root = tmp_path_factory.mktemp("bare-pair")
    gen = tiny_backend(tiny["a"])
    return generate_pool(gen, [Q, Q2], 2, 5, root / "gen", probe="none")


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda ids: None, "no token ids to probe"),
        (lambda ids: ids[:-1], "{short} token ids for length {length}"),
        (
            lambda ids: [ids[0], 10**6, *ids[2:]],
            "token id 1000000 at position 1 is outside the probe model's vocabulary (0..299)",
        ),
    ],
    ids=["null", "too short", "outside the vocabulary"],
)
def test_token_ids_refused_while_probing_leave_nothing_behind(
    tiny, bare_pair, tmp_path, damage, message
):
    """Cheap: a pool whose manifest says it kept token ids is not scanned upfront; token ids that
    are missing, too short or not the probe model's (an IndexError before) are refused when their
    question comes, in one line, and what the command wrote is undone (question 0, probed
    first), so the corrected command runs into the same folder."""
    import shutil

    import pyarrow as pa

    from mars.errors import MarsError
    from mars.generate import probe_pool

    assert open_pool(bare_pair).manifest["token_ids"] is True
    pool = shutil.copytree(bare_pair, tmp_path / "damaged")
    path = pool / schema.trace_file_name(1)
    table = pq.read_table(path)
    ids = table["token_ids"].to_pylist()
    length = len(ids[0])
    ids[0] = damage(ids[0])
    column = pa.array(ids, pa.list_(pa.int32()))
    pq.write_table(
        table.set_column(table.column_names.index("token_ids"), "token_ids", column), path
    )
    out = tmp_path / "probed"
    with pytest.raises(MarsError) as err:
        probe_pool(pool, out, tiny_backend(tiny["a"]), spacing=SPACING)
    assert str(err.value) == "question 1, trace 0: " + message.format(
        short=length - 1, length=length
    )
    assert not out.exists()


def test_the_probe_stage_shows_the_probe_model_the_generators_prompt(tiny, tmp_path):
    """Cheap: traces generated under a custom prompt and system prompt are probed under that
    prompt (the probe backend built from the pool's manifest), so the probes equal inline ones."""
    from mars.generate import probe_backend, probe_pool

    custom = {"prompt_template": "Solve it: {question}", "system_prompt": "Be brief."}
    gen = tiny_backend(tiny["a"], **custom)
    inline = generate_pool(gen, [Q], 2, 5, tmp_path / "inline", spacing=SPACING)
    bare = generate_pool(gen, [Q], 2, 5, tmp_path / "bare", spacing=SPACING, probe="none")
    be = probe_backend(open_pool(bare).manifest, probe_max_new_tokens=6, device="cpu")
    assert isinstance(be, TransformersBackend)
    assert (be.prompt_template, be.system_prompt) == tuple(custom.values())
    assert (
        be.prompt_ids(Q.question)
        == gen.prompt_ids(Q.question)
        != tiny_backend(tiny["a"]).prompt_ids(Q.question)
    )
    out = probe_pool(bare, tmp_path / "probed", be, spacing=SPACING)
    assert assert_probed_like_inline(inline, out, gen, [Q]) > 0


def test_probe_cli_refuses_traces_without_token_ids(tiny, tmp_path):
    """Cheap: a pool generated with --no-token-ids cannot be probed by a token-level engine: one
    line, exit 2, nothing written."""
    from typer.testing import CliRunner

    from mars.cli import app

    gen = tiny_backend(tiny["a"])
    pool = generate_pool(gen, [Q], 2, 5, tmp_path / "gen", spacing=SPACING, token_ids=False)
    out = tmp_path / "probed"
    res = CliRunner().invoke(app, ["probe", str(pool), "--out", str(out), "--spacing", "8", "-q"])
    assert res.exit_code == 2, res.output
    errors = [x for x in res.output.splitlines() if x.startswith("error:")]  # (and model loading)
    assert len(errors) == 1 and "question 0, trace 0: no token ids to probe" in errors[0]
    assert not out.exists()


@smol_test
def test_probe_stage_at_the_generation_spacing_equals_inline_probing(smol, tmp_path):
    """`generate --probe none` + `mars probe` (same model, same spacing) on SmolLM2 gives every
    trace the probes inline probing gave it, byte for byte: the traces' forward passes here run
    as chunked prefills, not one token at a time, and on this CPU the sampled probe tokens come
    out the same."""
    from mars.generate import probe_pool

    be, _ = smol
    gen = with_settings(be, batch_size=4)
    inline = generate_pool(gen, [Q, Q2], 4, 3, tmp_path / "inline", spacing=SPACING)
    bare = generate_pool(gen, [Q, Q2], 4, 3, tmp_path / "bare", spacing=SPACING, probe="none")
    prober = with_settings(be, batch_size=4)
    out = probe_pool(bare, tmp_path / "probed", prober, spacing=SPACING)
    assert assert_probed_like_inline(inline, out, gen, [Q, Q2]) >= 8
    assert prober.stats["reprobe_trace_tokens"] == sum(
        r["length"] for q in (0, 1) for r in trace_rows(bare, q)
    )


@smol_test
def test_probe_kill_and_resume_equals_an_uninterrupted_run(smol, tmp_path, monkeypatch):
    """`mars probe` killed (SIGKILL) after its first question and run again: the finished
    question is kept, the rest probed, the result identical to an uninterrupted run."""
    from mars.engines.factory import make_backend
    from mars.generate import probe_pool

    _, model_dir = smol
    gen = TransformersBackend(
        model_dir, device="cpu", max_tokens=16, batch_size=1, probe_max_new_tokens=6
    )
    pool = generate_pool(gen, [Q, Q2], 2, 3, tmp_path / "gen", probe="none")
    out = tmp_path / "probed"
    env = {
        **os.environ,
        "MARS_BACKEND_OPTIONS": json.dumps({"batch_size": 1, "device": "cpu"}),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    cmd = [sys.executable, "-m", "mars.cli", "probe", str(pool), "--out", str(out)]
    cmd += ["--spacing", "4", "--max-new-tokens", "6", "-q"]
    first, second = out / schema.trace_file_name(0), out / schema.trace_file_name(1)
    proc = subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 300
        while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert first.exists(), (
            proc.communicate()[0].decode()[-2000:] if proc.poll() is not None else "timeout"
        )
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not second.exists() and not (out / schema.POOL_MANIFEST).exists()
    stamp = first.stat().st_mtime_ns
    res = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert first.stat().st_mtime_ns == stamp  # the finished question kept, not probed again
    assert open_pool(out).qids == [0, 1]
    # uninterrupted, in this process, with the same settings
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", env["MARS_BACKEND_OPTIONS"])
    ref_be = make_backend("transformers", model=str(model_dir), probe_max_new_tokens=6)
    ref = probe_pool(pool, tmp_path / "ref", ref_be, spacing=4)
    for q in (0, 1):
        a = pq.read_table(out / schema.trace_file_name(q))
        b = pq.read_table(ref / schema.trace_file_name(q))
        assert a.equals(b), f"question {q} differs after kill and resume"
        assert all(len(p) >= 4 for p in a.column("probes").to_pylist())
    ma = json.loads((out / schema.POOL_MANIFEST).read_text())
    mb = json.loads((ref / schema.POOL_MANIFEST).read_text())
    assert ma == mb and ma["probe"]["probe_input"] == "token ids as generated"


@smol_test
def test_smollm2_and_a_model_of_another_vocabulary_probe_each_others_traces(smol, tiny, tmp_path):
    """SmolLM2 traces (its GGUF file: the generator's tokenizer is loaded from it) probed by a
    tiny model of another vocabulary, and the tiny model's traces probed by SmolLM2: each
    prefix the probe model sees decodes to the generator's prefix text (but for characters the
    probe model's tokenizer has no tokens for: SmolLM2's converted tokenizer drops a few control
    characters, which the tiny model's random traces hold)."""
    from mars.engines.tokens import prefix_text
    from mars.generate import probe_pool

    be, model_dir = smol
    tiny_gen = tiny_backend(tiny["b"])
    cases = [
        (with_settings(be), tiny_backend(tiny["b"], probe_kv_reuse=False), str(GGUF)),
        (
            tiny_gen,
            TransformersBackend(
                model_dir, device="cpu", probe_max_new_tokens=4, probe_kv_reuse=False
            ),
            str(tiny["b"]),
        ),
    ]
    for k, (gen, prober, source) in enumerate(cases):
        pool = generate_pool(gen, [Q], 2, 7, tmp_path / f"gen{k}", probe="none")
        seen = _record_prefills(prober)
        out = probe_pool(pool, tmp_path / f"probed{k}", prober, spacing=SPACING)
        probe = json.loads((out / schema.POOL_MANIFEST).read_text())["probe"]
        assert probe["probe_input"] == f"re-encoded from {source}"
        prompt = prober.prompt_ids(Q.question)
        tok = prober.tokenizer
        texts = sorted(
            "".join(
                c
                for c in prefix_text(gen.tokenizer, r["token_ids"], p["position"])
                if tok.decode(tok.encode(c, add_special_tokens=False)) == c
            )
            for r in trace_rows(out)
            for p in r["probes"]
        )
        bodies = [s[len(prompt) : len(s) - len(prober.suffix_ids)] for s in seen]
        assert all(s[: len(prompt)] == prompt for s in seen) and len(seen) == len(texts)
        assert sorted(prober.tokenizer.decode(b, skip_special_tokens=True) for b in bodies) == texts
        assert all(t for t in texts[1:])  # real text, not empty prefixes
