"""The audit of a stopped question, and `mars audit`: how often stopping changed the answer.

A live question stops its running traces the moment its method fires. Its *audit* takes those
traces back from where they stopped and runs them to their end (:func:`complete_question`), starts
the traces a staged method never launched, and asks the full-budget vote of the same N traces
(the method's pipeline's baseline) what it answers: the stop *disagrees* when that is not the
answer given. A trace is taken back from what its record kept (:meth:`TraceBatch.resume
<mars.engines.base.TraceBatch.resume>`: a server's trace from its token ids, each request with
the seed it would have had), and goes on checkpoint by checkpoint with its probes, as it would
had it never been stopped: the completed question is a full-budget question, which a refit
(`mars calibrate`) reads.

`mars serve --audit-rate` audits a seeded share of its questions (:mod:`mars.serve.audit`) and
keeps each audited question, completed, in a pool beside the served one (:data:`AUDITED_DIR`),
with its audit's record (:data:`AUDIT_DIR`). :func:`audit_paths` is the offline twin: it reads

* a served record (its folder, a pool of it, or a pool's audited questions): the audits' records,
  counted in the order the server counted them, so its numbers are the live counters';
* a `mars solve --compare-full` run: each question's answer against its full-budget vote;
* any pool of whole traces (generated, imported, audited): each method of ``methods`` decides each
  question as a live run would (its first W traces the warmup, the next N the main traces), and
  its answer is compared with the full-budget vote of the same N traces;
* a `mars simulate` output: each method's answer of every sample against its baseline's answer
  of the same sample.

The statistics are :mod:`mars.method.audit`'s (the rate, its Clopper–Pearson bounds, the alarm).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..engines import cancel
from ..engines.base import Backend, ProbeResult, StoredTrace, TraceBatch
from ..engines.generate import TraceRecord, records_to_table, row_probes
from ..errors import MarsError
from ..method.audit import CONFIDENCE, DEFAULT_TARGET, Tally, risk_target, same_answer
from ..method.learned import Calibration
from ..method.registry import Method, get_method, live_method
from ..method.settings import SPECS
from ..store import schema
from ..store.grid import Grid
from ..store.pool import PoolError, QuestionData, open_pool, question_from_table
from ..store.problems import Problem
from ..store.userfiles import read_json_object
from ..store.write import stood_in_of, with_stood_in
from .plan import LivePlan
from .records import LIVE_RECORD, live_grid, live_settings, read_calibration
from .replay import decide, open_live_run

#: where a served pool keeps its audited questions, completed: a pool of whole traces
AUDITED_DIR = "audited"
#: where an audited pool keeps its audits' records (``qNNNNNN.json``)
AUDIT_DIR = "audit"
#: what an audited pool's manifest says made it, and its audit records' kind
AUDITED_GENERATOR = "mars.serve.audit"
AUDIT_RECORD_KIND = "mars-audit"


@dataclass
class Completed:
    """A question whose stopped traces were run to their end."""

    table: pa.Table  # warmup + main traces, every main trace run to its end
    full_answer: str | None  # the full-budget vote of the main traces
    continued: list[int]  # trace ids taken back from their stop, or started (never launched)
    tokens: int  # tokens the continuation generated
    probe_tokens: int  # tokens its probes generated


def _stored(row: dict) -> StoredTrace:
    ids = row.get("token_ids")
    confs = row.get("confs")
    return StoredTrace(
        trace_idx=int(row["trace_idx"]),
        length=int(row["length"]),
        token_ids=None if ids is None else np.asarray(ids, np.int32),
        confs=None if confs is None else np.asarray(confs, np.float16),
        text=row.get("text"),
        final_answer=row.get("final_answer"),
    )


def _question(problem: Problem, table: pa.Table) -> QuestionData:
    return question_from_table(
        table,
        problem.qid,
        f"<audited question {problem.qid}>",
        published=False,
        ground_truth=problem.answer or "",
        question=problem.question,
    )


def full_budget_answer(
    q: QuestionData, method: Method, settings, grid: np.ndarray, warmup: int
) -> str | None:
    """The full-budget vote of a question's main traces, every one run to its end: the answer
    ``method``'s pipeline's baseline gives (:attr:`~mars.method.registry.Method.baseline`)."""
    res, arr = decide(
        q, get_method(method.baseline), settings, grid, warmup, np.zeros(q.n_traces, bool)
    )
    a = int(res.answer[0])
    return arr.representatives[a] if a >= 0 else None


def complete_question(
    backend: Backend,
    problem: Problem,
    table: pa.Table,
    plan: LivePlan,
    *,
    stopped: Sequence[int],
    launched: int | None,
) -> Completed:
    """Run a live question's stopped traces to their end (and the traces a staged method never
    launched from their start), probed at every checkpoint after their stop, and take the
    full-budget vote of its N main traces. ``table``: the question's records as the live run of
    ``plan`` wrote them (:attr:`mars.live.LiveRun.table`). A cancelled scope
    (:mod:`mars.engines.cancel`) ends it with :class:`~mars.engines.cancel.Cancelled`."""
    method, n_traces, warmup, seed = plan.method, plan.traces, plan.warmup, plan.seed
    max_tokens, settings, grid = plan.max_tokens, plan.settings, plan.checkpoints
    rows = {int(r["trace_idx"]): r for r in table.to_pylist()}
    main = range(warmup, warmup + n_traces)
    if sorted(rows) != list(range(warmup + n_traces)):
        raise MarsError(
            f"question {problem.qid}: its records hold traces {sorted(rows)[:4]}…, not the "
            f"{warmup} warmup + {n_traces} main traces of its run"
        )
    stopped_set = {int(t) for t in stopped}
    unlaunched = set(range(warmup + (n_traces if launched is None else launched), main.stop))
    todo = sorted(stopped_set | unlaunched)
    if not todo:
        q = _question(problem, table)
        return Completed(table, full_budget_answer(q, method, settings, grid, warmup), [], 0, 0)

    lo, hi = todo[0], todo[-1] + 1
    batch = backend.start(problem, hi - lo, seed, first_trace=lo)
    new_probes: dict[int, list[tuple[int, ProbeResult]]] = {t: [] for t in todo}
    try:
        start = np.zeros(hi - lo, np.int64)
        keep = [j for j in range(hi - lo) if lo + j not in new_probes]
        for j in range(hi - lo):
            if lo + j in stopped_set:
                batch.resume(j, _stored(rows[lo + j]))
                start[j] = int(rows[lo + j]["length"])
        if keep:
            batch.stop(np.asarray(keep, np.int64))
        _run_on(batch, grid, max_tokens, start, lambda j, p, r: new_probes[lo + j].append((p, r)))
        results = {lo + j: batch.result(j) for j in range(hi - lo) if lo + j in new_probes}
    finally:
        batch.close()

    tokens = probe_tokens = 0
    parts = [
        table.filter(pa.array([int(t) not in new_probes for t in table["trace_idx"].to_pylist()]))
    ]
    for t in todo:
        r = results[t]
        old = row_probes(rows[t]) if t in stopped_set else []
        tokens += r.length - (int(rows[t]["length"]) if t in stopped_set else 0)
        probe_tokens += sum(p.generated_tokens or 0 for _, p in new_probes[t])
        rec = TraceRecord(r, [*old, *new_probes[t]])
        parts.append(records_to_table(problem.qid, t, [rec]))
    stood = stood_in_of(table) + sum(stood_in_of(p) for p in parts[1:])
    merged = pa.concat_tables([p.replace_schema_metadata(None) for p in parts])
    order = np.argsort(merged["trace_idx"].to_numpy(), kind="stable")
    completed = with_stood_in(merged.take(pa.array(order)), stood)
    q = _question(problem, completed)
    full = full_budget_answer(q, method, settings, grid, warmup)
    return Completed(completed, full, todo, int(tokens), int(probe_tokens))


def _run_on(batch: TraceBatch, grid: np.ndarray, max_tokens: int, start: np.ndarray, heard) -> None:
    """Advance ``batch`` over the grid as :func:`mars.engines.generate.run_batch` does, probing
    a running trace only past where it started (``start``: its tokens when taken back), then to
    the cap; ``heard(j, position, probe)`` hears each probe."""
    for p in grid.tolist():
        cancel.check()
        if np.asarray(batch.ended).all():
            break
        batch.advance(p)
        cancel.check()
        ended, lengths = np.asarray(batch.ended), np.asarray(batch.lengths)
        running = np.flatnonzero(~ended & (lengths == p) & (start < p))
        if running.size:
            for j, r in zip(running.tolist(), batch.probe(running)):
                heard(j, p, r)
    cancel.check()
    batch.advance(max_tokens)
    left = np.flatnonzero(~np.asarray(batch.ended))
    if left.size:
        batch.stop(left)


# ---------------------------------------------------------------------------------------------
# The audit's record, as an audited pool keeps it


def audit_record(
    *,
    qid: int,
    pool: str,
    seq: int,
    at: float,
    method: str,
    answer: str | None,
    completed: Completed,
    stopped_by: str,
    stop_position: int | None,
    target: float,
    target_source: str,
    confidence: float,
    picked: str,
    calibration: str | None,
    wall_s: float,
) -> dict:
    """One audit's record (``audit/qNNNNNN.json`` of an audited pool)."""
    return {
        "kind": AUDIT_RECORD_KIND,
        "version": 1,
        "qid": int(qid),
        "pool": pool,
        "seq": int(seq),
        "at": float(at),
        "method": method,
        "baseline": live_method(method).baseline,
        "answer": answer,
        "full_answer": completed.full_answer,
        "disagree": not same_answer(answer, completed.full_answer),
        "stopped_by": stopped_by,
        "stop_position": stop_position,
        "continued": completed.continued,
        "tokens": {"traces": completed.tokens, "probes": completed.probe_tokens},
        "target": float(target),
        "target_source": target_source,
        "confidence": float(confidence),
        "picked": picked,
        "calibration": calibration,
        "wall_s": round(float(wall_s), 4),
    }


