"""Parallel-Probe's evaluation protocol (mars.method.protocol) and the field's other stopping
families.

Two checks: every cell of the Parallel-Probe authors' own AIME 2024 table (their CSV, next to their
data in ../shared), and, without ../shared, random probe matrices run through the vectorised walk
and through a plain loop that reads the traces one explore() call at a time, as their evaluator
does (written here from its description in mars/method/protocol.py; no code of theirs).
"""

from __future__ import annotations

import csv
import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mars.cli import app
from mars.errors import SimulationError
from mars.method.protocol import NO_ANSWER, question_arrays, shuffles
from mars.method.registry import parse_methods
from mars.method.settings import Settings
from mars.simulate.driver import simulate_question
from mars.store.pool import open_pool
from mars.store.published import import_parallel_probe

SHARED = Path(__file__).resolve().parents[3] / "shared"
PP_DATA = SHARED / "data" / "parallel-probe-qwen3-8b"
runner = CliRunner()

#: their CSV's rows (solver, strategy) → our methods
CSV_METHODS = {
    ("GreedySolver", "ConvergenceProbeStrategy"): "single-sac",
    ("MajorityVoteSolver", "FullReadStrategy"): "sc",
    ("ESCSolver", "FullReadStrategy"): "esc",
    ("ASCSolver", "FullReadStrategy"): "asc",
    ("MajorityVoteSolver", "ConvergenceProbeStrategy"): "sc-sac",
    ("GreedySolver", "ParallelESTPruning"): "pp-main-keep",
    ("GreedySolver", "ParallelESTPruningBurstMajorityOnActiveBranches"): "pp-main",
}


