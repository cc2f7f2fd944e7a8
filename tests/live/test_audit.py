"""The audit of a stopped question (mars/live/audit.py) and its statistics (mars/method/audit.py):
stopped traces taken back and run to their end are the traces the full budget runs (the synthetic
engine, and every server kind from its token ids, request for request); the bounds are exact; the
alarm fires when the promise is in doubt and not before; and `mars audit` reads a live run, a pool
of whole traces and a simulation into the same numbers as the live loop gives."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom
from typer.testing import CliRunner

from mars.cli import app as cli
from mars.engines.base import StoredTrace
from mars.engines.generate import run_batch
from mars.errors import MarsError
from mars.generate import generate_pool
from mars.live import plan_for, solve, solve_pool
from mars.live.audit import audit_paths, complete_question
from mars.method.audit import (
    ALARM,
    HOLDS,
    UNVERIFIED,
    Tally,
    audits_to_vouch,
    clopper_pearson_lower,
    clopper_pearson_upper,
    risk_target,
)
from mars.method.registry import live_method
from mars.store.grid import Grid
from mars.store.problems import Problem

PROBLEMS = [Problem(q, f"question {q}", str(100 + q), "served") for q in range(6)]
#: the main traces' methods a live run stops with: all at once, pruning as it goes, in launches
METHODS = ("sc-mars-cal", "sc-pp-faithful", "sc-mars2-launch", "sc-consensus")


def test_the_bounds_are_exact_and_the_targets_each_methods_own():
    for k, n in ((0, 10), (1, 12), (7, 40), (99, 100)):
        up, low = clopper_pearson_upper(k, n), clopper_pearson_lower(k, n)
        assert binom.cdf(k, n, up) == pytest.approx(0.05, abs=1e-9)
        if k:
            assert binom.sf(k - 1, n, low) == pytest.approx(0.05, abs=1e-9)
    assert clopper_pearson_lower(0, 10) == 0 and clopper_pearson_upper(10, 10) == 1
    assert math.isnan(clopper_pearson_upper(0, 0)) and math.isnan(clopper_pearson_lower(0, 0))
    assert audits_to_vouch(0.1) == 29 and clopper_pearson_upper(0, 29) <= 0.1
    assert clopper_pearson_upper(0, 28) > 0.1
    assert risk_target(live_method("sc-mars2"), {}) == (0.1, "risk_alpha")
    assert risk_target(live_method("sc-mars2-launch"), {"risk_alpha": 0.03}) == (
        0.03,
        "risk_alpha",
    )
    from mars.method.registry import get_method

    assert risk_target(get_method("dco-mars2"), {}) == (0.02, "risk_alpha")
    assert risk_target(live_method("sc-mars-cert"), {}) == (0.05, "delta")
    assert risk_target(live_method("sc-mars-cert"), {"delta": 0.2}) == (0.2, "delta")
    assert risk_target(live_method("sc-mars-cal"), {}, 0.07) == (0.07, "audit_target")


def test_the_alarm_fires_when_the_promise_is_in_doubt_and_not_before():
    """Few audits: unverified whatever they say; 29 agreeing audits vouch for α = 0.1; a
    disagreement then raises the alarm (the bound rises above the target), agreement clears it.
    Traffic never vouched for raises it once its lower bound is above the target."""
    t = Tally(0.1)
    assert [t.add(False) for _ in range(28)] == [False] * 28 and t.state == UNVERIFIED
    assert not t.add(False) and t.state == HOLDS and t.vouched
    assert t.add(True) and t.state == ALARM and t.upper > 0.1 > t.lower
    assert not t.add(False) and t.alarm  # raised once, stays until the bound is back
    n = 0
    while t.alarm:
        t.add(False)
        n += 1
    assert t.state == HOLDS and t.upper <= 0.1 and t.audits == 46 == 31 + n
    bad = Tally(0.1)
    raised = [bad.add(i % 2 == 0) for i in range(12)]  # half of them disagree
    assert raised.index(True) == 2 and raised.count(True) == 1  # lower(2, 3) > 0.1
    assert bad.lower > 0.1 and bad.state == ALARM and not bad.vouched
    quiet = Tally(0.1)
    for i in range(25):  # 1 in 25: above the target's vouching, below its alarm
        quiet.add(i == 5)
    assert quiet.state == UNVERIFIED and not quiet.alarm


@pytest.mark.parametrize("method", METHODS)
def test_stopped_traces_run_on_are_the_traces_the_full_budget_runs(backend, method):
    """For every question, the completed question holds the very traces `--compare-full` runs
    (the same tokens) and its full-budget vote is that run's answer."""
    warmup = 0 if method in ("sc-pp-faithful", "sc-consensus") else 4
    knobs = {"wave_size": 4} if method == "sc-mars2-launch" else {}  # launches of 4 traces
    continued = unlaunched = 0
    for p in PROBLEMS:
        plan = plan_for(backend, method, n_traces=12, warmup=warmup, seed=3, spacing=2048,
                        max_tokens=16384, **knobs)  # fmt: skip
        run = solve(backend, p, plan, compare_full=True)
        done = complete_question(
            backend, p, run.table, plan, stopped=run.stopped_traces, launched=run.launched
        )
        unlaunched += 12 - (run.launched or 12)
        main = done.table.filter(np.asarray(done.table["trace_idx"].to_numpy() >= warmup))
        assert int(main["length"].to_numpy().sum()) == run.full["tokens"]
        assert done.full_answer == run.full["answer"]
        assert sorted(done.continued) == sorted(
            set(run.stopped_traces) | set(range(warmup + (run.launched or 12), warmup + 12))
        )
        continued += len(done.continued)
        was = {r["trace_idx"]: r for r in run.table.to_pylist()}
        for r in done.table.to_pylist():  # what was served is kept: its probes, its tokens
            old = was[r["trace_idx"]]
            assert r["probes"][: len(old["probes"])] == old["probes"]
            assert r["length"] >= old["length"]
    assert continued, f"{method} stopped no trace: nothing was run on"
    assert unlaunched or method != "sc-mars2-launch", "every launch ran: none was started"