_RECORD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "qid": int,
    "pool": str,
    "seq": int,
    "at": (int, float),
    "method": str,
    "disagree": bool,
    "target": (int, float),
    "confidence": (int, float),
}


def read_audit_records(audited: Path) -> list[dict]:
    """The audit records of an audited pool, each checked (one line naming the file)."""
    folder = Path(audited) / AUDIT_DIR
    out = []
    for path in sorted(folder.glob("q*.json")) if folder.is_dir() else []:
        rec = read_json_object(path, PoolError)
        if rec.get("kind") != AUDIT_RECORD_KIND:
            raise PoolError(f"{path}: not an audit record (kind {rec.get('kind')!r})")
        for key, kind in _RECORD_FIELDS.items():
            value = rec.get(key)
            if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
                raise PoolError(f"{path}: {key!r} is {value!r}")
        out.append(rec)
    return out


# ---------------------------------------------------------------------------------------------
# `mars audit`: the same statistics offline


@dataclass
class AuditReport:
    """What `mars audit` found: one row per audited unit (a question, or a simulation's
    sample), and the tallies per method and per pool, counted in the audits' order."""

    rows: list[dict] = field(default_factory=list)
    pools: dict[str, dict] = field(default_factory=dict)  # pool -> {method, source, tally}
    methods: dict[str, Tally] = field(default_factory=dict)
    confidence: float = CONFIDENCE

    def add(
        self, pool: str, method: str, target: float, source: str, disagree: bool, row: dict
    ) -> None:
        """Count one audit, as the live audit does (:class:`mars.serve.audit.Auditor`)."""
        entry = self.pools.get(pool)
        if entry is None:
            entry = self.pools[pool] = {
                "method": method,
                "target_source": source,
                "tally": Tally(target, self.confidence),
            }
        entry["tally"].add(disagree)
        m = self.methods.get(method)
        if m is None:
            m = self.methods[method] = Tally(target, self.confidence)
        m.target = min(m.target, target)
        m.add(disagree)
        self.rows.append({"pool": pool, "method": method, **row, "disagree": bool(disagree)})

    def summary(self) -> dict:
        return {
            "confidence": self.confidence,
            "methods": {m: t.view() for m, t in self.methods.items()},
            "pools": {
                p: {"method": e["method"], "target_source": e["target_source"], **e["tally"].view()}
                for p, e in self.pools.items()
            },
        }

    def per_question(self) -> list[dict]:
        """Per pool, method and question: its audited units (one per audit; a simulation's
        samples), disagreements, their rate and its one-sided upper bound."""
        groups: dict[tuple, list[bool]] = {}
        for r in self.rows:
            groups.setdefault((r["pool"], r["method"], r.get("qid")), []).append(r["disagree"])
        out = []
        for (pool, method, qid), flags in groups.items():
            t = Tally(1.0, self.confidence, len(flags), sum(flags))
            out.append(
                {"pool": pool, "method": method, "qid": qid, "audits": t.audits,
                 "disagreements": t.disagreements, "rate": t.rate, "upper": t.upper}
            )  # fmt: skip
        return out

    @property
    def alarm(self) -> bool:
        return any(e["tally"].alarm for e in self.pools.values()) or any(
            t.alarm for t in self.methods.values()
        )


