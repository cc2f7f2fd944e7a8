"""The library's face (mars.Stopper): one checkpoint step, the simulator's decision."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from util import write_layout_pool

import mars
from mars.errors import MarsError, UsageError
from mars.live import decide, live_settings
from mars.method.arrays import checkpoint_answers, checkpoint_confidences
from mars.method.registry import live_methods
from mars.store.grid import Grid
from mars.store.pool import open_pool

DOC = Path(__file__).resolve().parents[2] / "docs" / "library.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def _example() -> str:
    """The docs' loop (its second block; the first makes the pool it reads)."""
    return _blocks()[1]


def _example_against_simulator(tmp_path, method, knobs, seed, n_answers=3) -> dict:
    """Run the docs example on a random stored pool; check its decisions against the
    simulator's walk over the same traces (what `mars replay` re-runs); its variables."""
    pool = write_layout_pool(
        tmp_path / "pool", seed=seed, n_questions=1, n=40, n_answers=n_answers, max_len=40000
    )
    scope = {
        "pool_path": pool,
        "qid": 0,
        "method": method,
        "knobs": knobs,
        "print": lambda *a: None,
    }
    exec(_example(), scope)
    W, N, grid, d = scope["W"], scope["N"], scope["grid"], scope["d"]
    q = open_pool(pool).read_question(0)
    settings = live_settings(N, W, 0, 2048, int(grid[-1]), knobs)
    res, arr = decide(
        q, mars.method.registry.get_method(method), settings, grid, W, np.zeros(W + N, bool)
    )
    label = str(res.stopped_by[0])
    assert d.stop == (label != "budget")
    if d.stop:
        a = int(res.answer[0])
        assert (d.label, d.position) == (label, int(res.position[0]))
        assert d.answer == (arr.representatives[a] if a >= 0 else None)
    if res.pruned_at is not None:  # pruning or per-trace exits: where each trace stopped
        assert method in ("sc-pp-faithful", "pp-main", "pp-main-keep", "sc-sac")
        lengths = q.lengths[W : W + N]
        running = {  # a trace pruned once finished has nothing left to stop
            int(j): int(p)
            for j, p in enumerate(res.pruned_at[0])
            # the last decision of a run that never stops still names the traces it stops there
            if (p < d.position or (p == d.position and not d.stop)) and p < lengths[j]
        }
        assert scope["pruned"] == running
        assert running or not knobs  # pruning is exercised with the knobs given
    return scope


TOGETHER = [m for m in live_methods() if not mars.method.registry.get_method(m).launch.staged]


@pytest.mark.parametrize(
    "method,knobs",
    [(m, {}) for m in TOGETHER]
    + [("sc-pp-faithful", {"pp_conv": 8}), ("sc-pp", {"pp_conv": 8})]
    + [("pp-main", {"ppm_stable": 8, "ppm_warmup": 1, "ppm_patience": 1})]
    + [("sc-sac", {"sac_n": 2})]
    + [("sc-mars-cal", {"guard": "tokens"})],
)
@pytest.mark.parametrize("seed", [1, 7])
def test_docs_example_decides_as_the_simulator_on_the_same_traces(tmp_path, method, knobs, seed):
    _example_against_simulator(tmp_path, method, knobs, seed)


@pytest.mark.parametrize(
    "method,knobs",
    [("sc-pp-faithful", {"pp_conv": 8}), ("sc-mars-cal", {}), ("sc-mars2", {})],
)
def test_answers_outgrowing_their_room_keep_the_decisions(tmp_path, method, knobs):
    """Many distinct answers: the stopper widens its arrays and replays the checkpoints seen."""
    scope = _example_against_simulator(tmp_path, method, knobs, seed=3, n_answers=400)
    assert scope["stopper"].width > 64


