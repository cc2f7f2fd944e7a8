"""Properties of the bootstrap simulator on random pools."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from util import write_layout_pool

from mars.method.arrays import build_arrays
from mars.method.registry import parse_methods
from mars.method.settings import Settings
from mars.method.voting import leader, tally
from mars.simulate.driver import SimulationError, simulate_pool, simulate_question
from mars.simulate.results import write_method
from mars.store.pool import open_pool

FAST = Settings(budget=24, iterations=6, warmup=8)
ROOT = Path(__file__).resolve().parents[2]


def _arrays(tmp_path, seed, **kw):
    import tempfile

    path = write_layout_pool(
        Path(tempfile.mkdtemp(dir=tmp_path)) / "pool", seed=seed, n_questions=1, **kw
    )
    return build_arrays(open_pool(path).read_question(0))


def _full_budget_vote(arr, samples):
    votes = tally(
        arr.final_ids[samples], np.ones(samples.shape), arr.final_ids[samples] >= 0, arr.n_answers
    )
    return leader(votes)[0]


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 10_000), n_answers=st.integers(2, 5))
def test_oracle_q_gamma1_keeps_full_budget_answer(tmp_path, seed, n_answers):
    """Without abstaining probes, MARS with oracle q and γ = 1 never changes the SC answer."""
    from mars.method.protocol import samples as bootstrap_samples

    arr = _arrays(tmp_path, seed, n_answers=n_answers, abstain=0.0)
    res = simulate_question(arr, parse_methods("sc,sc-mars-oracle"), FAST)
    full = _full_budget_vote(arr, bootstrap_samples(arr, FAST))
    assert np.array_equal(res.methods["sc"].answer, full)
    assert np.array_equal(res.methods["sc-mars-oracle"].answer, full)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 10_000))
def test_certified_oracle_keeps_answer_even_with_abstentions(tmp_path, seed):
    """The certified rule charges abstaining running traces, so oracle q never flips the answer."""
    arr = _arrays(tmp_path, seed, abstain=0.3)
    res = simulate_question(arr, parse_methods("sc,sc-mars-oracle-cert"), FAST)
    assert np.array_equal(res.methods["sc-mars-oracle-cert"].answer, res.methods["sc"].answer)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 10_000))
def test_tokens_never_exceed_baseline(tmp_path, seed):
    arr = _arrays(tmp_path, seed, abstain=0.1)
    res = simulate_question(arr, parse_methods("all"), FAST)
    for name, r in res.methods.items():
        assert (r.tokens <= r.baseline).all(), name
        assert (r.tokens > 0).all(), name
        stopped = r.stopped_by != "budget"
        assert (r.position[stopped] <= arr.grid[-1]).all()
        if name in ("sc", "dco"):
            assert (r.tokens == r.baseline).all()


def test_results_independent_of_workers_and_reproducible(tmp_path):
    pool = write_layout_pool(tmp_path / "pool", seed=3, n_questions=4)
    methods = parse_methods("sc,sc-mars-cal,dco-mars-cal,sc-pp")
    outs = []
    for workers, name in ((1, "a"), (2, "b"), (1, "c")):
        res = simulate_pool(pool, methods, FAST, workers=workers)
        for m in methods:
            write_method(tmp_path / name, m.name, res, {}, "pool")
        outs.append(tmp_path / name)
    for m in methods:
        for f in ("per_iteration.csv", "per_question.csv"):
            assert filecmp.cmp(outs[0] / m.name / f, outs[1] / m.name / f, shallow=False)
            assert filecmp.cmp(outs[0] / m.name / f, outs[2] / m.name / f, shallow=False)


def test_seed_changes_samples(tmp_path):
    arr = _arrays(tmp_path, 5)
    a = simulate_question(arr, parse_methods("sc"), FAST).methods["sc"]
    b = simulate_question(
        arr, parse_methods("sc"), Settings(budget=24, iterations=6, warmup=8, seed=7)
    ).methods["sc"]
    assert not np.array_equal(a.baseline, b.baseline)


def test_dco_needs_confidences(tmp_path):
    pool = write_layout_pool(tmp_path / "pool", seed=1, n_questions=1, confs=False)
    with pytest.raises(SimulationError, match="needs per-token confidences"):
        simulate_pool(pool, parse_methods("dco"), FAST)
    # SC methods run without confidences
    simulate_pool(pool, parse_methods("sc,sc-mars-cal,sc-pp"), FAST)


def test_method_groups_run_what_the_pool_supports(tmp_path):
    """'all' on a pool without confidences: every method but the DeepConf ones, and the names it
    left out; a DeepConf method named explicitly stays (and is refused when simulated)."""
    from mars.method.registry import METHODS
    from mars.simulate.driver import supported_methods

    pool = open_pool(write_layout_pool(tmp_path / "pool", seed=1, n_questions=1, confs=False))
    methods, left_out = supported_methods("all", pool, None)
    assert [m.name for m in methods] == [n for n, m in METHODS.items() if not m.needs_confs]
    assert left_out == [n for n, m in METHODS.items() if m.needs_confs] and "dco" in left_out
    methods, left_out = supported_methods("reference,dco", pool, [0])
    assert "dco" in [m.name for m in methods] and "dco" not in left_out
    assert "dco-mars-cal" in left_out
    confs = open_pool(write_layout_pool(tmp_path / "confs", seed=1, n_questions=1))
    assert supported_methods("all", confs, None) == (parse_methods("all"), [])


def test_settings_validation():
    with pytest.raises(SimulationError, match="--budget"):
        Settings(budget=10**9).validate()
    with pytest.raises(SimulationError, match="draws"):
        Settings(budget=60000, iterations=100000).validate()


def test_faithful_pp_charges_less_than_reference_pp(tmp_path):
    arr = _arrays(tmp_path, 11, n_answers=5)
    res = simulate_question(
        arr,
        parse_methods("sc-pp,sc-pp-faithful"),
        Settings(budget=24, iterations=6, warmup=8, pp_warmup=0, pp_patience=1),
    )
    ref, faithful = res.methods["sc-pp"], res.methods["sc-pp-faithful"]
    same_stop = ref.position == faithful.position
    assert (faithful.tokens[same_stop] <= ref.tokens[same_stop]).all()


def _processes_with(marker: str) -> list[int]:
    """PIDs of live processes whose command line mentions ``marker``."""
    import os

    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = Path(f"/proc/{d}/stat").read_text().split(") ", 1)[1][0]
            except OSError:
                continue
            if marker in cmd and state != "Z":
                pids.append(int(d))
    return pids


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["TERM", "KILL"])
def test_workers_die_with_their_parent(tmp_path, sig):
    """kill -TERM (or -KILL) on `mars simulate --workers 2` leaves no worker running."""
    import signal
    import subprocess
    import sys
    import time

    pool = write_layout_pool(tmp_path / "pool", seed=1, n_questions=6, n=300, max_len=40_000)
    out = tmp_path / f"out-{sig}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mars.cli",
            "simulate",
            str(pool),
            "-m",
            "all",
            "--budget",
            "256",
            "--iterations",
            "64",
            "--workers",
            "2",
            "--out",
            str(out),
            "-q",
        ],
    )
    deadline = time.time() + 60
    while len(_processes_with(str(out))) < 3 and time.time() < deadline:  # parent + 2 workers
        time.sleep(0.2)
    assert len(_processes_with(str(out))) >= 3, "workers did not start"
    proc.send_signal(getattr(signal, f"SIG{sig}"))
    rc = proc.wait(timeout=30)
    assert rc == (143 if sig == "TERM" else -9)
    deadline = time.time() + 10
    while _processes_with(str(out)) and time.time() < deadline:
        time.sleep(0.1)
    assert _processes_with(str(out)) == []


def _simulate_cli(pool, out, *args):
    from typer.testing import CliRunner

    from mars.cli import app

    return CliRunner().invoke(app, ["simulate", str(pool), "--out", str(out), *map(str, args)])


@pytest.mark.parametrize(
    "args, message",
    [
        (["-m", "sc,dco", "--warmup", "0"], "--warmup 0: the DeepConf methods (dco) set their"),
        (
            ["-m", "dco-mars-cal,oracle-dco-first", "--warmup", "40", "--budget", "32"],
            "--warmup 40: the DeepConf methods (dco-mars-cal, oracle-dco-first)",
        ),
        (["-m", "sc", "--warmup", "100"], "--warmup 100: question 0 of "),
    ],
)
def test_sizes_without_meaning_are_one_line_before_any_work(tmp_path, args, message):
    pool = write_layout_pool(tmp_path / "pool", seed=2, n_questions=2, n=64)
    res = _simulate_cli(pool, tmp_path / "o", *args, "--iterations", 2)
    assert res.exit_code == 2 and res.output.startswith(f"error: {message}"), res.output
    assert res.output.count("\n") == 1 and not (tmp_path / "o").exists()


def test_warmup_0_means_no_warmup_for_the_other_methods(tmp_path):
    """No warmup traces: learned q = 1 (nothing to fit), γ = 1, no probe-0 guard; MARS with q = 1
    everywhere is at least as cautious as MARS with oracle q."""
    pool = write_layout_pool(tmp_path / "pool", seed=2, n_questions=2)
    methods = "sc,sc-mars,sc-mars-cal,sc-mars-oracle,sc-mars2,sc-pp"
    res = _simulate_cli(pool, tmp_path / "o", "-m", methods, "--warmup", 0, "-q")
    assert res.exit_code == 0, res.output
    pq_ = {m: pd.read_csv(tmp_path / "o" / m / "per_question.csv") for m in methods.split(",")}
    assert (pq_["sc-mars"].tokens_mean >= pq_["sc-mars-oracle"].tokens_mean).all()
    assert (pq_["sc-mars-cal"].tokens_mean == pq_["sc-mars"].tokens_mean).all()  # γ = 1


def test_a_budget_beyond_the_traces_is_explained_in_the_output_and_overall_json(tmp_path):
    """Legal but surprising: budget 512 on 128 traces draws each trace about four times; the run
    says so on its output and in every method's overall.json, and a usual run says nothing."""
    pool = write_layout_pool(tmp_path / "pool", seed=2, n_questions=2, n=128)
    res = _simulate_cli(pool, tmp_path / "o", "-m", "sc,sc-mars", "--iterations", 2, "-q")
    assert res.exit_code == 0, res.output
    expected = (
        "budget 512 > the 128 traces per question: bootstrap samples are drawn with replacement, "
        "so a sample holds each trace 4.0 times on average"
    )
    assert res.output == f"note: {expected}\n"
    for m in ("sc", "sc-mars"):
        assert json.loads((tmp_path / "o" / m / "overall.json").read_text())["notes"] == [expected]
    res = _simulate_cli(pool, tmp_path / "p", "-m", "sc", "--budget", 64, "--iterations", 2, "-q")
    assert res.exit_code == 0 and res.output == ""
    assert "notes" not in json.loads((tmp_path / "p" / "sc" / "overall.json").read_text())


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 10_000))
def test_one_wave_of_the_whole_budget_is_mars2(tmp_path, seed):
    """Width-adaptive MARS2 with a wave as wide as the budget launches everything at once: the
    same answers and tokens as sc-mars2 (it only stops checking once every trace has ended)."""
    arr = _arrays(tmp_path, seed, abstain=0.1)
    s = FAST.replace(wave_size=FAST.budget)
    res = simulate_question(arr, parse_methods("sc-mars2,sc-mars2-waves"), s)
    one, waves = res.methods["sc-mars2"], res.methods["sc-mars2-waves"]
    assert np.array_equal(one.answer, waves.answer) and np.array_equal(one.tokens, waves.tokens)
    assert np.array_equal(one.seq_tokens, waves.seq_tokens)


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 10_000), wave=st.integers(1, 24))
def test_waves_launch_whole_waves_and_wait_for_each(tmp_path, seed, wave):
    """Traces are charged wave by wave: a wave after the one that stopped costs nothing, the ones
    before cost their full length, and the sequential tokens are each wave's longest, summed; a
    run that never stops is the full-budget vote."""
    from mars.method.protocol import samples as bootstrap_samples

    arr = _arrays(tmp_path, seed, abstain=0.1)
    s = FAST.replace(wave_size=wave)
    r = simulate_question(arr, parse_methods("sc-mars2-waves"), s).methods["sc-mars2-waves"]
    S = bootstrap_samples(arr, s)
    cap = arr.lengths[S]
    full = _full_budget_vote(arr, S)
    waves = [slice(lo, lo + wave) for lo in range(0, s.budget, wave)]
    for i in range(s.iterations):
        if r.stopped_by[i] == "budget":
            assert r.answer[i] == full[i] and r.tokens[i] == cap[i].sum()
            assert r.seq_tokens[i] == sum(cap[i, w].max() for w in waves)
            continue
        # the wave it stopped in: the earlier ones in full, this one up to the stop
        matches = []
        for j, w in enumerate(waves):
            spent = [cap[i, v] for v in waves[:j]] + [np.minimum(cap[i, w], r.position[i])]
            if sum(p.sum() for p in spent) == r.tokens[i]:
                matches.append(sum(p.max() for p in spent))
        assert r.seq_tokens[i] in matches


