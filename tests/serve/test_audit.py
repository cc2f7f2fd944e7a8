"""The live audit of ``mars serve`` (mars/serve/audit.py) in front of the synthetic engine: a
seeded share of questions run on to their end after their answer, the full-budget vote compared,
counted apart, in its own bounded threads, dropped, preempted and cancelled so that it never
delays served traffic; the alarm on a kind of question whose calibration understates late
switches, none on a benign one; and drift closing the loop — a calibration learned on one kind of
traffic raising the alarm on another, the refit on the audited questions lowering the bound again.

The kinds of question are synthetic presets of one model (tests' own, below), served by one
upstream that tells them apart by how the prompt starts (:class:`Kinds`). Everything is seeded:
the numbers stated (audits before the alarm, audits without one) are what these seeds give."""

from __future__ import annotations

import json
import logging
import threading
import time

import httpx
import pytest

pytest.importorskip("openai")
pytest.importorskip("starlette")

from serving import serving

from mars.engines import cancel
from mars.engines.base import Backend
from mars.engines.synthetic import SyntheticBackend
from mars.live.audit import AUDIT_DIR, AUDITED_DIR, audit_paths
from mars.method.audit import audits_to_vouch
from mars.serve.audit import AuditOptions
from mars.serve.requests import Defaults, prompt_seed
from mars.serve.upstreams import Upstreams, synthetic_truth
from mars.store.pool import open_pool
from mars.store.problems import Problem
from serve.common import wait_for

FAST = Defaults(traces=16, warmup=4, spacing=2048, max_tokens=16384)
#: two kinds of question of one model, short traces (a question and its audit take ~0.1 s)
_COMMON = {"max_tokens": 8192, "len_median": 2500.0, "len_question_sd": 0.2,
           "len_trace_sd": 0.4, "min_tokens": 600}  # fmt: skip
#: benign: no early attractor, traces settle on their answer early
BENIGN = {
    "name": "benign",
    "model": "synthetic:kinds",
    "base": "qwen3-8b",
    "params": {**_COMMON, "skill": 0.9, "attractor_base": 0.0, "attractor_rate": 0.0,
               "conv_logit": -2.0, "conv_hard_slope": 0.0, "trap_frac": 0.0},
}  # fmt: skip


def late(wrong_shift: float) -> dict:
    """Late switches: most traces hold a wrong attractor until late and then leave it for the
    answer the full budget votes for; the traces that end on the attractor end first (shorter
    by ``wrong_shift`` in log length), so an early stop sees it leading."""
    return {
        "name": "late",
        "model": "synthetic:kinds",
        "base": "qwen3-8b",
        "params": {
            **_COMMON, "skill": 0.62, "unique_rate": 0.0, "none_rate": 0.0,
            "difficulty_sd": 0.3, "trap_frac": 0.0, "attractor_base": 1.0,
            "attractor_share_lo": 0.8, "attractor_share_hi": 1.0,
            "attractor_distractor_prob": 1.0, "attractor_release_lo": 0.9,
            "attractor_release_hi": 1.0, "conv_logit": 2.5, "conv_hard_slope": 0.0,
            "len_wrong_shift": wrong_shift, "conv_q_sd": 0.3, "conv_trace_sd": 0.3,
            "distractor_alpha": 0.1,
        },
    }  # fmt: skip


class Kinds(Backend):
    """The synthetic engine serving several kinds of question of one model: a prompt
    ``"KIND: …"`` is answered by that kind's preset."""

    name = "synthetic"

    def __init__(self, **kinds: dict):
        self.kinds = {k: SyntheticBackend(p) for k, p in kinds.items()}
        first = next(iter(self.kinds.values()))
        self.model, self.max_tokens = first.model, first.max_tokens

    def start(self, problem, n_traces, seed, first_trace=0):
        return self.kinds[problem.question.split(":")[0]].start(
            problem, n_traces, seed, first_trace
        )

    def describe(self) -> dict:
        return {"backend": self.name, "model": self.model, "kinds": sorted(self.kinds)}


def upstream_of(backend: Backend) -> Upstreams:
    ups = Upstreams(["synthetic"])
    ups.synthetic, ups.model = backend, backend.model
    return ups


def problems(kind: str, tag: str, n: int) -> list[Problem]:
    """Questions of a kind as the server makes them of a prompt (its id, the synthetic truth)."""
    texts = [f"{kind}: {tag} question {i}" for i in range(n)]
    return [Problem(prompt_seed(t), t, synthetic_truth(t), "served") for t in texts]


