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

The decision is the simulator's own: the state holds the question's arrays (warmup traces, then
the N traces, one column per checkpoint, answers grouped online in arrival order) and each
:meth:`Stopper.step` is one :meth:`mars.simulate.MethodRun.step` over the one iteration whose
sample is the N traces; the walk is never re-run over past checkpoints, except when new answers
outgrow the room left for them (rarely: the room doubles; but at every new answer for a rule whose
decision depends on how many answers exist, :attr:`mars.method.stopping.Rule.counts_answers`).
Re-simulating the traces afterwards (:func:`mars.live.decide`, what `mars replay` does) gives the
same decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import UsageError
from .method.answers import OnlineGroups
from .method.arrays import QuestionArrays
from .method.features import question_features
from .method.qmodel import SwitchModel, fit_question
from .method.registry import Method, live_method
from .method.settings import Settings
from .simulate import MethodRun, QuestionContext


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


class _Walk(MethodRun):
    """The simulator's walk over the stopper's one row, whose running traces it is told."""

    running_seen: np.ndarray  # bool [N, m]

    def _running(self, k: int, rows: np.ndarray) -> np.ndarray:
        return np.broadcast_to(self.running_seen[:, k], (len(rows), self.samples.shape[1]))


class Stopper:
    """``method`` on one question of ``n_traces`` parallel traces over the checkpoint ``grid``
    (positions in tokens), after ``warmup`` (see the module docstring).

    ``settings``: a :class:`mars.method.settings.Settings` or its stopping knobs as keywords (γ, δ,
    ``pp_conv``, …); the budget is ``n_traces``, one iteration. Methods that read the future or
    use DeepConf's filter cannot decide online and are refused.
    """

    def __init__(
        self,
        method: str | Method,
        n_traces: int,
        grid: Sequence[int] | np.ndarray,
        warmup: Warmup | None = None,
        settings: Settings | None = None,
        memo: dict | None = None,
        **knobs,
    ):
        self.method = live_method(method)
        grid = np.asarray(grid, dtype=np.int64)
        if grid.ndim != 1 or len(grid) == 0 or (np.diff(grid) <= 0).any() or grid[0] <= 0:
            raise UsageError("grid: checkpoint positions must be positive and increasing")
        warmup = warmup or Warmup([], [], [])
        W, N, m = len(warmup.finals), int(n_traces), len(grid)
        if N < 1:
            raise UsageError(f"n_traces {n_traces}: must be at least 1")
        if len(warmup.answers) != W or any(len(a) != m for a in warmup.answers):
            raise UsageError(f"warmup: answers must be {W} traces × {m} checkpoints")
        if len(warmup.lengths) != W:
            raise UsageError(f"warmup: {len(warmup.lengths)} lengths for {W} traces")
        self.lengths = np.zeros(W + N, dtype=np.int64)  # the N traces': unused by the decision
        self.lengths[:W] = np.asarray(warmup.lengths, dtype=np.int64)
        if settings is None:
            settings = Settings(budget=N, iterations=1, warmup=W, **knobs).validate()
        self.settings, self.grid, self.W, self.N = settings, grid, W, N
        self.memo = {} if memo is None else memo
        self.groups = OnlineGroups()
        arrival = [a for k in range(m) for a in (row[k] for row in warmup.answers)]
        self.groups.add(arrival)
        self.groups.add(warmup.finals)
        n = W + N
        self.ids = np.full((n, m), -1, dtype=np.int32)
        for j, row in enumerate(warmup.answers):
            self.ids[j] = self.groups.add(row)
        self.final_ids = np.full(n, -1, dtype=np.int32)
        self.final_ids[:W] = self.groups.add(warmup.finals)
        self.conf: np.ndarray | None = None
        if warmup.confidences is not None:
            self.conf = np.zeros((n, m), dtype=np.float32)
            self.conf[:W] = np.asarray(warmup.confidences, dtype=np.float32)
        self.running = np.zeros((N, m), dtype=bool)
        self.q = np.ones((n, m), dtype=np.float32)
        self.flips = np.zeros(N, dtype=np.int64)
        self.streak = np.zeros(N, dtype=np.int64)
        self.k = 0  # checkpoints seen
        self.done: Decision | None = None
        self.warm = np.flatnonzero(self.final_ids[:W] >= 0)
        self.model: SwitchModel | None = None
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
        if self.model is None and len(self.warm):
            self.model = fit_question(arr, self.warm, self.memo).model
            if self.model is not None:
                X = question_features(arr, self.warm)
                self.q[: self.W][self.warm] = self._predict(X).reshape(len(self.warm), -1)
        main = np.arange(self.W, self.W + self.N)
        ctx = QuestionContext(
            arr, self.settings, samples=main[None, :], warm=self.warm, memo=self.memo
        )
        ctx._shared["q_learned"] = self.q  # filled column by column
        walk = _Walk(ctx, self.method)
        walk.running_seen = self.running
        walk.start()
        for k in range(self.k):
            walk.step(k)
        self.walk = walk

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
            raise UsageError("the method has already stopped this question")
        k, N = self.k, self.N
        if k >= len(self.grid):
            raise UsageError(f"all {len(self.grid)} checkpoints of the grid have been seen")
        for name, given in (
            ("answers", answers),
            ("running", running),
            ("confidences", confidences),
        ):
            if given is not None and len(given) != N:
                raise UsageError(f"checkpoint {k}: {len(given)} {name} for {N} traces")
        wrong = next((a for a in answers if a is not None and not isinstance(a, str)), None)
        if wrong is not None:
            raise UsageError(f"checkpoint {k}: answer {wrong!r} is not a string or None")
        if (confidences is None) != (self.conf is None):
            raise UsageError(
                "confidences: give them at every checkpoint and for the warmup, or never"
            )
        W = self.W
        self.ids[W:, k] = self.groups.add(answers)
        self.running[:, k] = np.asarray(running, dtype=bool)
        if self.conf is not None:
            self.conf[W:, k] = np.asarray(confidences, dtype=np.float32)
        if self.model is not None:
            X = self._column(k)
            self.q[W:, k] = self._predict(X)
        self.k = k + 1
        if len(self.groups) > self.width:  # rebuilt and replayed over checkpoints 0..k
            room = 1 if self.walk.rule.counts_answers else 2  # a rule that counts answer ids
            self._build(room * len(self.groups))  # must see exactly those known so far
        else:
            self.walk.step(k)
        walk = self.walk
        p = int(self.grid[k])
        stopped = not walk.active[0]
        until = walk.rule.charged_until()
        pruned = np.zeros(N, dtype=bool) if until is None else until[0] == p
        if stopped:
            a = int(walk.answer[0])
            self.done = Decision(
                True,
                self.groups.members[a][0] if a >= 0 else None,
                str(walk.label[0]),
                p,
                np.flatnonzero(self.running[:, k] | pruned),
            )
            return self.done
        return Decision(False, None, "", p, np.flatnonzero(pruned & self.running[:, k]))

    def _column(self, k: int) -> np.ndarray:
        """Switch-model features of the N traces at checkpoint ``k`` [N, 5]."""
        ids = self.ids[self.W :]
        if k:
            changed = ids[:, k] != ids[:, k - 1]
            self.flips = self.flips + changed
            self.streak = np.where(changed, 1, self.streak + 1)
        else:
            self.streak = np.ones(self.N, dtype=np.int64)
        conf = (
            self.conf[self.W :]
            if self.conf is not None
            else np.zeros((self.N, len(self.grid)), np.float32)
        )
        X = np.empty((self.N, 5), dtype=np.float64)
        X[:, 0] = self.grid[k]
        X[:, 1] = conf[:, k]
        X[:, 2] = self.flips
        X[:, 3] = self.streak
        X[:, 4] = conf[:, k].astype(np.float64) - conf[:, k - 1].astype(np.float64) if k else 0.0
        return X