@pytest.mark.slow
def test_docs_example_runs_as_written(tmp_path, monkeypatch):
    """The blocks of docs/library.md, pasted into a fresh interpreter, run (the loop once used
    names nothing defined)."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "example.py"
    script.write_text("\n".join(_blocks()))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert re.fullmatch(r"stop at \d+ tokens: \S+ \(\w+\)", lines[0]), res.stdout
    assert re.fullmatch(r"\S+ \w+ \d+", lines[1]), res.stdout  # the launch loop's answer


def test_mars_exposes_the_stopper():
    assert {"Stopper", "Warmup", "Decision"} <= set(mars.__all__)
    assert mars.Stopper.__module__ == "mars.live.stepper"
    assert {"Stopper", "Warmup", "Decision", "__version__"} <= set(dir(mars))


def test_bad_use_is_one_clear_error():
    grid = [2048, 4096]
    with pytest.raises(Exception, match="future"):
        mars.Stopper("oracle-first", n_traces=4, grid=grid)
    with pytest.raises(UsageError, match="increasing"):
        mars.Stopper("sc-mars", n_traces=4, grid=[4096, 2048])
    s = mars.Stopper("sc-mars", n_traces=2, grid=grid)
    with pytest.raises(UsageError, match="1 answers for 2 traces"):
        s.step(["1"], [True, True])
    with pytest.raises(UsageError, match="3 running for 2 traces"):
        s.step(["1", "1"], [True, True, True])
    with pytest.raises(UsageError, match="answer 7 is not a string"):
        s.step(["1", 7], [True, True])
    with pytest.raises(UsageError, match="confidences"):
        s.step(["1", "1"], [True, True], [0.5, 0.5])
    d = s.step(["1", "1"], [True, True])
    assert not d.stop  # the margin needs more than two votes against q = 1
    s.step(["1", "1"], [False, False])
    with pytest.raises(UsageError, match="checkpoints"):
        s.step(["1", "1"], [False, False])


# -- a refused call changes nothing (issue 30, item 6) -------------------------------------------


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """One stored question cut at a 2,048-token grid: the warmup, and per checkpoint what the
    N traces feed a stopper."""
    pool = write_layout_pool(
        tmp_path_factory.mktemp("stepper") / "pool", seed=5, n_questions=1, n=40, max_len=40000
    )
    q = open_pool(pool).read_question(0)
    W, N = 8, 32
    grid = 2048 * np.arange(1, int(q.lengths.max()) // 2048 + 1)
    answers = checkpoint_answers(q, grid)
    confs = checkpoint_confidences(q, grid, 2048, conf_window="before")
    running = grid[None, :] < q.lengths[:, None]
    warmup = mars.Warmup(answers[:W].tolist(), q.final_answers[:W], q.lengths[:W], confs[:W])
    main = slice(W, W + N)
    steps = [
        (answers[main, k].tolist(), running[main, k].tolist(), confs[main, k].tolist())
        for k in range(len(grid))
    ]
    return _Traces((grid, warmup, N, steps))


class _Traces(tuple):
    __slots__ = ()

    def __repr__(self) -> str:  # hypothesis prints its arguments
        return "<traces>"


def _state(s: mars.Stopper) -> tuple:
    """Everything a step may change."""
    d = s.done
    return (
        s.k,
        None if d is None else (d.stop, d.answer, d.label, d.position, d.stop_traces.tolist()),
        s.ids.tobytes(),
        s.running.tobytes(),
        None if s.conf is None else s.conf.tobytes(),
        s.q.tobytes(),
        s.features.flips.tobytes(),
        s.features.streak.tobytes(),
        s.features.k,
        [list(m) for m in s.groups.members],
    )


def _decisions(s: mars.Stopper, steps, bad=None) -> list:
    """Feed ``steps`` until the stopper stops; before each, every refused call ``bad(k, step)``
    yields (each must raise UsageError and change nothing)."""
    out = []
    for k, (answers, running, confs) in enumerate(steps):
        for call in bad(k, (answers, running, confs)) if bad else ():
            before = _state(s)
            with pytest.raises(UsageError):
                s.step(*call)
            assert _state(s) == before, call
        d = s.step(answers, running, confs)
        out.append((d.stop, d.answer, d.label, d.position, d.stop_traces.tolist()))
        if d.stop:
            break
    return out


def _hostile(k, step):
    answers, running, confs = step
    n = len(answers)
    nan = list(confs)
    nan[n // 2] = float("nan")
    yield answers, running, nan  # refused only after the old stopper updated flips and streak
    yield answers, running, [*confs[:-1], float("inf")]
    yield answers, running, [*confs[:-1], 1e39]  # finite, but no float32 holds it
    yield answers, None, confs  # "nothing runs"
    yield "7" * n, running, confs  # one string of N characters
    yield [*answers[:-1], 7], running, confs
    yield answers, [*running[:-1], "no"], confs
    yield answers, running, [*confs[:-1], "0.5"]
    yield answers[:-1], running, confs
    yield answers, running, None
    if k and not all(running):  # an ended trace cannot run again
        yield answers, [True] * n, confs


@pytest.mark.parametrize("method", ["sc-mars-cal", "sc-mars", "sc-pp-faithful", "sc-mars2"])
def test_a_refused_step_changes_nothing(traces, method):
    """Refused calls before every checkpoint: the decisions are those of the stopper that never
    saw them (the old stopper had counted the refused call's answer flips into its switch-model
    features, and then stopped elsewhere)."""
    grid, warmup, N, steps = traces
    clean = _decisions(mars.Stopper(method, n_traces=N, grid=grid, warmup=warmup), steps)
    tried = mars.Stopper(method, n_traces=N, grid=grid, warmup=warmup)
    assert _decisions(tried, steps, _hostile) == clean


def test_the_stopper_fixes_budget_iterations_and_warmup():
    """Settings given whole keep their knobs; the budget, iterations and warmup are the
    stopper's own."""
    given = mars.method.settings.Settings(budget=512, iterations=64, warmup=16, gamma=0.7)
    s = mars.Stopper("sc-mars", n_traces=4, grid=[2048, 4096], settings=given)
    assert (s.settings.budget, s.settings.iterations, s.settings.warmup) == (4, 1, 0)
    assert s.settings.gamma == 0.7


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"method": None}, "method: None is not a method name"),
        ({"method": 3}, "method: 3 is not a method name"),
        ({"n_traces": 2.5}, "n_traces: 2.5 is not a whole number"),
        ({"n_traces": True}, "n_traces: True"),
        ({"grid": [2048.5, 4096]}, "2048.5 is not a whole number of tokens"),
        ({"grid": "2048"}, "grid: '2048' is not a sequence"),
        ({"grid": []}, "grid: 0 checkpoints"),
        ({"grid": list(range(1, 5000))}, "4999 checkpoints"),
        ({"warmup": mars.Warmup([[1, 1]], [1], [3000])}, "answer 1 is not a string"),
        ({"warmup": mars.Warmup([["1", 1]], ["1"], [3000])}, r"warmup.answers\[0\]: answer 1"),
        ({"warmup": mars.Warmup(["12"], ["1"], [3000])}, "warmup.answers"),
        ({"warmup": mars.Warmup([["1", "2"]], "1", [3000])}, "warmup.finals: '1' is not a seq"),
        ({"warmup": mars.Warmup([["1", "2"]], ["1"], [3000.5])}, "lengths\\[0\\]: 3000.5"),
        ({"warmup": mars.Warmup([["1", "2"]], ["1"], [-1])}, "lengths\\[0\\]: -1"),
        ({"warmup": mars.Warmup([["1", "2"]], ["1"], [3000], [[0.5, np.nan]])}, "nan"),
        ({"warmup": mars.Warmup([["1", "2"]], ["1"], [3000], [0.5, 0.5])}, "1 × 2 numbers"),
        ({"warmup": {"answers": []}}, "is not a mars.Warmup"),
        ({"gama": 0.5}, "unknown knob 'gama'; did you mean 'gamma'"),
        ({"budget": 8}, "unknown knob 'budget'"),
        ({"gamma": -1.0}, "^gamma=-1.0: must be ≥ 0"),
        ({"n_traces": 1 << 17}, "n_traces: 131,072 traces, more than 65,536"),
        ({"delta": "0.1"}, "knob delta=.0.1.: must be a number"),
        ({"guard": 3}, "knob guard=3: must be one of first, tokens"),
        ({"guard": "bogus"}, "^guard=bogus: must be one of first, tokens"),
        ({"settings": {"gamma": 0.5}}, "is not a mars Settings"),
        (
            {
                "settings": mars.method.settings.Settings(budget=4, iterations=1, warmup=0),
                "gamma": 1,
            },
            "not both",
        ),
        ({"memo": []}, "memo"),
    ],
)
def test_bad_construction_is_one_clear_error(kwargs, msg):
    """Inputs are checked at construction as strictly as at each step (a Warmup of int answers
    used to be taken, and the stopper then never stopped; method=None was an AttributeError; an
    unknown knob a raw TypeError)."""
    args = {"method": "sc-mars", "n_traces": 4, "grid": [2048, 4096], **kwargs}
    with pytest.raises(MarsError, match=msg) as err:
        mars.Stopper(**args)
    assert len(str(err.value).splitlines()) == 1