def _kind(path: Path) -> str:
    """What a path given to `mars audit` is."""
    from ..simulate.runs import is_run_dir

    if (path / "serve.json").is_file():
        return "record"
    if (path / AUDITED_DIR).is_dir():
        return "served"
    manifest = path / schema.POOL_MANIFEST
    if manifest.is_file():
        m = read_json_object(manifest, PoolError)
        if m.get("generator") == AUDITED_GENERATOR:
            return "audited"
        if isinstance(m.get("live"), dict):
            return "served" if m["live"].get("generator") == "mars.serve" else "live"
        return "pool"
    if (path / LIVE_RECORD).is_file():  # a live run still under way
        return "live"
    if is_run_dir(path):
        return "simulation"
    if path.is_file() or manifest.parent.is_dir():
        return "pool"
    raise MarsError(f"{path}: no such pool, record or simulation")


def audit_paths(
    paths: Sequence[str | Path],
    *,
    methods: Sequence[str] = (),
    n_traces: int | None = None,
    warmup: int | None = None,
    spacing: int | None = None,
    max_tokens: int | None = None,
    seed: int = 0,
    knobs: dict | None = None,
    calibration: Calibration | None = None,
    target: float = DEFAULT_TARGET,
    confidence: float | None = None,
    sampled_only: bool = False,
) -> AuditReport:
    """Audit each path (see the module docstring for what each kind gives); ``methods`` and the
    sizes are for pools of whole traces, ``target`` the risk of a method that promises none;
    ``sampled_only``: of a served record, the audits of the seeded sample only (not those a
    client asked for, which are no random sample)."""
    if confidence is not None and not 0 < confidence < 1:
        raise MarsError(f"--confidence {confidence}: must lie in (0, 1)")
    if not 0 < target < 1:
        raise MarsError(f"--audit-target {target}: must lie in (0, 1)")
    report = AuditReport(confidence=CONFIDENCE if confidence is None else confidence)
    for p in map(Path, paths):
        kind = _kind(p)
        if methods and kind in ("served", "audited"):
            kind, p = "pool", p / AUDITED_DIR if kind == "served" else p
        if kind == "record":
            folders = sorted(d / AUDITED_DIR for d in p.iterdir() if (d / AUDITED_DIR).is_dir())
            _audited(report, folders, confidence is None, sampled_only)
        elif kind in ("served", "audited"):
            folder = p / AUDITED_DIR if kind == "served" else p
            _audited(report, [folder], confidence is None, sampled_only)
        elif kind == "live":
            _live_run(report, p, target)
        elif kind == "simulation":
            _simulation(report, p, target)
        else:
            if not methods:
                raise MarsError(f"{p}: a pool of whole traces: name the methods to audit (-m)")
            _whole_pool(
                report, p, methods, n_traces, warmup, spacing, max_tokens, seed,
                dict(knobs or {}), calibration, target,
            )  # fmt: skip
    if not report.rows:
        raise MarsError(
            f"{', '.join(map(str, paths))}: no audited question (mars serve --audit-rate keeps "
            f"them in each pool's {AUDITED_DIR}/ folder)"
        )
    return report


