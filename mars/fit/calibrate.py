"""`mars calibrate`: a calibration learned once, from pools, for MARS2 without a warmup.

Every question of every pool gives its arrays (the protocol's own: the bootstrap's answer groups,
or Parallel-Probe's exact strings) and the calibration is fitted across all of them
(:func:`mars.method.learned.fit_calibration`). The file records each pool it was fitted on — its
path, model, probe grid, protocol, questions and the content of those questions — so that a
simulation, a live run or a server refuses it for traces of another model or grid, and a
calibration fitted on the traces it evaluates is told apart from one that never saw them.

The bootstrap protocol's arrays group each question's answers (symbolic equivalence: most of the
work); the pools' ``mars fit`` directories hold them already, and ``fits`` reads them from there
(a question's arrays only from a fit of its very traces and grid, else they are built), so the
workflow's calibrate jobs do not group the same answers again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import MarsError
from ..method import protocol
from ..method.arrays import QuestionArrays, arrays_path, cache_key, load_arrays, read_cached
from ..method.learned import Calibration, fit_calibration
from ..progress import Progress, counted
from ..store.grid import Grid
from ..store.pool import QuestionData, open_pool
from ..store.provenance import checksum_of


def calibrate_pools(
    pools: Sequence[str | Path],
    *,
    protocol_name: str = protocol.BOOTSTRAP,
    finals: str = "trace",
    fits: Sequence[str | Path] = (),
    progress: Progress | None = None,
) -> Calibration:
    """Fit a calibration on every question of ``pools``; ``fits``: ``mars fit`` directories whose
    arrays serve the questions they were fitted on (the bootstrap protocol only)."""
    from .fitdir import FitDir

    if not pools:
        raise MarsError("mars calibrate: give at least one pool")
    if fits and protocol_name != protocol.BOOTSTRAP:
        raise MarsError(
            f"--protocol {protocol_name} reads the traces its own way (exact answers): it takes "
            "no --fit, whose arrays are the bootstrap protocol's"
        )
    fitted = [FitDir(f) for f in fits]
    opened = [(Path(p), open_pool(p)) for p in pools]
    arrays, fitted_on = [], []
    total = sum(len(pool.qids) for _, pool in opened)
    jobs = ((path, pool, q) for path, pool in opened for q in pool.qids)
    hashes: dict[str, dict[int, str]] = {}
    for path, pool, qid in counted(jobs, total, progress):
        q = pool.read_question(qid).with_finals(finals)
        spacing = (pool.grid or Grid()).spacing
        if protocol_name == protocol.PARALLEL_PROBE:
            arr = protocol.question_arrays(q, spacing)
        else:
            arr = _fitted_arrays(q, spacing, fitted) or load_arrays(q, spacing=spacing)
        arrays.append(arr)
        hashes.setdefault(str(path), {})[qid] = arr.content_hash
    for path, pool in opened:
        manifest = dict(getattr(pool, "manifest", None) or {})
        fitted_on.append(
            {
                "source": str(path),
                "model": manifest.get("model"),
                "dataset": manifest.get("dataset"),
                "spacing": (pool.grid or Grid()).spacing,
                "protocol": protocol_name,
                "questions": len(pool.qids),
                "checksum": checksum_of(hashes[str(path)]),
            }
        )
    return fit_calibration(arrays, fitted_on)


def _fitted_arrays(q: QuestionData, spacing: int, fits) -> QuestionArrays | None:
    """The question's arrays from the first fit that holds them at this grid (any window: the
    calibration reads answers and lengths, not confidences); None when none does."""
    for fit in fits:
        arr = read_cached(
            arrays_path(fit.path, q, spacing, fit.window), cache_key(q, spacing, fit.window)
        )
        if arr is not None:
            return arr
    return None