# -- fuzz: hostile inputs are refused in one line and leave no trace -----------------------------

_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.binary(max_size=2),
    st.dictionaries(st.text(max_size=1), st.integers(), max_size=2),
)
_HOSTILE = st.one_of(_ANY, st.lists(_ANY, min_size=0, max_size=5), st.lists(st.lists(_ANY)))


def _valid_step(call, n, with_confs, was_running) -> bool:
    """An independent statement of what a step accepts."""
    answers, running, confs = call
    ok_answers = (
        isinstance(answers, list)
        and len(answers) == n
        and all(a is None or isinstance(a, str) for a in answers)
    )
    ok_running = (
        isinstance(running, list)
        and len(running) == n
        and all(isinstance(r, bool) or (type(r) is int and r in (0, 1)) for r in running)
        and not any(r and not w for r, w in zip(running, was_running))
    )
    ok_confs = (confs is None) == (not with_confs) and (
        confs is None
        or (
            isinstance(confs, list)
            and len(confs) == n
            and all(
                isinstance(c, int | float)
                and not isinstance(c, bool)
                and np.isfinite(np.float32(c) if abs(c) < 1e39 else np.inf)
                for c in confs
            )
        )
    )
    return ok_answers and ok_running and ok_confs


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_fuzz_stopper_steps(traces, data):
    """Random hostile answers, running flags and confidences between the real steps: each is
    refused (a MarsError, one line, the state unchanged) or is a valid step; the stopper then
    decides as one fed only the accepted steps."""
    grid, warmup, _, steps = traces
    n = 4
    steps = [(a[:n], r[:n], c[:n]) for a, r, c in steps]
    s = mars.Stopper("sc-mars-cal", n_traces=n, grid=grid, warmup=warmup)
    accepted = []
    was_running = [True] * n
    for step in steps:
        if s.done is not None or s.k == len(grid):
            break
        call = list(step)
        call[data.draw(st.integers(0, 2))] = data.draw(_HOSTILE)
        before = _state(s)
        try:
            s.step(*call)
        except MarsError as exc:
            assert len(str(exc).splitlines()) == 1 and _state(s) == before
            assert not _valid_step(call, n, True, was_running), call
            call = list(step)
            s.step(*call)
        else:
            assert _valid_step(call, n, True, was_running), call
        accepted.append(call)
        was_running = [bool(r) for r in call[1]]
    ref = mars.Stopper("sc-mars-cal", n_traces=n, grid=grid, warmup=warmup)
    for call in accepted:
        ref.step(*call)
    assert _state(ref) == _state(s)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_fuzz_stopper_construction(data):
    """A Warmup, grid, n_traces or knob of any shape: a stopper, or one MarsError line."""
    fields = {
        "answers": [["1", None], ["2", "2"]],
        "finals": ["1", "2"],
        "lengths": [3000, 5000],
        "confidences": [[0.5, 0.4], [0.3, 0.2]],
    }
    args = {"method": "sc-mars-cal", "n_traces": 3, "grid": [2048, 4096]}
    target = data.draw(st.sampled_from([*fields, *args, "knob"]))
    value = data.draw(_HOSTILE)
    if target in fields:
        fields[target] = value
    elif target == "knob":
        args[data.draw(st.sampled_from(["gamma", "pp_conv", "gama", "budget"]))] = value
    else:
        args[target] = value
    try:
        s = mars.Stopper(**args, warmup=mars.Warmup(**fields))
    except MarsError as exc:
        assert len(str(exc).splitlines()) == 1
    else:
        confs = None if s.conf is None else [0.5] * s.N
        s.step(["1"] * s.N, [True] * s.N, confs)