@pytest.fixture(scope="module")
def benign_calibration(tmp_path_factory):
    """A calibration learned on benign traffic: 12 questions of 32 traces."""
    from mars.fit.calibrate import calibrate_pools
    from mars.generate import generate_pool

    out = tmp_path_factory.mktemp("fit") / "benign"
    pool = generate_pool(
        SyntheticBackend(BENIGN), problems("benign", "fit", 12), 32, 0, out,
        spacing=512, max_tokens=8192, progress=False,
    )  # fmt: skip
    return calibrate_pools([pool])


def calibrated(cal) -> Defaults:
    return Defaults(
        method="sc-mars2", traces=16, warmup=0, spacing=512, max_tokens=8192, calibration=cal
    )


def view(running) -> dict:
    return httpx.get(running.url + "/v1/mars/audit", headers=running.headers(), timeout=30).json()


def ask(running, prompt: str, **mars) -> dict:
    body = {"prompt": prompt, "n": 16, "seed": 0, **({"mars": mars} if mars else {})}
    r = httpx.post(running.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def audited(running, n: int) -> dict:
    """Wait until ``n`` audits are counted (or dropped); the view."""
    deadline = time.monotonic() + 60
    while True:
        v = view(running)
        done = sum(p["audits"] for p in v["pools"].values()) + sum(v["dropped"].values())
        if done >= n:
            return v
        assert time.monotonic() < deadline, v
        time.sleep(0.02)


def serve_one_by_one(running, prompts: list[str], pool_of=None) -> list[dict]:
    """Each question asked once the audit of the one before is counted; the pool's view after
    each."""
    out = []
    base = sum(p["audits"] for p in view(running)["pools"].values())
    for i, prompt in enumerate(prompts):
        m = ask(running, prompt)["mars"]
        v = audited(running, base + i + 1)
        out.append(v["pools"][pool_of(m) if pool_of else next(iter(v["pools"]))])
    return out


def test_an_audit_runs_the_stopped_traces_on_counts_apart_and_mars_audit_agrees(tmp_path):
    """--audit-rate 1: every question, once answered, has its stopped traces run on upstream;
    the full-budget vote of the same traces is compared with the answer; its tokens are counted
    apart (usage is what the answer paid); the audited question is kept, completed, beside its
    pool (a pool of whole traces: its stopped traces run to the end of the very traces served),
    and `mars audit` on the record gives the live counters exactly."""
    record = tmp_path / "rec"
    with serving(["synthetic"], FAST, record=str(record), audit=AuditOptions(rate=1.0)) as running:
        answers = []
        for i in range(8):  # each once the audit before is done (one runs at a time)
            answers.append(ask(running, f"Question {i}: what is it?"))
            v = audited(running, i + 1)
        assert v["dropped"] == {} and v["picked"] == {"sample": 8}
        for r in answers:  # the client paid for its answer only
            t = r["mars"]["tokens"]
            assert r["usage"]["completion_tokens"] == t["paid"]
        assert running.metric("audits") == 8
        assert running.metric("audit_tokens") == v["tokens"]["traces"] + v["tokens"]["probes"] > 0
        assert running.metric("tokens_paid") == sum(
            r["usage"]["completion_tokens"] for r in answers
        )
        ((name, pool),) = v["pools"].items()
        assert pool["method"] == "sc-mars-cal" and pool["target_source"] == "audit_target"
        assert running.metric("audit_risk_upper", method="sc-mars-cal", pool=name) == pytest.approx(
            pool["upper"], abs=1e-6
        )
        assert running.metric("audit_risk_upper", method="sc-mars-cal", pool="all") > 0
        assert running.metric("audit_target", method="sc-mars-cal", pool=name) == 0.05
        ask(running, "Question 8: what is it?", audit=True)  # asked for: counted, said so
        live = audited(running, 9)
        assert live["picked"] == {"sample": 8, "request": 1}
    stopped = [r for r in answers if r["mars"]["traces_stopped"]]
    assert stopped, "no question stopped early: nothing was continued"
    audited_pool = record / name / AUDITED_DIR
    pool = open_pool(audited_pool)
    assert sorted(pool.qids) == list(range(9))
    for r in stopped:
        qid = int(r["mars"]["record"].split("/")[-1])
        rec = json.loads((audited_pool / AUDIT_DIR / f"q{qid:06d}.json").read_text())
        assert (
            rec["continued"] == r["mars"]["stopped_traces"] and rec["answer"] == r["mars"]["answer"]
        )
        served = open_pool(record / name).read_question(qid)
        full = pool.read_question(qid)
        for t in rec["continued"]:  # run on past its stop, its probes up to there kept
            j = list(full.trace_idx).index(t)
            assert full.lengths[j] > served.lengths[j]
            a, b = served.probe_offsets[j : j + 2], full.probe_offsets[j : j + 2]
            n = a[1] - a[0]
            assert b[1] - b[0] >= n
            assert list(full.probe_positions[b[0] : b[0] + n]) == list(
                served.probe_positions[a[0] : a[1]]
            )
    # the offline twin: the same counts, rate, bound and state
    report = audit_paths([record])
    assert report.summary()["pools"][name] == {
        k: live["pools"][name][k] for k in report.summary()["pools"][name]
    }
    assert report.summary()["methods"] == live["methods"]
    sampled = audit_paths([record], sampled_only=True).summary()["methods"]["sc-mars-cal"]
    assert sampled["audits"] == 8


def test_the_pick_is_seeded_and_a_client_may_ask_for_an_audit():
    """A seeded share of questions (the same seed, the same ones); ``mars.audit: true`` audits a
    question whatever the draw; anything but a boolean is a 400."""

    def picked(seed: int) -> list[int]:
        opts = AuditOptions(rate=0.3, seed=seed)
        with serving(["synthetic"], FAST, audit=opts) as running:
            got = []
            for i in range(10):
                ask(running, f"Question {i}: what is it?")
                wait_for(lambda: view(running)["questions"] == i + 1)  # noqa: B023
                got.append(sum(view(running)["picked"].values()))
            asked = ask(running, "Question 10: what is it?", audit=True)
            assert asked["mars"]["answer"] is not None
            wait_for(lambda: view(running)["questions"] == 11)
            v = view(running)
            assert v["picked"].get("request") == 1
            bad = httpx.post(
                running.url + "/v1/completions",
                json={"prompt": "x", "n": 4, "mars": {"audit": "yes"}},
            )
            assert bad.status_code == 400 and bad.json()["error"]["param"] == "mars.audit"
        return got

    a, b = picked(7), picked(7)
    assert a == b and 0 < a[-1] < 10
    assert picked(8) != a


class _Held:
    """The synthetic engine whose audits wait at their every step (until :attr:`go` is set, or
    they are cancelled) and whose question ``hold: …`` waits for :attr:`free`."""

    def __init__(self):
        self.inner = SyntheticBackend("qwen3-8b")
        self.model, self.max_tokens, self.name = (
            self.inner.model,
            self.inner.max_tokens,
            "synthetic",
        )
        self.go, self.free, self.waiting = threading.Event(), threading.Event(), threading.Event()

    def describe(self):
        return self.inner.describe()

    def final_answer(self, text):
        return self.inner.final_answer(text)

    def check_context(self, problem):
        pass

    def start(self, problem, n, seed, first_trace=0):
        return _HeldBatch(self, self.inner.start(problem, n, seed, first_trace), problem)


class _HeldBatch:
    def __init__(self, owner, inner, problem):
        self.owner, self.inner = owner, inner
        self.audit = threading.current_thread().name.startswith("mars-audit")
        self.hold = problem.question.startswith("hold:")

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def advance(self, target):
        gate = self.owner.go if self.audit else self.owner.free if self.hold else None
        if gate is not None:
            self.owner.waiting.set()
            while not gate.wait(0.02):
                cancel.check()
        self.inner.advance(target)


def test_audits_never_crowd_out_served_traffic():
    """One audit at a time (a second picked while it runs is dropped: full); a running audit is
    cancelled the moment a request has to wait for a slot (preempted); one picked while requests
    wait is dropped (busy); the server's shutdown cancels the one running, and leaves no thread."""
    held = _Held()
    opts = AuditOptions(rate=1.0, concurrency=1)
    quick = Defaults(
        method="sc-consensus",
        traces=16,
        warmup=0,
        spacing=2048,
        max_tokens=16384,
        knobs={"consensus": 0.5},
    )  # fmt: skip  (stops early: its audit has work)
    with serving(upstream_of(held), quick, max_active=1, audit=opts) as running:
        ask(running, "Question 1: what is it?")
        assert held.waiting.wait(30)  # its audit runs, held
        held.waiting.clear()
        ask(running, "Question 2: what is it?")
        assert audited(running, 1)["dropped"] == {"full": 1} and view(running)["running"] == 1
        # a request that holds the only slot, and one that must wait: the audit gives way
        results: list = []
        first = threading.Thread(target=lambda: results.append(ask(running, "hold: one")))
        first.start()
        assert held.waiting.wait(30)
        second = threading.Thread(target=lambda: results.append(ask(running, "Question 3: x")))
        second.start()
        v = audited(running, 2)
        assert v["dropped"] == {"full": 1, "preempted": 1} and v["running"] == 0
        held.free.set()
        first.join(60), second.join(60)
        assert len(results) == 2
        v = audited(running, 3)  # the first one's audit runs, held; the second's found no room
        assert v["dropped"] == {"full": 2, "preempted": 1} and v["running"] == 1
        state = running.state  # the one running is cancelled at shutdown
    assert state.auditor.dropped["shutdown"] == 1 and state.auditor.view()["running"] == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("mars-audit")]
    assert state.metrics.audits_dropped.labels("preempted")._value.get() == 1