@pytest.mark.parametrize("kind", ["llama.cpp", "vllm", "sglang", "llama-cpp-python"])
def test_a_server_continues_a_stopped_trace_from_its_token_ids_request_for_request(kind):
    """At a server, a stopped trace is taken back from its token ids: the requests that run it
    on are those it would have sent never stopped (the same prompts, the same seeds), so it ends
    as the uninterrupted trace does."""
    from engines.server.common import Q, backend, completions, fake

    server = fake.FakeServer(kind)
    be = backend(server, max_tokens=64)
    plan = plan_for(be, "sc-consensus", n_traces=6, warmup=0, seed=0, spacing=8, consensus=0.3)
    run = solve(be, Q, plan)
    assert run.stopped_traces
    n_before = len(completions(server))
    done = complete_question(be, Q, run.table, plan, stopped=run.stopped_traces, launched=None)
    asked = completions(server)[n_before:]
    assert asked and done.tokens > 0
    whole = run_batch(be.start(Q, 6, 0, 0), Grid(8), max_tokens=64)
    rows = {r["trace_idx"]: r for r in done.table.to_pylist()}
    for j, rec in enumerate(whole):
        got = rows[j]
        assert got["length"] == rec.result.length
        assert list(got["token_ids"]) == rec.result.token_ids.tolist()
        assert got["final_answer"] == rec.result.final_answer
        assert [p["answer"] for p in got["probes"]] == [pr.answer for _, pr in rec.probes]


def test_a_stopped_trace_without_token_ids_is_refused_in_one_line():
    from engines.server.common import Q, backend, fake

    batch = backend(fake.FakeServer("vllm"), max_tokens=64).start(Q, 2, 0, 0)
    with pytest.raises(MarsError, match="continued from its token ids and confidences"):
        batch.resume(0, StoredTrace(0, 8, token_ids=None, confs=np.zeros(8, np.float16)))


def test_mars_audit_reads_a_compare_full_live_run(backend, tmp_path):
    """`mars solve --compare-full`: every question's answer against its full-budget vote, the
    method's own target (MARS2: α); one without --compare-full has nothing to audit."""
    out = tmp_path / "live"
    rows = solve_pool(
        backend,
        PROBLEMS,
        out,
        plan_for(
            backend, "sc-mars-cert", n_traces=12, warmup=4, seed=1, spacing=2048, max_tokens=16384
        ),
        compare_full=True,
        progress=False,
    )
    report = audit_paths([out])
    s = report.summary()["methods"]["sc-mars-cert"]
    differ = sum(r["answer"] != r["full"]["answer"] for r in rows)
    assert (s["audits"], s["disagreements"], s["target"]) == (len(PROBLEMS), differ, 0.05)
    plain = tmp_path / "plain"
    solve_pool(
        backend,
        PROBLEMS[:1],
        plain,
        plan_for(
            backend, "sc-mars-cert", n_traces=12, warmup=4, seed=1, spacing=2048, max_tokens=16384
        ),
        progress=False,
    )
    res = CliRunner().invoke(cli, ["audit", str(plain)])
    assert res.exit_code == 2 and "--compare-full" in res.output and res.output.count("\n") == 1