@pytest.mark.parametrize("method", live_methods())
def test_no_live_rule_is_replayed_at_each_new_answer(method):
    """A rule whose decision depends on how many answers exist would replay its walk from the
    first checkpoint at every new answer (benchmarks/README.md: 11x at 64 checkpoints); no live
    method's rule does, so new answers only widen the stopper's room, doubling it."""
    warm = mars.Warmup([["1", "2"]] * 4, ["1", "2", "1", "1"], [3000] * 4)
    s = mars.Stopper(method, n_traces=4, grid=[2048, 4096], warmup=warm)
    assert not s.walk.rule.counts_answers
    s.step(["a", "b", "c", "d"], [True] * 4)
    assert len(s.groups) == 6 and s.width == 12


def _staged_against_simulator(tmp_path, method: str, seed: int, calibrated: bool):
    """The docs' launch loop (docs/library.md, its last block) on a random pool: its decision is
    the simulator's walk over the same traces, launch by launch (what `mars replay` re-runs)."""
    from mars.method.arrays import build_arrays
    from mars.method.learned import fit_calibration

    W, N, spacing, window = (0 if calibrated else 8), 32, 2048, 2048
    pool = write_layout_pool(
        tmp_path / f"p{seed}", seed=seed, n_questions=1, n=W + N, max_len=40000
    )
    q = open_pool(pool).read_question(0)
    grid = Grid(spacing).upto(int(q.lengths.max()))
    answers = checkpoint_answers(q, grid)
    confidences = checkpoint_confidences(q, grid, window, conf_window="before")
    running = grid[None, :] < q.lengths[:, None]
    block = _blocks()[-1].replace('"sc-mars2-launch"', repr(method))
    cal = None
    if calibrated:  # the same loop, with a calibration instead of the warmup (no confidences)
        other = write_layout_pool(tmp_path / f"c{seed}", seed=seed + 100, n_questions=3)
        cal = fit_calibration([build_arrays(open_pool(other).read_question(i)) for i in range(3)])
        block = block.replace("warmup=warmup)", "calibration=cal)")
        block = block.replace("confidences[part, k]", "None")
        block = block.replace("confidences[part, -1]", "None")
    warmup = mars.Warmup(answers[:W].tolist(), q.final_answers[:W], q.lengths[:W], confidences[:W])
    scope = {
        "mars": mars,
        "np": np,
        "N": N,
        "W": W,
        "grid": grid,
        "answers": answers,
        "running": running,
        "confidences": confidences,
        "q": q,
        "warmup": warmup,
        "cal": cal,
        "print": lambda *a: None,
    }
    exec(block, scope)
    d, stopper = scope["d"], scope["stopper"]
    settings = live_settings(N, W, 0, spacing, int(grid[-1]), {})
    res, arr = decide(
        q,
        mars.method.registry.get_method(method),
        settings,
        grid,
        W,
        np.zeros(W + N, bool),
        calibration=cal,
    )
    label = str(res.stopped_by[0])
    a = int(res.answer[0])
    assert (d.stop, d.label) == (label != "budget", label)
    assert d.answer == (arr.representatives[a] if a >= 0 else None)
    if d.stop:
        assert d.position == int(res.position[0])
    return stopper