def test_an_audit_picked_while_requests_wait_is_dropped():
    """Straight at the auditor: a question picked while requests wait is not audited."""
    from mars.engines import cancel as c
    from mars.serve.audit import Auditor
    from mars.serve.metrics import Metrics
    from mars.serve.requests import read_question, read_request
    from mars.serve.solve import prepare, run_question

    ups = Upstreams(["synthetic"])
    body = read_request({"prompt": "Question 1: what?", "n": 16}, "completions")
    q = read_question(body, "completions", FAST)
    prep = prepare(ups, q)
    o = run_question(ups, prep, c.CancelScope())
    a = Auditor(AuditOptions(rate=1.0), ups, Metrics())
    a.offer(prep, o, "rid", "client", waiting=2)
    assert a.dropped == {"busy": 1} and a.view()["running"] == 0
    a.close()


def test_a_benign_kind_raises_no_alarm_and_is_vouched_for(benign_calibration, caplog):
    """MARS2 with a calibration learned on benign traffic, serving that traffic: no alarm over 40
    audits, and the bound under the target (α = 0.1) once enough audits agree."""
    with serving(upstream_of(Kinds(benign=BENIGN)), calibrated(benign_calibration),
                 audit=AuditOptions(rate=1.0)) as running:  # fmt: skip
        states = serve_one_by_one(running, [f"benign: question {i}" for i in range(40)])
    assert not any(s["alarm"] for s in states)
    last = states[-1]
    assert last["target"] == 0.1 and last["target_source"] == "risk_alpha"
    assert last["disagreements"] == 0 and last["state"] == "holds" and last["upper"] <= 0.1
    first_vouched = next(i for i, s in enumerate(states) if s["state"] == "holds") + 1
    assert first_vouched == audits_to_vouch(0.1) == 29
    assert "audit alarm" not in caplog.text