@pytest.mark.reference
@pytest.mark.slow
def test_every_cell_of_parallel_probes_aime24_table(tmp_path):
    """`mars import parallel-probe --spacing native` + `mars simulate --protocol parallel-probe`
    prints the authors' table for their own data: all seven rows, every cell as printed."""
    src = PP_DATA / "aime24.json"
    if not src.exists():
        pytest.skip("needs ../shared/data/parallel-probe-qwen3-8b")
    pool, out = tmp_path / "pool", tmp_path / "sim"
    res = runner.invoke(
        app, ["import", "parallel-probe", str(src), str(pool), "--spacing", "native"]
    )
    assert res.exit_code == 0, res.output
    methods = ",".join(CSV_METHODS.values())
    args = ["simulate", str(pool), "-m", methods, "--out", str(out), "-q"]
    args += ["--protocol", "parallel-probe", "--budget", "64", "--iterations", "100", "--seed", "0"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    with open(PP_DATA / "aime24_raw.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 7
    for row in rows:
        method = CSV_METHODS[row["Solver"], row["Strategy"]]
        got = json.loads((out / method / "overall.json").read_text())["parallel_probe"]
        want = {
            "Acc": float(row["Acc"]),
            "Cost": int(row["Cost"]),
            "Seq_Cost": int(row["Seq_Cost"]),
        }
        assert {k: got[k] for k in want} == want, method


# ---------------------------------------------------------------------------------------------
# the same semantics on random matrices, against a plain step-by-step reading

SPACING = 500


class Branch:
    """One trace read as their evaluator reads it: explore() gives the next probe (``SPACING``
    tokens), and after the recorded probes one last call ends it with the rest of its length."""

    def __init__(self, probes, tokens, final):
        self.probes, self.tokens, self.final = probes, tokens, final
        self.calls = self.cost = 0

    def explore(self):
        self.calls += 1
        if self.calls <= len(self.probes):
            self.cost += SPACING
            return self.probes[self.calls - 1], False
        spent = max(0, self.tokens - self.cost)
        self.cost += spent
        return self.final, True

    def read_all(self):
        self.cost += self.tokens
        return self.final


def majority(answers):
    return Counter(answers).most_common(1)[0][0] if answers else None


def converge(b: Branch, n: int):
    ans, done = b.explore()
    if n <= 1 or done:
        return ans
    last, streak = ans, 1
    while not done:
        ans, done = b.explore()
        streak = streak + 1 if ans == last else 1
        last = ans
        if streak >= n:
            return ans
    return ans


def adaptive(branches, threshold):
    from scipy.stats import beta

    seen = []
    for b in branches:
        seen.append(b.read_all())
        if len(seen) < 2:
            continue
        top = Counter(seen).most_common(2)
        v1, v2 = top[0][1], top[1][1] if len(top) > 1 else 0
        if 1 - beta.cdf(0.5, v1 + 1, v2 + 1) > threshold:
            return top[0][0]
    return majority(seen)


def windows(branches, w):
    seen = []
    for i in range(len(branches) // w):
        window = [b.read_all() for b in branches[i * w : (i + 1) * w]]
        seen += window
        if len(set(window)) == 1:
            return window[0]
    return majority(seen)


def controller(branches, stable, warmup, patience, max_steps, keep_votes):
    """Parallel-Probe's main-table controller, one step at a time."""
    last, done, pruned, off = [], [], [False] * len(branches), [0] * len(branches)
    for b in branches:
        a, d = b.explore()
        last.append(a)
        done.append(d)
    prev, count = None, 0
    for step in range(max_steps):
        for i, b in enumerate(branches):
            if not done[i] and not pruned[i]:
                last[i], done[i] = b.explore()
        voters = [i for i in range(len(branches)) if keep_votes or not pruned[i]]
        win = majority([last[i] for i in voters])
        running = [i for i in range(len(branches)) if not done[i] and not pruned[i]]
        enough = len(running) > 1 if keep_votes else len(voters) > 1
        if step >= warmup and enough:
            for i in running:
                off[i] = off[i] + 1 if last[i] != win else 0
                if off[i] >= patience:
                    pruned[i] = True
            if not keep_votes:
                voters = [i for i in range(len(branches)) if not pruned[i]]
                if not voters:
                    return prev
                win = majority([last[i] for i in voters])
        count = count + 1 if win == prev else 0
        prev = win
        if count >= stable:
            return win
        if all(d or p for d, p in zip(done, pruned)):
            return prev
    return prev


KNOBS = {
    "sac_n": 3,
    "asc_threshold": 0.8,
    "esc_window": 3,
    "ppm_stable": 2,
    "ppm_warmup": 1,
    "ppm_patience": 2,
    "ppm_max_steps": 5,
}


def loop_method(name, branches):
    k = KNOBS
    if name == "sc":
        return majority([b.read_all() for b in branches])
    if name == "single-sac":
        return converge(branches[0], k["sac_n"])
    if name == "sc-sac":
        return majority([converge(b, k["sac_n"]) for b in branches])
    if name == "asc":
        return adaptive(branches, k["asc_threshold"])
    if name == "esc":
        return windows(branches, k["esc_window"])
    keep = name == "pp-main-keep"
    args = (k["ppm_stable"], k["ppm_warmup"], k["ppm_patience"], k["ppm_max_steps"], keep)
    return controller(branches, *args)


def random_question(rng: np.random.Generator, n: int) -> dict:
    """Parallel-Probe's JSON shape: answers that drift and settle, ERR probes, probe counts a few
    off the length (the last recorded probe, when it lies at or past the end, is the final
    answer, as in their data)."""
    branches = []
    for _ in range(n):
        steps = int(rng.integers(1, 9))  # a recorded trace has a probe (theirs: 4 at least)
        # their data: probe counts from 8 short of the length's to one past it (only the last
        # recorded probe can lie at or past the end; the pool keeps probes below the length)
        tokens = SPACING * (steps - int(rng.integers(-3, 1))) - int(rng.integers(0, SPACING))
        answers = [str(a) for a in rng.integers(1, 4, size=steps)]
        for j in range(1, steps):
            if rng.random() < 0.6:
                answers[j] = answers[j - 1]
        # unparsed probes: ERR, and now and then an empty answer, a different answer to them
        answers = [NO_ANSWER if rng.random() < 0.1 else a for a in answers]
        answers = ["" if rng.random() < 0.03 else a for a in answers]
        past_end = SPACING * steps >= tokens
        final = answers[-1] if past_end else str(rng.integers(1, 4))
        if not past_end and rng.random() < 0.05:
            final = NO_ANSWER if rng.random() < 0.5 else ""
        branches.append([answers, tokens, final])
    return {
        "question": "q",
        "gold_answer": "2",
        "probe_freq": SPACING,
        "final_answers_trace": [b[2] for b in branches],
        "each_branch": branches,
    }


@pytest.mark.parametrize("seed", range(12))
def test_the_walk_reads_traces_as_parallel_probes_evaluator_does(tmp_path, seed):
    rng = np.random.default_rng(seed)
    data = [random_question(rng, 10) for _ in range(3)]
    src = tmp_path / "pp.json"
    src.write_text(json.dumps(data))
    pool = open_pool(import_parallel_probe(src, tmp_path / "pool", spacing=None))
    names = ["sc", "single-sac", "sc-sac", "asc", "esc", "pp-main", "pp-main-keep"]
    settings = Settings(
        budget=7,
        iterations=6,
        seed=seed,
        warmup=0,
        spacing=SPACING,
        protocol="parallel-probe",
        **KNOBS,
    ).validate()
    for qid, item in enumerate(data):
        arr = question_arrays(pool.read_question(qid), SPACING)
        res = simulate_question(arr, parse_methods(",".join(names)), settings)
        for i in range(settings.iterations):
            order = list(range(10))
            random.Random(seed + i).shuffle(order)
            for name in names:
                branches = [Branch(*item["each_branch"][j]) for j in order[:7]]
                want = loop_method(name, branches)
                r = res.methods[name]
                got = arr.representatives[int(r.answer[i])] if r.answer[i] >= 0 else None
                costs = [b.cost for b in branches]
                assert (got, int(r.tokens[i])) == (want, sum(costs)), (name, qid, i)
                started = [c for b, c in zip(branches, costs) if b.calls or b.cost]
                assert int(r.longest_tokens[i]) == max(started), (name, qid, i)


def test_shuffles_are_pythons_random_shuffle_of_the_traces():
    got = shuffles(128, 64, 3, seed=5)
    for i in range(3):
        order = list(range(128))
        random.Random(5 + i).shuffle(order)
        assert got[i].tolist() == order[:64]


def test_drawing_more_traces_than_a_question_has_is_refused():
    from mars.errors import SimulationError

    with pytest.raises(SimulationError, match="without replacement"):
        shuffles(10, 11, 1, 0)


def test_sample_more_methods_report_rounds_as_their_sequential_tokens(tmp_path):
    """ESC's sequential tokens are each window's longest trace, summed; ASC's are its total."""
    rng = np.random.default_rng(1)
    src = tmp_path / "pp.json"
    src.write_text(json.dumps([random_question(rng, 12)]))
    pool = open_pool(import_parallel_probe(src, tmp_path / "pool", spacing=None))
    arr = question_arrays(pool.read_question(0), SPACING)
    s = Settings(budget=12, iterations=4, protocol="parallel-probe", esc_window=4).validate()
    res = simulate_question(arr, parse_methods("asc,esc,sc"), s)
    S = shuffles(12, 12, 4, s.seed)
    esc, asc, sc = res.methods["esc"], res.methods["asc"], res.methods["sc"]
    for i in range(4):
        used = esc.tokens[i]
        lens = arr.lengths[S[i]]
        n = int(np.searchsorted(np.cumsum(lens), used, side="left")) + 1
        assert lens[:n].sum() == used and n % 4 == 0
        assert esc.seq_tokens[i] == lens[:n].reshape(-1, 4).max(axis=1).sum()
    assert (asc.seq_tokens == asc.tokens).all() and esc.rounds == 4 and asc.rounds == 1
    assert (sc.seq_tokens == arr.lengths[S].max(axis=1)).all() and sc.rounds == 0


@pytest.mark.parametrize("protocol", ["bootstrap", "parallel-probe"])
def test_an_esc_window_larger_than_the_budget_is_one_window_of_the_whole_budget(tmp_path, protocol):
    """The default window 8 at --budget 4 draws the four traces as one window, as window 4 does:
    not an empty sample (no answer, 0 tokens)."""
    rng = np.random.default_rng(3)
    src = tmp_path / "pp.json"
    src.write_text(json.dumps([random_question(rng, 12)]))
    pool = open_pool(import_parallel_probe(src, tmp_path / "pool", spacing=None))
    if protocol == "parallel-probe":
        arr = question_arrays(pool.read_question(0), SPACING)
    else:
        from mars.method.arrays import load_arrays

        arr = load_arrays(pool.read_question(0), None, spacing=SPACING, window=2048)
    runs = {}
    for window in (4, 8, 16):
        s = Settings(
            budget=4, iterations=6, warmup=0, protocol=protocol, esc_window=window
        ).validate()
        runs[window] = simulate_question(arr, parse_methods("esc,sc"), s).methods
    esc = runs[8]["esc"]
    assert (esc.answer >= 0).all() and (esc.tokens == esc.baseline).all()
    assert esc.rounds == 4 and (esc.seq_tokens == esc.longest_tokens).all()
    for window in (8, 16):
        for k in ("answer", "tokens", "seq_tokens", "correct"):
            assert (getattr(runs[window]["esc"], k) == getattr(runs[4]["esc"], k)).all(), k
    # not unanimous: the majority of the whole budget, which is self-consistency's vote
    split = esc.stopped_by == "budget"
    assert (esc.answer[split] == runs[8]["sc"].answer[split]).all()


@pytest.mark.parametrize("seed", range(6))
def test_waves_are_charged_the_protocols_step_costs(tmp_path, seed):
    """sc-mars2-waves under the parallel-probe protocol: with one wave it is sc-mars2 (answers,
    stops and every token count); with several, a wave before the stopping one costs its traces'
    full reading, the stopping wave its step costs at the stop, the later ones nothing."""
    rng = np.random.default_rng(seed)
    src = tmp_path / "pp.json"
    src.write_text(json.dumps([random_question(rng, 12)]))
    pool = open_pool(import_parallel_probe(src, tmp_path / "pool", spacing=None))
    arr = question_arrays(pool.read_question(0), SPACING)
    base = {"budget": 12, "iterations": 8, "warmup": 0, "seed": seed, "protocol": "parallel-probe"}
    s = Settings(**base, wave_size=12).validate()
    res = simulate_question(arr, parse_methods("sc-mars2,sc-mars2-waves"), s).methods
    one, waves = res["sc-mars2"], res["sc-mars2-waves"]
    for k in ("answer", "position", "tokens", "seq_tokens", "longest_tokens"):
        assert np.array_equal(getattr(one, k), getattr(waves, k)), k
    assert np.array_equal(one.stopped_by, waves.stopped_by)
    assert (one.tokens != arr.lengths[shuffles(12, 12, 8, seed)].sum(axis=1)).any()
    s = Settings(**base, wave_size=4).validate()
    r = simulate_question(arr, parse_methods("sc-mars2-waves"), s).methods["sc-mars2-waves"]
    S = shuffles(12, 12, 8, seed)
    full = arr.step_cost[:, -1]
    for i in range(8):
        if r.stopped_by[i] == "budget":
            assert r.tokens[i] == full[S[i]].sum()
            continue
        k = int(np.searchsorted(arr.grid, r.position[i]))
        options = [
            full[S[i, :lo]].sum() + arr.step_cost[S[i, lo : lo + 4], k].sum()
            for lo in range(0, 12, 4)
        ]
        assert r.tokens[i] in options


def test_a_tie_goes_to_the_answer_seen_first_or_to_the_lowest_id():
    from mars.method.voting import leader, tally

    ids = np.array([[2, 1, 1, 2, 0], [0, 3, 3, 0, -1]])
    eligible = ids >= 0
    votes = tally(ids, np.ones(1), eligible, 4)
    assert leader(votes)[0].tolist() == [1, 0]  # the MARS reference: lowest id
    assert leader(votes, ids, eligible)[0].tolist() == [2, 0]  # Parallel-Probe: first seen
    eligible[0, 0] = False  # a trace that does not vote does not count as seen
    votes = tally(ids, np.ones(1), eligible, 4)
    assert leader(votes, ids, eligible)[0].tolist() == [1, 0]


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--budget", "11"], "draws without replacement, and question 0 of"),
        (["--cache", "CACHE"], "takes neither --fit nor --cache"),
        (["--fit", "FIT"], "takes neither --fit nor --cache"),
    ],
)
def test_what_the_protocol_cannot_do_is_one_line_before_any_work(tmp_path, extra, message):
    rng = np.random.default_rng(0)
    src = tmp_path / "pp.json"
    src.write_text(json.dumps([random_question(rng, 10)]))
    import_parallel_probe(src, tmp_path / "pool", spacing=None)
    extra = [str(tmp_path / e) if e.isupper() else e for e in extra]
    args = ["simulate", str(tmp_path / "pool"), "-m", "sc", "--out", str(tmp_path / "out")]
    res = runner.invoke(app, [*args, "--protocol", "parallel-probe", "--warmup", "4", *extra])
    assert res.exit_code == 2 and message in res.output, res.output
    assert res.output.count("\n") == 1 and "note:" not in res.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "CACHE").exists()


