"""One method deciding on one question, checkpoint by checkpoint: the library's face.

A generation loop of any engine feeds :class:`Stopper` what its N parallel traces hold at each
checkpoint of a fixed grid (the answer each would give, whether it is still generating, and its
checkpoint confidence where the method or the switch model uses one) and gets back a
:class:`Decision`: stop or go on, the answer, and which traces to stop now::

    stopper = mars.Stopper("sc-mars-cal", n_traces=64, grid=grid, warmup=warmup)
    for k in range(len(grid)):
        d = stopper.step(answers, running, confidences)
        if d.stop:
            break

    else:
        d = stopper.finish(final_answers)   # the rule never fired: the full-budget vote

The decision is the simulator's own: the state holds the question's arrays (warmup traces, then
the N traces, one column per checkpoint, answers grouped online in arrival order) and each
:meth:`Stopper.step` is one :meth:`mars.method.walk.MethodRun.step` over the one iteration whose
sample is the N traces, told which of them still run; the switch model's features come one
checkpoint at a time (:class:`mars.method.features.RunningFeatures`). The walk is never re-run
over past checkpoints, except when new answers outgrow the room left for them (rarely: the room
doubles; but at every new answer for a rule whose decision depends on how many answers exist,
:attr:`mars.method.stopping.Rule.counts_answers`, which no live method's rule does).
:meth:`Stopper.finish` walks the checkpoints the loop did not reach with every trace ended, then
takes the full-budget vote, as :meth:`~mars.method.walk.MethodRun.finish` does. Re-simulating the
traces afterwards (:func:`mars.live.decide`, what `mars replay` does) gives the same decisions.
"""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError
from ..method.answers import OnlineGroups
from ..method.arrays import QuestionArrays
from ..method.features import RunningFeatures, question_features
from ..method.learned import Calibration
from ..method.qmodel import Predictor, fit_question
from ..method.registry import Method, check_calibrated, live_method, live_methods
from ..method.settings import LIVE_KEYS, MAX_BUDGET, SPECS, Settings
from ..method.walk import MethodRun, QuestionContext

#: The most checkpoints a grid may have: every look of the rule builds arrays over all of it, so
#: this bounds the memory of a stopper (and of a live run and its replay), whatever a caller or a
#: manifest claims (at a 2,048-token spacing: 8.4 million tokens).
MAX_CHECKPOINTS = 1 << 12


@dataclass
class Warmup:
    """The warmup traces, run to completion before the N traces start: the answer each held at
    every checkpoint (its final answer once finished; None: no answer) [W][m], their final
    answers [W], their lengths in tokens [W], and their checkpoint confidences float [W, m]
    (None: the engine gives none)."""

    answers: Sequence[Sequence[str | None]]
    finals: Sequence[str | None]
    lengths: Sequence[int] | np.ndarray
    confidences: np.ndarray | None = None


@dataclass
class Decision:
    """What the method says at one checkpoint.

    ``stop``: stop every trace now, ``answer`` is the answer (``label`` says which test fired);
    otherwise ``stop_traces`` are traces the method stops while the others go on (Parallel-Probe's
    pruning). ``stop_traces`` index the N traces.
    """

    stop: bool
    answer: str | None
    label: str
    position: int
    stop_traces: np.ndarray


# -- what the stopper accepts: checked in full before any state changes -----------------------


def _shown(value: Any) -> str:
    return reprlib.repr(value)


def _items(given: Any, what: str, kind: str) -> list:
    """The elements of a one-dimensional sequence (a list, a tuple, a numpy array); one string,
    a mapping, a set or a scalar is refused rather than taken apart."""
    if isinstance(given, str | bytes | Mapping | AbstractSet) or given is None:
        raise UsageError(f"{what}: {_shown(given)} is not a sequence of {kind}")
    if isinstance(given, np.ndarray):
        if given.ndim != 1:
            raise UsageError(f"{what}: an array of shape {given.shape}, not a sequence of {kind}")
        return given.tolist()
    try:
        return list(given)
    except TypeError:
        raise UsageError(f"{what}: {_shown(given)} is not a sequence of {kind}") from None