def test_a_kind_whose_calibration_understates_late_switches_raises_the_alarm(
    benign_calibration, caplog
):
    """The same calibration on traffic that switches late: the stop keeps the early leader, the
    full budget votes for the answer the traces switch to. The bound is never under the target,
    so the alarm comes when the lower bound is over it: within 10 audits (one log line naming
    the pool and the calibration, the gauge at 1)."""
    caplog.set_level(logging.WARNING, "mars.serve")
    kinds = Kinds(late=late(-0.5))
    with serving(upstream_of(kinds), calibrated(benign_calibration),
                 audit=AuditOptions(rate=1.0)) as running:  # fmt: skip
        states = serve_one_by_one(running, [f"late: question {i}" for i in range(10)])
        fired = next((i for i, s in enumerate(states) if s["alarm"]), None)
        assert fired is not None, states[-1]  # by the 10th audit (4 of 10 disagree)
        name = next(iter(view(running)["pools"]))
        assert running.metric("audit_alarm", method="sc-mars2", pool=name) == 1
        s = states[fired]
        assert s["lower"] > s["target"] and s["state"] == "alarm"
    lines = [r.getMessage() for r in caplog.records if "audit alarm" in r.getMessage()]
    assert len(lines) == 1 and benign_calibration.digest in lines[0] and name in lines[0]