def test_mars_audit_of_a_pool_of_whole_traces_decides_as_a_live_run(backend, tmp_path):
    """A generated pool holds the traces a live run of the same seed starts: each method's
    decision there, and the full-budget vote, are what the live run and --compare-full gave."""
    pool = generate_pool(backend, PROBLEMS, 16, 2, tmp_path / "pool", spacing=2048,
                         max_tokens=16384, progress=False)  # fmt: skip
    res = CliRunner().invoke(
        cli,
        ["audit", str(pool), "-m", "sc-mars-cal,sc-mars-cert", "--warmup", "4", "--traces", "12",
         "--out", str(tmp_path / "audit")],
    )  # fmt: skip
    assert res.exit_code in (0, 1), res.output
    rows = pd.read_csv(tmp_path / "audit" / "audits.csv", dtype=str, keep_default_na=False)
    per_q = pd.read_csv(tmp_path / "audit" / "per_question.csv")
    assert len(per_q) == 2 * len(PROBLEMS) and set(per_q.audits) == {1}
    summary = json.loads((tmp_path / "audit" / "audit.json").read_text())
    for method in ("sc-mars-cal", "sc-mars-cert"):
        mine = rows[rows.method == method].set_index("qid")
        for p in PROBLEMS:
            run = solve(
                backend,
                p,
                plan_for(
                    backend, method, n_traces=12, warmup=4, seed=2, spacing=2048, max_tokens=16384
                ),
                compare_full=True,
            )
            row = mine.loc[str(p.qid)]
            assert (row.answer or None, row.full_answer or None) == (
                run.answer,
                run.full["answer"],
            )
        assert summary["methods"][method]["audits"] == len(PROBLEMS)
    assert summary["methods"]["sc-mars-cert"]["target"] == 0.05


def test_mars_audit_reads_a_simulation_as_the_report_does(tmp_path):
    """A `mars simulate` output: each sample's stop against the full-budget vote of the same
    sample, counted as the report's risk audit counts."""
    from util import write_layout_pool

    pool = write_layout_pool(tmp_path / "pool", seed=3, n_questions=4)
    sim = tmp_path / "sim"
    res = CliRunner().invoke(
        cli,
        ["simulate", str(pool), "-m", "sc,sc-mars-cert,sc-mars-cal", "--budget", "8",
         "--iterations", "6", "--out", str(sim), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    report = audit_paths([sim])
    for method in ("sc-mars-cert", "sc-mars-cal"):
        a = pd.read_csv(sim / method / "per_iteration.csv", dtype={"answer": str},
                        keep_default_na=False)  # fmt: skip
        b = pd.read_csv(sim / "sc" / "per_iteration.csv", dtype={"answer": str},
                        keep_default_na=False)  # fmt: skip
        s = report.summary()["methods"][method]
        assert s["audits"] == len(a) == 24
        assert s["disagreements"] == int((a.answer.to_numpy() != b.answer.to_numpy()).sum())
    assert report.summary()["methods"]["sc-mars-cert"]["target"] == 0.05


def test_mars_audit_refuses_what_it_cannot_read_in_one_line(tmp_path):
    res = CliRunner().invoke(cli, ["audit", str(tmp_path / "nothing")])
    assert res.exit_code == 2 and res.output.startswith("error: ") and "no such" in res.output
    from util import write_layout_pool

    pool = write_layout_pool(tmp_path / "pool", seed=1, n_questions=2)
    res = CliRunner().invoke(cli, ["audit", str(pool)])
    assert res.exit_code == 2 and "name the methods to audit (-m)" in res.output
    record = tmp_path / "rec"
    record.mkdir()
    (record / "serve.json").write_text('{"kind": "mars-serve-record", "version": 1}')
    res = CliRunner().invoke(cli, ["audit", str(record)])
    assert res.exit_code == 2 and "no audited question" in res.output