@pytest.mark.parametrize("method", ["sc-mars2-launch", "sc-mars2-waves"])
@pytest.mark.parametrize("calibrated", [False, True], ids=["warmup", "calibration"])
@pytest.mark.parametrize("seed", [1, 4, 9])
def test_launches_decide_as_the_simulator_on_the_same_traces(tmp_path, method, calibrated, seed):
    stopper = _staged_against_simulator(tmp_path, method, seed, calibrated)
    assert stopper.staged and len(stopper.plan) >= 1


def test_a_launch_is_stepped_and_landed_in_turn(tmp_path):
    """step() takes the current launch's traces only; land() outside a staged method, or
    finish() while a launch runs, is refused in one line and changes nothing."""
    grid = 2048 * np.arange(1, 5)
    split = ["1", "2", "3", "4"]  # answers that do not agree: no stop
    warmup = mars.Warmup([[a] * 4 for a in split], split, [9000] * 4)
    s = mars.Stopper("sc-mars2-waves", n_traces=8, grid=grid, warmup=warmup, wave_size=4)
    assert s.current == (0, 4)
    with pytest.raises(UsageError, match="8 answers for 4 traces"):
        s.step(["1"] * 8, [True] * 8)
    with pytest.raises(UsageError, match="a launch is still running"):
        s.finish()
    assert not s.step(split, [True] * 4).stop and s.current == (0, 4)
    assert not s.land(split).stop and s.current == (4, 8)  # the second wave
    assert not s.step(split, [False] * 4).stop
    assert not s.land(split).stop and s.current is None
    d = s.finish()
    assert d.label == "budget" and d.answer in split
    together = mars.Stopper("sc-mars2", n_traces=8, grid=grid, warmup=warmup)
    with pytest.raises(UsageError, match="starts its traces together"):
        together.land(["1"] * 8)