@pytest.mark.slow  # 135 questions and their audits: ~25 s
def test_drift_raises_the_alarm_and_the_refit_on_the_audited_questions_lowers_the_bound(
    benign_calibration, tmp_path, caplog
):
    """A calibration learned on benign traffic: 30 benign questions vouch for it (the bound under
    α = 0.1 from the 29th audit); then the traffic turns to late switches and the very first audit
    that disagrees raises the alarm (here the first late question: the bound, just under the
    target, rises above it), naming the calibration — before the lower bound could say the rate
    is over the target. Refit on the audited questions (completed, recorded beside the pool) and
    reloaded: 90 questions of the mixed traffic raise no alarm on the new pool and leave its bound
    under the target again. `mars audit` on the record says what the server said."""
    caplog.set_level(logging.WARNING, "mars.serve")
    from mars.fit.calibrate import calibrate_pools

    record, path = tmp_path / "rec", tmp_path / "cal.json"
    benign_calibration.save(path)
    kinds = Kinds(benign=BENIGN, late=late(-0.1))
    with serving(upstream_of(kinds), calibrated(benign_calibration), record=str(record),
                 calibration_path=str(path), audit=AuditOptions(rate=1.0)) as running:  # fmt: skip
        first = serve_one_by_one(running, [f"benign: drift {i}" for i in range(30)])
        assert first[-1]["state"] == "holds"
        turned = serve_one_by_one(running, [f"late: drift {i}" for i in range(10)])
        fired = next(i for i, s in enumerate(turned) if s["alarm"])
        assert fired == 0 and turned[0]["disagreements"] == 1 and turned[0]["lower"] < 0.1
        old = next(iter(view(running)["pools"]))
        # the refit reads the audited questions: whole traces, recorded beside the pool
        refit = calibrate_pools([record / old / AUDITED_DIR])
        refit.save(path)
        r = httpx.post(running.url + "/v1/mars/calibration/reload")
        assert r.status_code == 200 and r.json()["calibration"] == refit.digest

        def pool_of(m):
            return m["record"].split("/")[-2]

        mixed = [f"{k}: after {i}" for i in range(45) for k in ("benign", "late")]
        after = serve_one_by_one(running, mixed, pool_of)
        live = view(running)
        assert live["pools"][old]["alarm"]  # the doubted calibration's pool stays in alarm
        new = live["pools"][pool_of(ask(running, "benign: one more")["mars"])]
        assert new["calibration"] == refit.digest and not any(s["alarm"] for s in after)
        assert after[-1]["state"] == "holds" and after[-1]["upper"] <= 0.1
    lines = [r.getMessage() for r in caplog.records if "audit alarm:" in r.getMessage()]
    assert len(lines) == 1 and benign_calibration.digest in lines[0]
    report = audit_paths([record])
    assert report.summary()["pools"][old]["alarm"] and report.alarm
    assert report.summary()["pools"][old]["disagreements"] == live["pools"][old]["disagreements"]


def test_a_streamed_answer_is_audited_and_the_view_is_behind_the_key():
    """A streamed question is offered to the audit once its last event is sent; ``GET
    /v1/mars/audit`` answers a caller with the client key only."""
    with serving(["synthetic"], FAST, api_key="k3y", audit=AuditOptions(rate=1.0)) as running:
        body = {"prompt": "Question 1: what is it?", "n": 16, "seed": 0, "stream": True}
        with httpx.stream(
            "POST", running.url + "/v1/completions", json=body, headers=running.headers()
        ) as r:
            lines = [line for line in r.iter_lines() if line]
        assert lines[-1] == "data: [DONE]"
        v = audited(running, 1)
        assert sum(p["audits"] for p in v["pools"].values()) == 1
        denied = httpx.get(running.url + "/v1/mars/audit")
        assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key"


def test_the_audit_options_are_checked_in_one_line():
    from typer.testing import CliRunner

    from mars.cli import app as cli

    for args, said in (
        (["--audit-rate", "2"], "--audit-rate 2.0: must be ≥ 0 and ≤ 1"),
        (["--audit-concurrency", "0"], "--audit-concurrency 0: must be ≥ 1"),
        (["--audit-target", "0"], "--audit-target 0.0: must be > 0 and < 1"),
    ):
        res = CliRunner().invoke(cli, ["serve", "--upstream", "synthetic", *args])
        assert res.exit_code == 2 and res.output == f"error: {said}\n", res.output