def test_an_early_guess_is_lost_off_the_papers_grid_and_kept_by_the_guard_by_tokens(tmp_path):
    """Issue 34: every trace first holds a guess made while reading the problem and leaves it
    between 1,000 and 6,500 tokens (research/offgrid/presets/early-guess.json; AIME 2025 q0, where
    all 128 traces end on the right answer). Probed every 500 tokens, the reference's guard covers
    the first 500 and calibrated MARS stops on the guess in most runs; guarded by tokens (every
    checkpoint before 4,096) it keeps SC's answer. On the paper's 2,048 grid the two guards are
    the same rule, result for result."""
    from mars.engines.synthetic import SyntheticBackend, load_preset
    from mars.generate import generate_pool
    from mars.store.problems import load_problems

    kind = load_preset(ROOT / "research" / "offgrid" / "presets" / "early-guess.json")
    backend = SyntheticBackend(kind, with_confs=False)
    problem = load_problems("aime_2025")[:1]
    s = Settings(budget=64, iterations=64)
    methods = parse_methods("sc,sc-mars-cal")
    acc = {}
    for spacing in (500, 2048):
        pool = generate_pool(
            backend, problem, 128, 1, tmp_path / str(spacing), spacing=spacing, progress=False
        )
        for guard in ("first", "tokens"):
            (r,) = simulate_pool(pool, methods, s.replace(spacing=spacing, guard=guard))
            acc[spacing, guard] = r.methods["sc-mars-cal"]
            assert r.methods["sc"].correct.all()
    assert acc[500, "first"].correct.mean() < 0.5
    assert acc[500, "tokens"].correct.mean() > 0.95
    early = acc[500, "tokens"].position < 4096  # before 4,096 only the warmup's answer stops
    assert acc[500, "tokens"].correct[early].all()
    same, other = acc[2048, "first"], acc[2048, "tokens"]
    for name in ("answer", "tokens", "position", "stopped_by", "seq_tokens"):
        assert np.array_equal(getattr(same, name), getattr(other, name)), name
    assert same.correct.mean() > 0.9