def _audited(
    report: AuditReport, folders: Iterable[Path], own_confidence: bool, sampled_only: bool
) -> None:
    """A served record's audits, in the order the server counted them (its bounds at the
    confidence its records state unless told otherwise)."""
    recs = [r for f in folders for r in read_audit_records(f)]
    if sampled_only:
        recs = [r for r in recs if r.get("picked") == "sample"]
    recs.sort(key=lambda r: (r["at"], r["seq"]))
    if recs and own_confidence and not report.rows:
        report.confidence = float(recs[0]["confidence"])
    for r in recs:
        report.add(
            r["pool"],
            r["method"],
            float(r["target"]),
            str(r.get("target_source", "")),
            bool(r["disagree"]),
            {
                "qid": r["qid"],
                "answer": r.get("answer"),
                "full_answer": r.get("full_answer"),
                "picked": r.get("picked"),
                "seq": r["seq"],
            },
        )


def _live_run(report: AuditReport, path: Path, default: float) -> None:
    """A `mars solve` run: the questions run to their end as well (``--compare-full``)."""
    d = open_live_run(path)
    from .records import read_records

    recs = read_records(d.path, d.done, d.run.warmup, d.run.n_traces)
    full = [r for r in recs if isinstance(r.get("full"), dict)]
    if not full:
        raise MarsError(
            f"{path}: no question of this live run was also run to its end (mars solve "
            "--compare-full): nothing to audit"
        )
    target, source = risk_target(d.run.method, d.params.get("settings") or {}, default)
    for r in full:
        report.add(
            str(path),
            d.run.method.name,
            target,
            source,
            not same_answer(r["answer"], r["full"].get("answer")),
            {"qid": r["qid"], "answer": r["answer"], "full_answer": r["full"].get("answer")},
        )