@pytest.mark.parametrize("method", ["sc-mars-cal", "sc-mars", "sc-mars-cert"])
@pytest.mark.parametrize("seed", [1, 4, 9])
def test_the_papers_rules_with_a_calibration_decide_as_the_simulator(tmp_path, method, seed):
    """The paper's MARS rules read a calibration's switch model and γ instead of a warmup: a
    Stopper fed the traces checkpoint by checkpoint decides as the simulator's walk over them,
    and never before the guard's reach (no warmup majority confirms an early leader)."""
    from mars.method.arrays import build_arrays
    from mars.method.learned import fit_calibration
    from mars.method.stopping import GUARD_BEFORE

    N, spacing = 32, 2048
    pool = write_layout_pool(tmp_path / f"p{seed}", seed=seed, n_questions=1, n=N, max_len=40000)
    q = open_pool(pool).read_question(0)
    grid = Grid(spacing).upto(int(q.lengths.max()))
    answers = checkpoint_answers(q, grid)
    running = grid[None, :] < q.lengths[:, None]
    other = write_layout_pool(tmp_path / f"c{seed}", seed=seed + 100, n_questions=3)
    cal = fit_calibration([build_arrays(open_pool(other).read_question(i)) for i in range(3)])
    assert cal.switch is not None and cal.gamma is not None
    stopper = mars.Stopper(method, n_traces=N, grid=grid, calibration=cal)
    for k in range(len(grid)):
        d = stopper.step(answers[:, k], running[:, k])
        if d.stop:
            break
    else:
        d = stopper.finish(q.final_answers)
    settings = live_settings(N, 0, 0, spacing, int(grid[-1]), {})
    res, arr = decide(
        q, mars.method.registry.get_method(method), settings, grid, 0, np.zeros(N, bool),
        calibration=cal,
    )  # fmt: skip
    label = str(res.stopped_by[0])
    a = int(res.answer[0])
    assert (d.stop, d.label) == (label != "budget", label)
    assert d.answer == (arr.representatives[a] if a >= 0 else None)
    if d.stop:
        assert d.position == int(res.position[0]) >= GUARD_BEFORE