def test_the_planned_launch_is_mars2_at_once_or_two_rounds(tmp_path):
    """sc-mars2-launch (mars.method.launch): where the warmup says no wave below the budget could
    decide, every trace starts at once and the result is sc-mars2's, iteration by iteration; else a
    first wave of the planned size, then at most one more round (the rest at once)."""
    from mars.engines.synthetic import SyntheticBackend
    from mars.generate import generate_pool
    from mars.method import launch
    from mars.method.walk import QuestionContext, run_method
    from mars.store.problems import load_problems

    problems = load_problems("hmmt_feb_2025")[:8]
    pool = generate_pool(
        SyntheticBackend("qwen3-8b", skill=0.25, with_confs=False),
        problems,
        64,
        2,
        tmp_path / "p",
        progress=False,
    )
    s = Settings(budget=48, iterations=8, spacing=2048)
    m2, planned = parse_methods("sc-mars2,sc-mars2-launch")
    kinds = set()
    for q in open_pool(pool).questions():
        ctx = QuestionContext.sample(build_arrays(q), s)
        launches = launch.plan(ctx.arr.final_ids[ctx.warm], ctx.arr.n_answers, 16, 48)
        a, b = run_method(ctx, m2), run_method(ctx, planned)
        kinds.add(len(launches))
        if launches == [(0, 48)]:
            for name in ("answer", "tokens", "position", "seq_tokens"):
                assert np.array_equal(getattr(a, name), getattr(b, name)), name
        else:
            (_, first), _rest = launches
            cap = ctx.arr.lengths[ctx.samples]
            two_rounds = cap[:, :first].max(axis=1) + cap[:, first:].max(axis=1)
            assert (b.seq_tokens <= two_rounds).all()
            assert b.rounds == first
    assert kinds == {1, 2}  # both plans occur on these questions