def _simulation(report: AuditReport, path: Path, default: float) -> None:
    """A `mars simulate` output: each method's answer of every sample against its baseline's
    answer of the same sample (the same run's baseline folder)."""
    from ..simulate.runs import load_run

    run = load_run(path, "-", path.name, "default")
    audited = 0
    for name in run.methods:
        m = get_method(name)
        if m.is_baseline or m.baseline not in run.overall:
            continue
        target, source = risk_target(m, run.settings(name), default)
        a = run.per_iteration(name)[["qid", "iteration", "answer"]]
        b = run.per_iteration(m.baseline)[["qid", "iteration", "answer"]]
        j = a.merge(b, on=["qid", "iteration"], suffixes=("", "_full"), validate="one_to_one")
        for r in j.itertuples():
            answer, full = _na(r.answer), _na(r.answer_full)
            report.add(
                f"{path}/{name}",
                name,
                target,
                source,
                not same_answer(answer, full),
                {"qid": int(r.qid), "iteration": int(r.iteration), "answer": answer,
                 "full_answer": full},
            )  # fmt: skip
        audited += 1
    if not audited:
        raise MarsError(
            f"{path}: no method simulated beside its full-budget vote (its pipeline's "
            "baseline): nothing to audit"
        )


def _na(x) -> str | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


def _whole_pool(
    report: AuditReport,
    path: Path,
    methods: Sequence[str],
    n_traces: int | None,
    warmup: int | None,
    spacing: int | None,
    max_tokens: int | None,
    seed: int,
    knobs: dict,
    calibration: Calibration | None,
    default: float,
) -> None:
    """A pool of whole traces: each method decides each question as a live run would, and its
    answer is compared with the full-budget vote of the same traces."""
    pool = open_pool(path)
    manifest = dict(getattr(pool, "manifest", None) or {})
    found = manifest.get("audited")
    audited: dict = found if isinstance(found, dict) else {}
    if calibration is None and audited.get("calibration"):
        calibration = read_calibration(path.parent, audited["calibration"])
    if warmup is None:
        warmup = int(
            audited.get("warmup", 0 if calibration is not None else SPECS["warmup"].default)
        )
    spacing = int(spacing or (pool.grid or Grid()).spacing)
    for name in methods:
        m = live_method(name)
        mk = {**(audited.get("settings") or {}), **knobs}
        target, source = risk_target(m, mk, default)
        for qid in pool.qids:
            q = pool.read_question(qid)
            n = n_traces or int(audited.get("n_traces") or (q.n_traces - warmup))
            if n < 1 or q.n_traces < warmup + n:
                raise MarsError(
                    f"{path}: question {qid} has {q.n_traces} traces, fewer than --warmup "
                    f"{warmup} + --traces {n}"
                )
            q = _first_traces(q, warmup + n)
            cap = int(max_tokens or manifest.get("max_tokens") or int(q.lengths.max()))
            settings = live_settings(n, warmup, seed, spacing, cap, mk)
            grid = live_grid(spacing, cap).checkpoints()
            stopped = np.zeros(q.n_traces, bool)
            res, arr = decide(q, m, settings, grid, warmup, stopped, calibration=calibration)
            a = int(res.answer[0])
            answer = arr.representatives[a] if a >= 0 else None
            full = full_budget_answer(q, m, settings, grid, warmup)
            report.add(
                f"{path}#{m.name}",
                m.name,
                target,
                source,
                not same_answer(answer, full),
                {"qid": int(qid), "answer": answer, "full_answer": full,
                 "stopped_by": str(res.stopped_by[0])},
            )  # fmt: skip


def _first_traces(q: QuestionData, k: int) -> QuestionData:
    """The question with its first ``k`` traces only (readers sort them by trace id): the
    warmup and main traces a live run of that size would have."""
    if k >= q.n_traces:
        return q
    po = q.probe_offsets[: k + 1]
    n = int(po[-1])
    co = None if q.conf_offsets is None else q.conf_offsets[: k + 1]
    return replace(
        q,
        trace_idx=q.trace_idx[:k],
        lengths=q.lengths[:k],
        final_answers=list(q.final_answers[:k]),
        probe_offsets=po,
        probe_positions=q.probe_positions[:n],
        probe_codes=q.probe_codes[:n],
        conf_offsets=co,
        conf_values=None if co is None or q.conf_values is None else q.conf_values[: int(co[-1])],
        probe_cost=None if q.probe_cost is None else q.probe_cost[:n],
        probe_steps=None if q.probe_steps is None else q.probe_steps[:k],
        probe_raw=None if q.probe_raw is None else list(q.probe_raw[:n]),
    )
