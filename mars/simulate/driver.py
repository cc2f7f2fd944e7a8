"""`mars simulate`: the stopping simulation of a pool (reference-protocol §4), question by question.

Per question: the protocol's samples and warmup (:func:`mars.method.protocol.samples`), the switch
model fitted on the warmup (from the fit stage, or fitted here), then every method's walk over
the checkpoint grid (:mod:`mars.method.walk`); several methods share loading, arrays, samples and
the q-model. Questions run in worker processes, results sorted by question whatever the workers.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SimulationError
from ..method import protocol
from ..method.arrays import QuestionArrays, load_arrays
from ..method.learned import Calibration
from ..method.qmodel import QuestionFit
from ..method.qmodel import preload as preload_fit
from ..method.registry import Method, check_calibrated
from ..method.settings import Settings, pool_settings
from ..method.walk import MethodResult, QuestionContext, run_method
from ..progress import Progress, counter
from ..store.pool import Pool, PoolError, open_pool
from ..workers import map_largest_first, process_pool

__all__ = [
    "MethodResult",
    "QuestionResult",
    "Settings",
    "SimulationError",
    "simulate_pool",
    "simulate_question",
    "size_notes",
]


@dataclass
class QuestionResult:
    qid: int
    ground_truth: str
    representatives: list
    content_hash: str
    methods: dict = field(default_factory=dict)
    answer_fallbacks: int = 0  # answers grouped by string identity (symbolic budget spent)


def simulate_question(
    arr: QuestionArrays,
    methods: list[Method],
    settings: Settings,
    fitted: QuestionFit | None = None,
    calibration: Calibration | None = None,
) -> QuestionResult:
    res = QuestionResult(
        qid=arr.qid,
        ground_truth=arr.ground_truth,
        representatives=arr.representatives,
        content_hash=arr.content_hash,
        answer_fallbacks=arr.answer_fallbacks,
    )
    if len(arr.pool_ids()) == 0:
        hint = (
            " (a model that does not put its answer in \\boxed{}? --finals last-probe takes "
            "each trace's last probe's answer)"
            if settings.finals == "trace"
            else ""
        )
        raise SimulationError(
            f"question {arr.qid}: no trace has a final answer; nothing to sample{hint}"
        )
    if calibration is not None:
        for method in methods:
            check_calibrated(method, calibration)
    ctx = QuestionContext.sample(arr, settings, fitted=fitted, calibration=calibration)
    for method in methods:
        res.methods[method.name] = run_method(ctx, method)
    return res


def size_notes(
    pool: Pool, methods: list[Method], settings: Settings, qids: list[int] | None
) -> list[str]:
    """Refuse sizes that cannot mean anything on this pool's questions; notes on legal sizes
    that surprise (:func:`mars.method.protocol.check_sizes`). Reads file metadata only."""
    counts = pool.trace_counts(pool.qids if qids is None else qids)
    return protocol.check_sizes(settings, counts, methods, pool.source)


def _check_confs(methods: list[Method], arr: QuestionArrays, source: str) -> None:
    for method in methods:
        if method.needs_confs and not arr.has_confs:
            raise SimulationError(
                f"{source}: method {method.name} needs per-token confidences, "
                f"but question {arr.qid} has none"
            )


def supported_methods(spec: str, pool: Pool, qids: list[int] | None):
    """The methods of ``spec`` this pool can run and those a group (``all``) left out: a pool
    without per-token confidences (its first question asked for tells) runs no DeepConf method.
    """
    from ..method.registry import parse_methods, select_methods

    if not any(m.needs_confs for m in parse_methods(spec)):
        return select_methods(spec, has_confs=True)
    return select_methods(spec, has_confs=pool.has_confs((qids or pool.qids)[0]))


_POOLS: dict[str, Pool] = {}
_FITS: dict[str, Any] = {}


def _worker_pool(path: str) -> Pool:
    if path not in _POOLS:
        _POOLS[path] = open_pool(path)
    return _POOLS[path]


def _worker_fit(path: str):
    """The fit directory at ``path``, read once per process while its files stay the same (a
    directory fitted again is read again)."""
    from ..fit.fitdir import FitDir
    from ..store import schema

    stamp: list[tuple[int, int, int] | None] = []
    for name in (schema.FIT_MANIFEST, schema.FIT_MODELS):
        try:
            st = os.stat(Path(path) / name)
            stamp.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            stamp.append(None)  # FitDir says what is missing
    cached = _FITS.get(path)
    if cached is None or cached[0] != stamp:
        _FITS[path] = cached = (stamp, FitDir(path))
    return cached[1]


def _worker(args) -> QuestionResult:
    pool_path, qid, methods, settings, cache_dir, fit_dir, calibration, answer = args
    pool = _worker_pool(pool_path)
    q = pool.read_question(qid).with_finals(settings.finals)
    if answer is not None:  # the harness's target, attached afterwards
        q = dataclasses.replace(q, ground_truth=answer)
    fitted = None
    if settings.protocol == protocol.PARALLEL_PROBE:
        arr = protocol.question_arrays(q, settings.spacing)
    elif fit_dir is not None:
        fit = _worker_fit(fit_dir)
        arr = fit.arrays(q, settings)
        fitted = fit.question(q, arr, settings.warmup)
    else:
        arr = load_arrays(q, cache_dir, spacing=settings.spacing, window=settings.window)
    _check_confs(methods, arr, pool.source)
    del q  # the per-token confidences: not needed by the methods
    return simulate_question(arr, methods, settings, fitted, calibration)


def check_calibration(
    calibration: Calibration, pool: Pool, settings: Settings, methods: list[Method]
) -> None:
    """A calibration replaces the warmup (``--warmup 0``), serves MARS2 under self-consistency,
    and a pool of the model and grid it was fitted on (one line otherwise)."""
    for method in methods:
        check_calibrated(method, calibration)
    if settings.warmup:
        raise SimulationError(
            f"--calibration replaces the per-question warmup: give --warmup 0 (not "
            f"{settings.warmup})"
        )
    manifest = {**dict(getattr(pool, "manifest", None) or {}), "spacing": settings.spacing}
    calibration.check_for(manifest, pool.source, settings.protocol)


def check_protocol_inputs(settings: Settings, fit_dir=None, cache_dir=None) -> None:
    """Arrays and switch models of the fit stage or the cache are the bootstrap protocol's; another
    protocol builds its own (:mod:`mars.method.protocol`)."""
    if settings.protocol != protocol.BOOTSTRAP and (fit_dir is not None or cache_dir is not None):
        raise SimulationError(
            f"--protocol {settings.protocol} reads the traces its own way (exact answers, step "
            "costs): it takes neither --fit nor --cache, whose arrays are the bootstrap protocol's"
        )


def simulate_pool(
    pool_path,
    methods: list[Method],
    settings: Settings,
    questions: list[int] | None = None,
    workers: int = 1,
    cache_dir=None,
    progress: Progress | None = None,
    fit_dir: str | Path | None = None,
    calibration: Calibration | None = None,
    answers: dict[int, str] | None = None,
) -> list[QuestionResult]:
    """Simulate every requested question of a pool; results sorted by qid, whatever ``workers``.

    ``calibration`` (from ``mars calibrate``): MARS2's rules read it instead of a warmup
    (:mod:`mars.method.learned`); it is checked against the pool (its model, its grid) and needs
    ``warmup`` 0. ``answers``: a ground truth per question, instead of the pool's
    (:mod:`mars.simulate.answers`). A pool none of whose questions has a known answer (served
    traffic) is simulated, its accuracy unknown; one where only some have is refused.

    ``fit_dir`` (from ``mars fit``) supplies the per-question arrays and the fitted switch models
    (nothing is refitted; the results are identical to fitting here); ``cache_dir`` caches arrays
    only. ``progress(done, total)``: questions simulated (:mod:`mars.progress`).
    """
    settings.validate()
    check_protocol_inputs(settings, fit_dir, cache_dir)
    pool = _worker_pool(str(pool_path))
    settings = pool_settings(pool, settings)
    qids = pool.qids if questions is None else questions
    known = set(pool.qids)
    missing = [q for q in qids if q not in known]
    if missing:
        raise PoolError(
            f"{pool.source}: no question {missing[0]} (questions: {', '.join(map(str, pool.qids))})"
        )
    unknown = [
        q for q in qids if q in getattr(pool, "unknown_answers", ()) and q not in (answers or {})
    ]
    if unknown and len(unknown) < len(qids):
        raise SimulationError(
            f"{pool.source}: question {unknown[0]} has no known answer (null ground_truth) and "
            "others do: leave it out with --questions, or give every answer (--answers)"
        )
    size_notes(pool, methods, settings, qids)
    if calibration is not None:
        check_calibration(calibration, pool, settings, methods)
    if fit_dir is not None:
        _worker_fit(str(fit_dir)).check(pool, settings, qids)
    jobs = [
        (
            str(pool_path),
            q,
            methods,
            settings,
            None if cache_dir is None else str(cache_dir),
            None if fit_dir is None else str(fit_dir),
            calibration,
            None if answers is None else answers.get(q),
        )
        for q in qids
    ]
    results = []
    tick = counter(len(jobs), progress)
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            results.append(_worker(job))
            tick()
    else:
        work = pool.work_estimate(qids)
        if fit_dir is None and any(m.q == "learned" for m in methods):
            preload_fit()  # the workers fork with it
        if fit_dir is None and pool.has_confs(qids[0]):
            from ..method.confstats import warm_up  # numba: imported where it runs

            warm_up()  # compiled (or loaded from its cache) once, before the workers fork
        with process_pool(min(workers, len(jobs), os.cpu_count() or 1)) as ex:
            sizes = [work.get(q, 0) for q in qids]
            results = map_largest_first(ex, _worker, jobs, sizes, tick)
    return sorted(results, key=lambda r: r.qid)