#: pools the Parallel-Probe importer accepts that no trace can be sampled from, or read oddly
_GOOD = {"question": "q", "gold_answer": "2", "probe_freq": 500}
_GOOD_BRANCHES = [[["1", "2"] * 6, 5000, "2"]] * 8
ODD_POOLS = {
    # a question with no traces at all
    "no-traces": [],
    # every probe and final answer ERR, traces of many lengths (probes off the 2,048 grid)
    "all-err": [[["ERR"] * k, 500 * k, "ERR"] for k in range(1, 9)],
    # traces that generated nothing
    "zero-length": [[[], 0, "2"]] * 8,
}


@pytest.mark.parametrize(
    "methods, spacing",
    [
        ("sc,sc-mars-cal,sc-mars2,sc-mars2-waves,asc,esc,pp-main,oracle-first", "2048"),
        pytest.param("all", "2048", marks=pytest.mark.slow),
        pytest.param("all", "native", marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize("protocol", ["bootstrap", "parallel-probe"])
@pytest.mark.parametrize("odd", list(ODD_POOLS))
def test_whatever_the_importer_accepts_simulates_or_is_refused_in_one_line(
    tmp_path, odd, protocol, methods, spacing
):
    """Every method (a run of all of them, next to a regular question) simulates such a pool or
    refuses it in one line naming the question, before any output: no ZeroDivisionError,
    IndexError or other traceback."""
    from typer.testing import CliRunner

    from mars.cli import app

    src = tmp_path / "pp.json"
    odd_q = {**_GOOD, "each_branch": ODD_POOLS[odd]}
    src.write_text(json.dumps([{**_GOOD, "each_branch": _GOOD_BRANCHES}, odd_q]))
    pool = tmp_path / "pool"
    res = CliRunner().invoke(
        app, ["import", "parallel-probe", str(src), str(pool), "--spacing", spacing]
    )
    assert res.exit_code == 0, res.output
    out = tmp_path / "out"
    args = ["-m", methods, "--budget", 4, "--iterations", 2, "--warmup", 0, "--protocol", protocol]
    res = _simulate_cli(pool, out, "-q", *args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    if res.exit_code == 0:
        assert json.loads((out / "sc" / "overall.json").read_text())["n_questions"] == 2
    else:
        assert res.exit_code == 2 and "question 1" in res.output, res.output
        assert res.output.splitlines()[-1].startswith("error: ") and not out.exists()


def test_a_model_that_boxes_no_answer_is_simulated_on_its_last_probes(tmp_path):
    """A pool whose traces end without a \\boxed{} answer has nothing to vote on, and the refusal
    says what to do; with --finals last-probe each trace's last probe's answer is its final
    answer: fit, simulate (with and without the fit) and analyze agree on it, and the run says
    what it voted on."""
    from typer.testing import CliRunner
    from util import NoBoxed

    from mars.cli import app
    from mars.engines.synthetic import SyntheticBackend
    from mars.generate import generate_pool
    from mars.store.problems import load_problems

    pool = tmp_path / "pool"
    generate_pool(
        NoBoxed(SyntheticBackend("qwen3-8b")), load_problems("aime_2025"), 24, 0, pool,
        questions=[0, 1],
    )  # fmt: skip
    run = CliRunner().invoke
    sim = ["simulate", str(pool), "-m", "sc,sc-mars-cal", "--budget", "16", "--iterations", "4",
           "--warmup", "8", "-q"]  # fmt: skip
    res = run(app, [*sim, "--out", str(tmp_path / "no")])
    assert res.exit_code == 2 and not (tmp_path / "no").exists()
    assert "no trace has a final answer" in res.output and "--finals last-probe" in res.output

    res = run(app, [*sim, "--finals", "last-probe", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    overall = json.loads((tmp_path / "a" / "sc" / "overall.json").read_text())
    assert overall["settings"]["finals"] == "last-probe"
    # what was voted on: each trace's last answering probe, grouped as answers are
    q = open_pool(pool).read_question(0)
    took = q.with_finals("last-probe")
    assert all(a is None for a in q.final_answers) and all(took.final_answers)
    j = 3
    lo, hi = q.probe_offsets[j], q.probe_offsets[j + 1]
    answered = [c for c in q.probe_codes[lo:hi] if c >= 0]
    assert took.final_answers[j] == q.probe_strings[answered[-1]]

    fit = tmp_path / "fit"
    res = run(app, ["fit", str(pool), "--out", str(fit), "--warmup", "8", "--finals", "last-probe"])
    assert res.exit_code == 0, res.output
    assert json.loads((fit / "fit.json").read_text())["finals"] == "last-probe"
    res = run(
        app, [*sim, "--finals", "last-probe", "--fit", str(fit), "--out", str(tmp_path / "b")]
    )
    assert res.exit_code == 0, res.output
    for m in ("sc", "sc-mars-cal"):
        for f in ("per_iteration.csv", "per_question.csv"):
            assert filecmp.cmp(tmp_path / "a" / m / f, tmp_path / "b" / m / f, shallow=False)
    res = run(app, [*sim, "--fit", str(fit), "--out", str(tmp_path / "c")])
    assert res.exit_code == 2 and "fitted with --finals last-probe" in res.output
    res = run(app, ["analyze", str(pool), str(tmp_path / "a"), "--out", str(tmp_path / "an"),
                    "--label", "m/d/default"])  # fmt: skip
    assert res.exit_code == 0, res.output


def test_a_method_that_reads_the_warmup_pays_for_it_the_others_do_not(tmp_path):
    """Paid accounting: a method reading the question's warmup (MARS, MARS2, a planned launch)
    is charged the warmup traces' whole lengths once per run; a method reading none (SC,
    Parallel-Probe, ESC) pays its main traces only; both beside the paper's accounting."""
    from mars.method.protocol import warmup as warmup_ids

    arr = _arrays(tmp_path, 11, abstain=0.1)
    names = "sc,sc-mars-cal,sc-mars2,sc-mars2-launch,sc-pp,esc"
    res = simulate_question(arr, parse_methods(names), FAST)
    warm = int(arr.lengths[warmup_ids(arr, FAST)].sum())
    assert warm > 0
    for name, r in res.methods.items():
        expected = warm if name.startswith("sc-mars") else 0
        assert r.warmup_tokens == expected, name
        probes = np.nan_to_num(r.probe_tokens)
        assert np.array_equal(r.paid_tokens, r.tokens + expected + probes), name
    out = tmp_path / "sim"  # the written columns: per iteration, per question, overall
    ov = write_method(out, "sc-mars2", [res], {}, "pool")
    it = pd.read_csv(out / "sc-mars2" / "per_iteration.csv")
    assert (it.warmup_tokens == warm).all()
    q = pd.read_csv(out / "sc-mars2" / "per_question.csv")
    r = res.methods["sc-mars2"]
    paid = 100 * np.mean(1 - r.paid_tokens / r.baseline)
    assert q.savings_paid_pct[0] == pytest.approx(paid)
    assert q.savings_paid_pct[0] < q.savings_pct[0]
    assert ov["savings_paid_pct"] == pytest.approx(paid) and ov["warmup_tokens_mean"] == warm