def test_sizes_without_meaning_are_refused_and_surprising_ones_explained():
    """check_sizes: a warmup beyond a question's traces, or outside 1..budget for the DeepConf
    methods, is refused; a budget beyond the traces (each drawn several times) and a warmup
    beyond the budget (run outside it) are legal and explained."""
    from mars.method.protocol import check_sizes
    from mars.method.registry import parse_methods

    traces = {0: 64, 1: 128}
    sc, dco = parse_methods("sc,sc-mars-cal"), parse_methods("sc,dco")
    with pytest.raises(SimulationError, match=r"--warmup 100: question 0 of P has only 64 traces"):
        check_sizes(Settings(warmup=100, budget=32), traces, sc, "P")
    for w, b in ((0, 32), (40, 32)):
        with pytest.raises(SimulationError, match=rf"--warmup {w}: the DeepConf methods \(dco\)"):
            check_sizes(Settings(warmup=w, budget=b), traces, dco, "P")
    assert check_sizes(Settings(warmup=0, budget=32), traces, sc, "P") == []  # no warmup: q = 1
    assert check_sizes(Settings(warmup=1, budget=1), traces, dco, "P") == []
    notes = check_sizes(Settings(warmup=16, budget=512), {0: 128, 1: 128}, sc, "P")
    assert notes == [
        "budget 512 > the 128 traces per question: bootstrap samples are drawn with replacement, "
        "so a sample holds each trace 4.0 times on average"
    ]
    (note,) = check_sizes(Settings(warmup=16, budget=256), traces, dco, "P")
    assert "the 64 traces of question 0 (the fewest)" in note and "4.0 times" in note
    (note,) = check_sizes(Settings(warmup=40, budget=32), traces, sc, "P")
    assert note.startswith("warmup 40 > budget 32: the warmup traces are run in full, outside")
    assert check_sizes(Settings(warmup=40, budget=32), traces, parse_methods("sc,sc-pp"), "P") == []
    # an ESC window (or a wave) larger than the budget runs as the whole budget, and says so
    esc = parse_methods("sc,esc,sc-mars2-waves")
    notes = check_sizes(Settings(warmup=0, budget=4), traces, esc, "P")
    assert notes == [
        "esc: --esc-window 8 > --budget 4: runs as --esc-window 4, the whole budget at once",
        "sc-mars2-waves: --wave-size 16 > --budget 4: runs as --wave-size 4, the whole budget at "
        "once",
    ]
    assert check_sizes(Settings(warmup=0, budget=16), traces, esc, "P") == []