def _answers(given: Any, n: int, what: str) -> list[str | None]:
    """``n`` answers, each a string or None."""
    items = _items(given, what, "answers (strings or None)")
    if len(items) != n:
        raise UsageError(f"{what}: {len(items)} answers for {n} traces")
    for j, a in enumerate(items):
        if a is not None and not isinstance(a, str):
            raise UsageError(f"{what}: answer {_shown(a)} is not a string or None (trace {j})")
    return [None if a is None else str(a) for a in items]


def _flags(given: Any, n: int, what: str) -> np.ndarray:
    """``n`` booleans (True/False, or 1/0)."""
    if isinstance(given, np.ndarray) and given.dtype == bool and given.shape == (n,):
        return given.copy()
    items = _items(given, what, "booleans")
    if len(items) != n:
        raise UsageError(f"{what}: {len(items)} running for {n} traces")
    for j, v in enumerate(items):
        if not (isinstance(v, bool | np.bool_) or (type(v) is int and v in (0, 1))):
            raise UsageError(f"{what}: {_shown(v)} is not True or False (trace {j})")
    return np.array(items, dtype=bool).reshape(n)


def _numbers(given: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    """Finite numbers of ``shape`` (as float32, as the stopper keeps them)."""
    try:
        arr = np.asarray(given)
    except (TypeError, ValueError):  # ragged
        arr = np.asarray(None)
    if isinstance(given, str | bytes | Mapping | AbstractSet) or arr.shape != shape:
        raise UsageError(f"{what}: {_shown(given)} is not {' × '.join(map(str, shape))} numbers")
    if arr.dtype.kind not in "fiu":
        bad = next(
            (
                v
                for v in arr.ravel().tolist()
                if isinstance(v, bool) or not isinstance(v, int | float)
            ),
            arr.dtype,
        )
        raise UsageError(f"{what}: {_shown(bad)} is not a number")
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(np.float32)
    if not np.isfinite(out).all():
        j = np.unravel_index(int(np.flatnonzero(~np.isfinite(out))[0]), shape)
        raise UsageError(
            f"{what}: {_shown(arr[j].item())} (trace {j[0]}) is not a finite number a float32 holds"
        )
    return out


def _whole(value: Any, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise UsageError(f"{what}: {_shown(value)} is not a whole number ≥ {low}")
    return int(value)


def _grid(given: Any) -> np.ndarray:
    items = _items(given, "grid", "checkpoint positions")
    if not items or len(items) > MAX_CHECKPOINTS:
        raise UsageError(f"grid: {len(items)} checkpoints (1 to {MAX_CHECKPOINTS:,})")
    bad = [v for v in items if isinstance(v, bool) or not isinstance(v, int | np.integer)]
    if bad:  # a list, not next(..., None): None itself is a bad position
        raise UsageError(f"grid: {_shown(bad[0])} is not a whole number of tokens")
    if min(items) <= 0 or max(items) >= 2**62:
        raise UsageError("grid: checkpoint positions must be positive and increasing")
    grid = np.array(items, dtype=np.int64)
    if (np.diff(grid) <= 0).any():
        raise UsageError("grid: checkpoint positions must be positive and increasing")
    return grid


def _method(method: Any) -> Method:
    if not isinstance(method, str | Method):
        raise UsageError(
            f"method: {_shown(method)} is not a method name (live: {', '.join(live_methods())})"
        )
    return live_method(method)


def check_knobs(knobs: Mapping[str, Any], what: str = "knob") -> None:
    """Refuse a knob the stopping rules do not have (naming the valid ones and the nearest), one
    that is not a number, or, for a setting of named choices (``guard``), not a word (their
    ranges and choices are :meth:`Settings.validate`'s)."""
    unknown = [k for k in knobs if k not in LIVE_KEYS]
    if unknown:
        name = str(unknown[0])
        near = difflib.get_close_matches(name, LIVE_KEYS, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise UsageError(f"unknown {what} {name!r}{hint} (valid: {', '.join(LIVE_KEYS)})")
    for name, value in knobs.items():
        choices = SPECS[name].choices
        if value is None and SPECS[name].optional:  # None: its default, derived (risk_alpha)
            continue
        if choices is not None:  # a word (--guard tokens): which ones, validate says
            if not isinstance(value, str):
                raise UsageError(
                    f"{what} {name}={_shown(value)}: must be one of {', '.join(choices)}"
                )
        elif isinstance(value, bool) or not isinstance(
            value, int | float | np.integer | np.floating
        ):
            raise UsageError(f"{what} {name}={_shown(value)}: must be a number")


def _settings(settings: Any, knobs: dict, n: int, w: int) -> Settings:
    """The walk's settings, refused in the library's words (``gamma=-1``, not ``--gamma``)."""
    if n > MAX_BUDGET:
        raise UsageError(f"n_traces: {n:,} traces, more than {MAX_BUDGET:,}")
    if w > MAX_BUDGET:
        raise UsageError(f"warmup: {w:,} traces, more than {MAX_BUDGET:,}")
    if settings is None:
        check_knobs(knobs)
        return Settings(budget=n, iterations=1, warmup=w, **knobs).validate(keywords=True)
    if knobs:
        raise UsageError(f"give settings or knobs ({', '.join(knobs)}), not both")
    if not isinstance(settings, Settings):
        raise UsageError(f"settings: {_shown(settings)} is not a mars Settings")
    # the stopper's own traces, one iteration and its warmup, whatever the settings say
    return settings.replace(budget=n, iterations=1, warmup=w).validate(keywords=True)


def _warmup(warmup: Any, m: int) -> tuple[list, list, np.ndarray, np.ndarray | None]:
    """(answers [W][m], finals [W], lengths [W], confidences [W, m] or None), checked."""
    if warmup is None:
        return [], [], np.zeros(0, dtype=np.int64), None
    if not isinstance(warmup, Warmup):
        raise UsageError(f"warmup: {_shown(warmup)} is not a mars.Warmup")
    finals_in = _items(warmup.finals, "warmup.finals", "answers (strings or None)")
    W = len(finals_in)
    finals = _answers(finals_in, W, "warmup.finals")
    rows = _items(warmup.answers, "warmup.answers", "traces")
    if len(rows) != W:
        raise UsageError(f"warmup: answers must be {W} traces × {m} checkpoints")
    answers = []
    for j, row in enumerate(rows):
        items = _items(row, f"warmup.answers[{j}]", "answers (strings or None)")
        if len(items) != m:
            raise UsageError(f"warmup: answers must be {W} traces × {m} checkpoints")
        answers.append(_answers(items, m, f"warmup.answers[{j}]"))
    lengths = _items(warmup.lengths, "warmup.lengths", "lengths")
    if len(lengths) != W:
        raise UsageError(f"warmup: {len(lengths)} lengths for {W} traces")
    for j, v in enumerate(lengths):
        _whole(v, f"warmup.lengths[{j}]", 0)
    confs = None
    if warmup.confidences is not None:
        confs = _numbers(warmup.confidences, (W, m), "warmup.confidences")
    return answers, finals, np.array(lengths, dtype=np.int64).reshape(W), confs


class Stopper:
    """``method`` on one question of ``n_traces`` parallel traces over the checkpoint ``grid``
    (positions in tokens), after ``warmup`` (see the module docstring).

    ``settings``: a :class:`mars.method.settings.Settings`, or instead its stopping knobs as
    keywords (γ, δ, ``pp_conv``, …: :data:`mars.method.settings.LIVE_KEYS`); the budget is
    ``n_traces``, one iteration. ``calibration`` (:class:`mars.method.learned.Calibration`, from
    ``mars calibrate``): MARS2 reads it instead of a warmup (give no ``warmup`` then). Methods
    that read the future or use DeepConf's filter cannot decide online and are refused.

    Every input is checked, at construction and at each :meth:`step`, before anything changes: a
    refused call (:class:`mars.errors.UsageError`, one line) leaves the stopper as it was, so the
    next correct call decides as if the refused one had never been made.
    """

    def __init__(
        self,
        method: str | Method,
        n_traces: int,
        grid: Sequence[int] | np.ndarray,
        warmup: Warmup | None = None,
        settings: Settings | None = None,
        memo: dict | None = None,
        calibration: Calibration | None = None,
        **knobs,
    ):
        self.method = _method(method)
        if calibration is not None:
            if not isinstance(calibration, Calibration):
                raise UsageError(f"calibration: {_shown(calibration)} is not a mars Calibration")
            if warmup is not None:
                raise UsageError("calibration: it replaces the warmup; give one or the other")
            check_calibrated(self.method, calibration)
        self.calibration = calibration
        grid = _grid(grid)
        N, m = _whole(n_traces, "n_traces", 1), len(grid)
        warm_answers, warm_finals, warm_lengths, warm_confs = _warmup(warmup, m)
        W = len(warm_finals)
        settings = _settings(settings, knobs, N, W)
        if memo is not None and not isinstance(memo, dict):
            raise UsageError(f"memo: {_shown(memo)} is not a dict")
        self.lengths = np.zeros(W + N, dtype=np.int64)  # the N traces': unused by the decision
        self.lengths[:W] = warm_lengths
        self.settings, self.grid, self.W, self.N = settings, grid, W, N
        self.memo = {} if memo is None else memo
        self.groups = OnlineGroups()
        arrival = [a for k in range(m) for a in (row[k] for row in warm_answers)]
        self.groups.add(arrival)
        self.groups.add(warm_finals)
        n = W + N
        self.ids = np.full((n, m), -1, dtype=np.int32)
        for j, row in enumerate(warm_answers):
            self.ids[j] = self.groups.add(row)
        self.final_ids = np.full(n, -1, dtype=np.int32)
        self.final_ids[:W] = self.groups.add(warm_finals)
        self.conf: np.ndarray | None = None
        if warm_confs is not None:
            self.conf = np.zeros((n, m), dtype=np.float32)
            self.conf[:W] = warm_confs
        self.running = np.zeros((N, m), dtype=bool)
        self.q = np.ones((n, m), dtype=np.float32)
        self.features = RunningFeatures(N)
        self.k = 0  # checkpoints seen (of the current launch)
        self.done: Decision | None = None
        self.warm = np.flatnonzero(self.final_ids[:W] >= 0)
        self.model: Predictor | None = None
        #: a staged method's launches ((first, last + 1) of the N traces), the one running, and
        #: the checkpoints each launch before it took (the walk is replayed launch by launch)
        self.staged = self.method.launch.staged
        #: launches that overlap (:class:`mars.method.launch.Early`): one clock, ``k`` its
        #: checkpoints seen; the checkpoint after which the rest launched (-1: not yet)
        self.early = self.method.launch.overlaps
        self.launched_at = -1
        self.plan: list[tuple[int, int]] = [(0, N)]
        self.launch_i = 0
        self.steps: list[int] = []
        self._build(len(self.groups))
        if self.staged:
            self.plan = [(int(lo), int(hi)) for lo, hi in self.walk.launches()]
            self._build(len(self.groups))

    def _arrays(self, width: int) -> QuestionArrays:
        reps: list[str | None] = [ms[0] for ms in self.groups.members]
        reps += [None] * (width - len(reps))  # room for answers still to come
        return QuestionArrays(
            qid=0,
            ground_truth="",
            grid=self.grid,
            lengths=self.lengths,
            final_ids=self.final_ids,
            ids=self.ids,
            representatives=reps,
            correct=np.zeros(width, dtype=bool),
            conf_at_pos=self.conf,
        )

    def _build(self, width: int) -> None:
        """The walk over arrays ``width`` answers wide, replaying the checkpoints seen (the rule's
        memory is rebuilt exactly: same inputs, same steps)."""
        self.width = width
        arr = self._arrays(width)
        if self.model is None and self.calibration is not None and self.method.q == "learned":
            self.model = self.calibration.switch_model()  # learned once: no warmup
        if self.model is None and len(self.warm):
            self.model = fit_question(arr, self.warm, self.memo).model
            if self.model is not None:
                X = question_features(arr, self.warm)
                self.q[: self.W][self.warm] = self._predict(X).reshape(len(self.warm), -1)
        main = np.arange(self.W, self.W + self.N)
        ctx = QuestionContext(
            arr,
            self.settings,
            main[None, :],
            self.warm,
            memo=self.memo,
            q_learned=self.q,  # filled in column by column
            calibration=self.calibration,
        )
        walk = MethodRun(ctx, self.method)
        walk.start()
        if self.early:
            for t in range(self.k):
                walk.step(t, self._told(t))
            self.walk = walk
            return
        if self.staged:
            for i, done_steps in enumerate(self.steps):
                self._open(walk, i)
                for k in range(done_steps):
                    walk.step(k, self._told(k))
                walk.land()
            self._open(walk, self.launch_i)
        for k in range(self.k):
            walk.step(k, self._told(k))
        self.walk = walk

    def _open(self, walk: MethodRun, i: int) -> None:
        """Launch ``i`` in ``walk``: it decides at every checkpoint until the loop says the
        launch has ended (:meth:`land`), which only the loop knows live."""
        if i < len(self.plan):
            walk.launch(*self.plan[i], ends=np.full(1, len(self.grid), dtype=np.int64))

    @property
    def current(self) -> tuple[int, int] | None:
        """The traces (first, last + 1 of the N) of the launch running now: every one for a
        method that starts its traces together; a staged method's current launch, None once
        every launch has run (:meth:`land`) or the method has decided."""
        if self.early:  # the traces launched so far, a prefix of the N
            if self.done is not None or self.walk.closed[0]:
                return None
            return (0, self.N if self.launched_at >= 0 else self.plan[0][1])
        if self.done is not None or self.launch_i >= len(self.plan):
            return None
        return self.plan[self.launch_i]

    def _local(self, k: int) -> np.ndarray:
        """Overlapping launches: the checkpoint of its own grid each of the N traces is at when
        the clock reads ``k`` (-1: not launched; :meth:`mars.method.walk.MethodRun.local`)."""
        w = self.plan[0][1]
        loc = np.full(self.N, k, dtype=np.int64)
        s = self.launched_at
        loc[w:] = k - s - 1 if 0 <= s < k else -1
        return loc

    def _told(self, k: int) -> np.ndarray:
        """Which of the N traces ran at checkpoint ``k``, as the walk's one row [1, N]."""
        if self.early:
            loc = self._local(k)
            inside = (loc >= 0) & (loc < len(self.grid))
            told = np.zeros(self.N, dtype=bool)
            js = np.flatnonzero(inside)
            told[js] = self.running[js, loc[js]]
            return told[None]
        return self.running[None, :, k]

    def _predict(self, X: np.ndarray) -> np.ndarray:
        assert self.model is not None
        flat = X.reshape(-1, X.shape[-1])
        return self.model.predict_proba(flat)[:, 1].astype(np.float32)

    def step(
        self,
        answers: Sequence[str | None],
        running: Sequence[bool] | np.ndarray,
        confidences: Sequence[float] | np.ndarray | None = None,
    ) -> Decision:
        """The next checkpoint: each trace's answer there (its final answer once it has finished;
        None: none), whether it is still generating, and its checkpoint confidence."""
        if self.done is not None:
            raise UsageError("the method has already decided this question")
        cur = self.current
        if cur is None:
            raise UsageError("every launch has run: call finish()")
        lo, hi = cur
        k, N = self.k, hi - lo
        if k >= len(self.grid) and not self.early:
            raise UsageError(f"all {len(self.grid)} checkpoints of the grid have been seen")
        where = f"checkpoint {k}"
        answers = _answers(answers, N, f"{where}: answers")
        run = _flags(running, N, f"{where}: running")
        if (confidences is None) != (self.conf is None):
            raise UsageError(
                "confidences: give them at every checkpoint and for the warmup, or never"
            )
        confs = (
            None if confidences is None else _numbers(confidences, (N,), f"{where}: confidences")
        )
        if self.early and k:  # each trace against its own checkpoint before
            was = self._told(k - 1)[0, :hi] | (self._local(k)[:hi] == 0)
            again = np.flatnonzero(run & ~was)
            if again.size:
                raise UsageError(
                    f"{where}: running: trace {int(again[0])} had ended at checkpoint {k - 1} "
                    "and cannot run again"
                )
        elif k:
            again = np.flatnonzero(run & ~self.running[lo:hi, k - 1])
            if again.size:
                raise UsageError(
                    f"{where}: running: trace {int(again[0])} had ended at checkpoint {k - 1} "
                    "and cannot run again"
                )
        # every input is good: from here on nothing is refused
        return self._advance(self.groups.add(answers), run, confs)

    def _advance(
        self, ids: Sequence[int] | np.ndarray, run: np.ndarray, confs: np.ndarray | None
    ) -> Decision:
        """Checkpoint ``self.k`` with the N traces' answer ids, running flags and confidences
        (checked): one step of the walk."""
        if self.early:
            return self._advance_early(np.asarray(ids), run, confs)
        k, W = self.k, self.W
        lo, hi = self.plan[self.launch_i]
        self.ids[W + lo : W + hi, k] = ids
        self.running[lo:hi, k] = run
        if self.conf is not None:
            self.conf[W + lo : W + hi, k] = confs
        if not self.staged:  # a staged method's rule reads no q (mars.method.launch.Waves)
            X = self.features.next(int(self.grid[k]), self.ids[W:, k], confs)
            if self.model is not None:
                self.q[W:, k] = self._predict(X)
        self.k = k + 1
        if len(self.groups) > self.width:  # rebuilt and replayed over checkpoints 0..k
            self._widen()
        else:
            self.walk.step(k, self._told(k))
        walk = self.walk
        p = int(self.grid[k])
        pruned = walk.stopped_traces(k)[0]
        if not walk.active[0]:
            a = int(walk.answer[0])
            self.done = Decision(
                True,
                self.groups.members[a][0] if a >= 0 else None,
                str(walk.label[0]),
                p,
                np.flatnonzero((self.running[:, k] | pruned)[lo:hi]),
            )
            return self.done
        return Decision(False, None, "", p, np.flatnonzero((pruned & self.running[:, k])[lo:hi]))

    def _advance_early(
        self, ids: np.ndarray, run: np.ndarray, confs: np.ndarray | None
    ) -> Decision:
        """Checkpoint ``self.k`` of the clock of overlapping launches, for the traces launched
        so far (a prefix of the N): each trace's answer goes to its own checkpoint, a trace past
        its grid or ended gives its final answer; one step of the walk, which may launch the
        rest (:attr:`current` then covers them)."""
        k, W, m = self.k, self.W, len(self.grid)
        hi = len(ids)
        loc = self._local(k)[:hi]
        inside = np.flatnonzero((loc >= 0) & (loc < m))
        self.ids[W + inside, loc[inside]] = ids[inside]
        self.running[inside, loc[inside]] = run[inside]
        if self.conf is not None and confs is not None:
            self.conf[W + inside, loc[inside]] = confs[inside]
        ended = np.flatnonzero(~run)
        self.final_ids[W + ended] = ids[ended]
        self.k = k + 1
        if len(self.groups) > self.width:  # rebuilt and replayed over checkpoints 0..k
            self._widen()
        else:
            self.walk.step(k, self._told(k))
        walk = self.walk
        p = walk.position(k, 0)
        if not walk.active[0]:
            a = int(walk.answer[0])
            self.done = Decision(
                True,
                self.groups.members[a][0] if a >= 0 else None,
                str(walk.label[0]),
                p,
                np.flatnonzero(run),
            )
            return self.done
        if self.launched_at < 0 and walk.second_at[0] >= 0:
            self.launched_at = int(walk.second_at[0])
        return Decision(False, None, "", p, np.zeros(0, dtype=np.int64))

    def land(
        self,
        finals: Sequence[str | None],
        confidences: Sequence[float] | np.ndarray | None = None,
    ) -> Decision:
        """A staged method's current launch has ended, every trace of it with final answer
        ``finals`` (its traces in order; ``confidences`` their final ones, where the stopper has
        them). The rule decides once more, at the checkpoint where the last of them ended; if it
        does not stop, :attr:`current` is the next launch to start (None: none left, then
        :meth:`finish`)."""
        if not self.staged:
            raise UsageError(f"method {self.method.name} starts its traces together: no launch")
        if self.early:
            raise UsageError(
                f"method {self.method.name}: its launches overlap; step() every launched trace"
            )
        cur = self.current
        if cur is None:
            raise UsageError("no launch is running")
        lo, hi = cur
        finals = _answers(finals, hi - lo, "finals")
        confs = None
        if self.conf is not None:
            if confidences is None:
                raise UsageError("confidences: give them at every checkpoint and at the end")
            confs = _numbers(confidences, (hi - lo,), "final confidences")
        # every input is good: from here on nothing is refused
        ids = self.groups.add(finals)
        self.final_ids[self.W + lo : self.W + hi] = ids
        if self.k < len(self.grid):
            d = self._advance(ids, np.zeros(hi - lo, dtype=bool), confs)
            if d.stop:
                return d
        self.walk.land()
        self.steps.append(self.k)
        self.launch_i += 1
        self.k = 0
        self._open(self.walk, self.launch_i)
        return Decision(False, None, "", int(self.grid[-1]), np.zeros(0, dtype=np.int64))

    def _widen(self) -> None:
        """Arrays wide enough for the answers known so far, the walk replayed over them."""
        room = 1 if self.walk.rule.counts_answers else 2  # a rule that counts answer ids
        self._build(room * len(self.groups))  # must see exactly those known so far

    @property
    def gamma(self) -> float:
        """The γ the method's rule decides with (calibrated on the warmup where it says so)."""
        return float(self.walk.gamma)

    def finish(
        self,
        finals: Sequence[str | None] | None = None,
        confidences: Sequence[float] | np.ndarray | None = None,
    ) -> Decision:
        """The decision once the loop has no more checkpoints to show: every trace has ended,
        with final answer ``finals`` (None: none; default: each trace's answer at the last
        checkpoint seen) and final confidence ``confidences`` (the mean over all its tokens; where
        the stopper has confidences, default: each trace's at the last checkpoint seen).

        The checkpoints of the grid the loop did not reach are walked with every trace ended
        there (the rule may still stop: ``stop`` True, at one of them); otherwise the answer is
        the full-budget vote of the final answers (label ``budget``, ``stop`` False). After a stop
        it is that stop's decision."""
        if self.done is not None:
            return self.done
        if self.early:
            if self.current is not None:
                raise UsageError("a launch is still running: step() it to its end first")
            return self._decided(self.walk.finish())
        if self.staged:
            if self.current is not None:
                raise UsageError("a launch is still running: land() it first")
            return self._decided(self.walk.finish())
        k, N, W = self.k, self.N, self.W
        if finals is None:
            if k == 0:
                raise UsageError("finals: no checkpoint was seen; give the final answers")
            finals = [self.groups.members[a][0] if a >= 0 else None for a in self.ids[W:, k - 1]]
        finals = _answers(finals, N, "finals")
        confs = None
        if self.conf is not None:
            if confidences is None:
                if k == 0:
                    raise UsageError("confidences: no checkpoint was seen; give them")
                confs = self.conf[W:, k - 1].copy()
            else:
                confs = _numbers(confidences, (N,), "final confidences")
        elif confidences is not None:
            raise UsageError(
                "confidences: give them at every checkpoint and for the warmup, or never"
            )
        # every input is good: from here on nothing is refused
        ids = self.groups.add(finals)
        ended = np.zeros(N, dtype=bool)
        for _ in range(k, len(self.grid)):
            d = self._advance(ids, ended, confs)
            if d.stop:
                return d
        self.final_ids[W:] = ids
        if len(self.groups) > self.width:
            self._widen()
        return self._decided(self.walk.finish())

    def _decided(self, result) -> Decision:
        """The full-budget vote of a walk run to its end."""
        a = int(result.answer[0])
        self.done = Decision(
            False,
            self.groups.members[a][0] if a >= 0 else None,
            str(result.stopped_by[0]),
            int(result.position[0]),
            np.zeros(0, dtype=np.int64),
        )
        return self.done
