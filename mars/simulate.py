"""The bootstrap stopping simulation (reference-protocol §4), vectorised over iterations × traces.

Per question: draw ``iterations`` bootstrap samples of ``budget`` traces (with replacement, from
the traces that have a final answer, ``default_rng(seed + 10000·qid + i)``), fit the switch model
on the first ``warmup`` pool traces, then walk the checkpoint grid once per method, stopping each
iteration when its rule fires. Several methods share loading, arrays, samples and the q-model.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import cached_property

import numpy as np

from . import deepconf
from .arrays import QuestionArrays, load_arrays
from .calibration import calibrate_gamma
from .features import question_features, switch_labels
from .methods import Method
from .pool import PoolError, open_pool
from .qmodel import SwitchModel
from .schema import CHECKPOINT_SPACING
from .stopping import Consensus, Mars, Never, ParallelProbe, Snapshot
from .voting import leader, tally

MAX_BUDGET = 1 << 16
MAX_DRAWS = 1 << 26  # iterations × budget


class SimulationError(ValueError):
    """Bad simulation settings or a method that does not apply to the pool."""


@dataclass(frozen=True)
class Settings:
    budget: int = 512
    iterations: int = 64
    warmup: int = 16
    seed: int = 42
    window: int = 2048
    gamma: float = 1.0
    ucb_z: float = 1.0
    gamma_min: float = 0.5
    pp_conv: int = 3
    pp_warmup: int = 4
    pp_patience: int = 2
    delta: float = 0.05
    consensus: float = 0.9
    spacing: int = CHECKPOINT_SPACING

    def validate(self) -> Settings:
        if not 1 <= self.budget <= MAX_BUDGET:
            raise SimulationError(f"--budget {self.budget}: must be between 1 and {MAX_BUDGET}")
        if not 1 <= self.iterations <= 1_000_000:
            raise SimulationError(f"--iterations {self.iterations}: must be at least 1")
        if self.budget * self.iterations > MAX_DRAWS:
            raise SimulationError(
                f"--budget × --iterations = {self.budget * self.iterations}: more than {MAX_DRAWS} draws"
            )
        if self.warmup < 0:
            raise SimulationError(f"--warmup {self.warmup}: must be ≥ 0")
        if self.window < 1 or self.spacing < 1:
            raise SimulationError("--window and the checkpoint spacing must be positive")
        if not 0 < self.delta < 1:
            raise SimulationError(f"--delta {self.delta}: must be in (0, 1)")
        if not 0 <= self.gamma_min <= 1 or self.gamma < 0 or self.ucb_z < 0:
            raise SimulationError("--gamma, --ucb-z must be ≥ 0 and --gamma-min in [0, 1]")
        if not 0 < self.consensus <= 1:
            raise SimulationError(f"--consensus {self.consensus}: must be in (0, 1]")
        if self.pp_conv < 1 or self.pp_warmup < 0 or self.pp_patience < 0:
            raise SimulationError("--pp-conv must be ≥ 1, --pp-warmup and --pp-patience ≥ 0")
        return self


@dataclass
class MethodResult:
    """One method on one question: arrays over iterations."""

    answer: np.ndarray  # group id, -1 none
    correct: np.ndarray
    tokens: np.ndarray
    baseline: np.ndarray
    position: np.ndarray
    stopped_by: np.ndarray  # str labels
    probe_tokens: np.ndarray  # float (NaN: unknown)
    gamma: float = float("nan")
    pruned_at: np.ndarray | None = (
        None  # [I, B] Parallel-Probe (faithful): position a trace was pruned at
    )


@dataclass
class QuestionResult:
    qid: int
    ground_truth: str
    representatives: list
    content_hash: str
    methods: dict = field(default_factory=dict)


def bootstrap_samples(arr: QuestionArrays, s: Settings) -> np.ndarray:
    """Sampled trace indices [iterations, budget] (reference-protocol §4.2)."""
    pool = arr.pool_ids()
    out = np.empty((s.iterations, s.budget), dtype=np.int64)
    for i in range(s.iterations):
        rng = np.random.default_rng(s.seed + 10000 * arr.qid + i)
        out[i] = pool[rng.choice(len(pool), size=s.budget, replace=True)]
    return out


class QuestionContext:
    """What every method of one question shares: samples, warmup, q-models, DeepConf state.

    ``samples`` and ``warm`` default to the bootstrap protocol; a live run's replay passes its own
    (one iteration: the traces it ran; the warmup traces it ran first). ``memo`` (a dict kept by
    the caller) reuses fitted q-models and calibrated γ across contexts whose warmup inputs are
    byte-identical, as at every checkpoint of a live run.
    """

    def __init__(
        self,
        arr: QuestionArrays,
        settings: Settings,
        samples: np.ndarray | None = None,
        warm: np.ndarray | None = None,
        memo: dict | None = None,
    ):
        self.arr = arr
        self.s = settings
        self.memo = memo
        self.samples = (
            bootstrap_samples(arr, settings)
            if samples is None
            else np.asarray(samples, dtype=np.int64)
        )
        self.warm = (
            arr.pool_ids()[: settings.warmup] if warm is None else np.asarray(warm, dtype=np.int64)
        )
        if len(self.warm):
            self.warm_ref = int(np.argmax(np.bincount(arr.final_ids[self.warm])))
        else:
            self.warm_ref = -1

    @cached_property
    def q_learned(self) -> np.ndarray:
        """Learned switch probabilities [n, m]; shared by reorderings of the same arrays (ids only break ties)."""
        arr = self.arr
        key = ("q_learned", self.warm.tobytes())
        if key in arr.derived:
            return arr.derived[key]
        arr.derived[key] = q = self._fit_q()
        return q

    def _fit_q(self) -> np.ndarray:
        arr = self.arr
        X = question_features(arr)
        n, m, f = X.shape
        if len(self.warm) == 0:
            return np.ones((n, m), dtype=np.float32)
        Xw, yw = X[self.warm].reshape(-1, f), switch_labels(arr, self.warm).reshape(-1)
        key = ("q", _digest(Xw, yw))
        model = self.memo.get(key) if self.memo is not None else None
        if model is None:
            model = SwitchModel().fit(Xw, yw)
            if self.memo is not None:
                self.memo[key] = model
        self.q_model = model
        return model.predict_proba(X.reshape(-1, f))[:, 1].astype(np.float32).reshape(n, m)

    @cached_property
    def q_oracle(self) -> np.ndarray:
        return switch_labels(self.arr)

    @cached_property
    def dco(self):
        """(τ per iteration float32 [I], truncation [I, B], running-min checkpoint confidence [n, m])."""
        taus, trunc = deepconf.iteration_state(self.arr, self.samples, self.s.warmup)
        return np.array(taus, dtype=np.float32), trunc, deepconf.running_min_conf(self.arr)

    def gamma_for(self, method: Method):
        s = self.s
        if method.certified:
            return 1.0
        if not method.calibrate:
            return s.gamma
        arr, warm = self.arr, self.warm
        ids = arr.ids[warm]
        eligible = ids >= 0
        if method.deepconf:
            tau_w = deepconf.threshold(arr, warm)
            eligible &= deepconf.running_min_conf(arr)[warm] >= tau_w
            weights = arr.conf_at_pos[warm]
        else:
            weights = np.ones(ids.shape)
        args = (ids, arr.final_ids[warm], weights, eligible, self.q_oracle[warm])
        key = ("gamma", method.deepconf, arr.n_answers, s.ucb_z, s.gamma_min, _digest(*args))
        if self.memo is not None and key in self.memo:
            return self.memo[key]
        gamma = calibrate_gamma(*args, arr.n_answers, ucb_z=s.ucb_z, gamma_min=s.gamma_min)
        if self.memo is not None:
            self.memo[key] = gamma
        return gamma


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _rule_for(method: Method, ctx: QuestionContext, gamma):
    s = ctx.s
    if method.stopping == "mars":
        return Mars(
            gamma=gamma,
            guard_answer=ctx.warm_ref,
            certified=method.certified,
            delta=s.delta,
            label="certified" if method.certified else "margin",
        )
    if method.stopping == "pp":
        return ParallelProbe(
            conv=s.pp_conv, warmup=s.pp_warmup, patience=s.pp_patience, faithful=method.faithful
        )
    if method.stopping == "consensus":
        return Consensus(share=s.consensus)
    return Never()


def run_method(ctx: QuestionContext, method: Method) -> MethodResult:
    arr, S = ctx.arr, ctx.samples
    I, B = S.shape
    grid = arr.grid
    m = len(grid)
    if method.needs_confs and not arr.has_confs:
        raise SimulationError(
            f"method {method.name} needs per-token confidences; question {arr.qid} has none"
        )
    lens = arr.lengths[S]
    run_lens = arr.run_lengths[S]
    if method.deepconf:
        taus, trunc, runmin = ctx.dco
    else:
        taus, trunc, runmin = None, lens, None
    truncated = trunc < lens
    cap = np.minimum(lens, trunc)
    baseline = cap.sum(axis=1)
    gamma = ctx.gamma_for(method)
    rule = _rule_for(method, ctx, gamma)
    rule.reset(I, B)
    q_matrix = None
    if getattr(rule, "needs_q", False):
        q_matrix = ctx.q_oracle if method.q == "oracle" else ctx.q_learned

    def snapshot(k: int, rows: np.ndarray) -> Snapshot:
        Sk = S[rows]
        ids = arr.ids[Sk, k]
        kept = np.ones(ids.shape, dtype=bool)
        if method.deepconf:
            kept &= runmin[Sk, k] >= taus[rows, None]
            kept &= ~(truncated[rows] & (grid[k] >= trunc[rows]))
        e = kept & (ids >= 0)
        running = run_lens[rows] > grid[k]
        w = arr.conf_at_pos[Sk, k] if method.conf_weights else np.ones(ids.shape)
        votes = tally(ids, w, e, arr.n_answers)
        lead, has = leader(votes)
        return Snapshot(
            k=k,
            position=int(grid[k]),
            rows=rows,
            ids=ids,
            eligible=e,
            weights=w,
            votes=votes,
            lead=lead,
            has_votes=has,
            running=running,
            n_answers=arr.n_answers,
            q=None if q_matrix is None else q_matrix[Sk, k],
            pending=kept & running & (ids < 0),
        )

    answer = np.full(I, -1, dtype=np.int64)
    stop_k = np.full(I, m, dtype=np.int64)  # m = ran to the full budget
    label = np.full(I, "budget", dtype=object)

    # full-budget vote over final answers (the answer of iterations that never stop)
    e_f = arr.final_ids[S] >= 0
    if method.deepconf:
        e_f &= runmin[S, m - 1] >= taus[:, None]
        e_f &= ~(truncated & (trunc <= grid[-1]))
    w_f = arr.conf_at_pos[S, m - 1] if method.conf_weights else np.ones(S.shape)

    if method.stopping in ("oracle-first", "oracle-last"):
        final_answer, _ = leader(tally(arr.final_ids[S], w_f, e_f, arr.n_answers))
        rows = np.arange(I)
        agree = np.stack([snapshot(k, rows).lead == final_answer for k in range(m)], axis=1)
        if method.stopping == "oracle-first":
            stop_k = np.where(agree.any(axis=1), np.argmax(agree, axis=1), m)
        else:
            last_dis = np.where(
                (~agree).any(axis=1), m - 1 - np.argmax(~agree[:, ::-1], axis=1), -1
            )
            stop_k = last_dis + 1
        answer = final_answer.astype(np.int64)
        label = np.where(stop_k < m, "oracle", "budget").astype(object)
    else:
        active = np.ones(I, dtype=bool)
        for k in range(m):
            rows = np.flatnonzero(active)
            if len(rows) == 0:
                break
            snap = snapshot(k, rows)
            stop = rule.check(snap)
            hit = rows[stop]
            if len(hit):
                answer[hit] = rule.winner[hit] if method.faithful else snap.lead[stop]
                stop_k[hit] = k
                label[hit] = rule.label
                active[hit] = False
        rest = np.flatnonzero(active)
        if len(rest):
            e_rest = e_f[rest]
            if method.faithful:
                e_rest &= ~rule.pruned[rest]
            final_answer, _ = leader(
                tally(arr.final_ids[S[rest]], w_f[rest], e_rest, arr.n_answers)
            )
            answer[rest] = final_answer

    # tokens: every sampled trace is charged up to the stop position (and its truncation / pruning)
    charged = cap
    if method.faithful:
        charged = np.minimum(cap, rule.pruned_at)
    stop_pos = np.where(stop_k < m, grid[np.minimum(stop_k, m - 1)], np.iinfo(np.int64).max)
    tokens = np.minimum(charged, stop_pos[:, None]).sum(axis=1)
    position = grid[np.minimum(stop_k, m - 1)]

    probe_tokens = np.zeros(I, dtype=np.float64)
    if method.stopping != "never":
        if arr.probe_tokens is None:
            probe_tokens[:] = np.nan
        else:
            # probed while running, up to the decision; a pruned trace was probed where it was pruned
            probed_until = (
                np.minimum(run_lens, np.minimum(rule.pruned_at, run_lens) + 1)
                if method.faithful
                else run_lens
            )
            probed = (grid[None, None, :] < probed_until[:, :, None]) & (
                np.arange(m)[None, None, :] <= stop_k[:, None, None]
            )
            cost = arr.probe_tokens[S]
            unknown = (probed & (cost < 0)).any(axis=(1, 2))
            probe_tokens = (
                np.where(probed, np.maximum(cost, 0), 0).sum(axis=(1, 2)).astype(np.float64)
            )
            probe_tokens[unknown] = np.nan

    correct = np.where(
        answer >= 0, arr.correct[np.maximum(answer, 0)] if arr.n_answers else False, False
    )
    return MethodResult(
        answer=answer,
        correct=correct.astype(bool),
        tokens=tokens.astype(np.int64),
        baseline=baseline.astype(np.int64),
        position=position.astype(np.int64),
        stopped_by=label,
        probe_tokens=probe_tokens,
        gamma=float(gamma),
        pruned_at=rule.pruned_at if method.faithful else None,
    )


def simulate_question(
    arr: QuestionArrays, methods: list[Method], settings: Settings
) -> QuestionResult:
    res = QuestionResult(
        qid=arr.qid,
        ground_truth=arr.ground_truth,
        representatives=arr.representatives,
        content_hash=arr.content_hash,
    )
    if len(arr.pool_ids()) == 0:
        raise SimulationError(f"question {arr.qid}: no trace has a final answer; nothing to sample")
    ctx = QuestionContext(arr, settings)
    for method in methods:
        res.methods[method.name] = run_method(ctx, method)
    return res


def _check_confs(methods: list[Method], arr: QuestionArrays, source: str) -> None:
    for method in methods:
        if method.needs_confs and not arr.has_confs:
            raise SimulationError(
                f"{source}: method {method.name} needs per-token confidences, "
                f"but question {arr.qid} has none"
            )


def _worker(args) -> QuestionResult:
    pool_path, qid, methods, settings, cache_dir = args
    pool = _worker_pool(pool_path)
    q = pool.read_question(qid)
    arr = load_arrays(q, cache_dir, spacing=settings.spacing, window=settings.window)
    _check_confs(methods, arr, pool.source)
    return simulate_question(arr, methods, settings)


_POOLS: dict = {}


def _worker_pool(path):
    if path not in _POOLS:
        _POOLS[path] = open_pool(path)
    return _POOLS[path]


def simulate_pool(
    pool_path,
    methods: list[Method],
    settings: Settings,
    questions: list[int] | None = None,
    workers: int = 1,
    cache_dir=None,
    progress=None,
) -> list[QuestionResult]:
    """Simulate every requested question of a pool; results are sorted by qid and independent of ``workers``."""
    settings.validate()
    pool = _worker_pool(str(pool_path))
    qids = pool.qids if questions is None else questions
    missing = [q for q in qids if q not in set(pool.qids)]
    if missing:
        raise PoolError(
            f"{pool.source}: no question {missing[0]} (questions: {', '.join(map(str, pool.qids))})"
        )
    jobs = [
        (str(pool_path), q, methods, settings, None if cache_dir is None else str(cache_dir))
        for q in qids
    ]
    results = []
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            results.append(_worker(job))
            if progress:
                progress()
    else:
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs), os.cpu_count() or 1)) as ex:
            for r in ex.map(_worker, jobs):
                results.append(r)
                if progress:
                    progress()
    return sorted(results, key=lambda r: r.qid)


def settings_dict(s: Settings) -> dict:
    return asdict(s)
