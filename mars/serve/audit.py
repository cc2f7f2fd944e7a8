"""The live audit: how often stopping changed the answer, checked on the traffic served.

``mars serve --audit-rate R`` picks a seeded share R of the MARS questions it answers (and every
question whose request says ``mars.audit: true``); after the client has its answer, the question's
stopped traces are run on to their end at the upstream (:func:`mars.live.audit.complete_question`)
and the full-budget vote of the same N traces is compared with the answer served. What it counts,
per method and per record pool — audits, disagreements, the rate, its exact upper bound at
``--audit-confidence`` against the method's risk target — is :mod:`mars.method.audit`'s, served as
Prometheus counters and gauges and as ``GET /v1/mars/audit``; the moment a pool's bound says its
promise does not hold, one log line names the pool, the method and the calibration it doubts, and
the alarm gauge goes to 1.

Audits never delay or crowd out served traffic: they run in threads of their own, at most
``--audit-concurrency`` at once; one is started only when no request waits for a slot, and dropped
(counted, by reason) otherwise; a running audit is cancelled the moment a request has to wait, and
on shutdown. Their tokens are counted apart (``mars_serve_audit_tokens_total``), never in a
client's ``usage``.

With ``--record``, an audited question is kept, completed, in its pool's ``audited/`` folder (a pool
of whole traces, :data:`mars.live.audit.AUDITED_DIR`) with its audit's record: the held-out,
full-budget questions a refit reads (``mars calibrate DIR/<pool>/audited``), and what ``mars
audit`` reads to give the same numbers offline.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..engines import cancel
from ..engines.server import ServerError
from ..engines.tokens import derive_seed
from ..errors import MarsError, first_line
from ..live.audit import (
    AUDIT_DIR,
    AUDITED_DIR,
    AUDITED_GENERATOR,
    Completed,
    audit_record,
    complete_question,
)
from ..method.audit import Tally, risk_target
from ..store import schema
from ..store.atomic import folder_lock, make_dirs, write_json_atomic
from ..store.pool import PoolError
from ..store.pool.checks import check_qids
from ..store.userfiles import read_json_object
from ..store.write import PoolDirWriter
from . import logs
from .metrics import Metrics
from .options import SERVE
from .reconcile import Ledger
from .record import DATASET, Recorder
from .solve import Outcome, Prepared, pool_params
from .upstreams import Upstreams

log = logging.getLogger("mars.serve")

#: the pool label of a method's series taken over all its pools
ALL = "all"
#: mixed into the seed of the pick, so it draws apart from the traces' own seeds
_PICK_SALT = 0xA0D17


#: the fields of :class:`AuditOptions`, each ``mars serve --audit-<field>``
AUDIT_FIELDS = ("rate", "seed", "concurrency", "confidence", "target")


@dataclass(frozen=True)
class AuditOptions:
    """``mars serve``'s audit options."""

    rate: float = SERVE["audit_rate"].default  # the share of MARS questions audited (0: only
    # those a client asks for)
    seed: int = SERVE["audit_seed"].default  # the same seed and traffic pick the same questions
    concurrency: int = SERVE["audit_concurrency"].default  # audits running at once
    confidence: float = SERVE["audit_confidence"].default  # of the bounds (one-sided)
    #: the risk of a method that promises none of its own
    target: float = SERVE["audit_target"].default

    def check(self) -> AuditOptions:
        """Each value against its declaration (``--audit-<name>``, one line)."""
        for name in AUDIT_FIELDS:
            SERVE[f"audit_{name}"].check(getattr(self, name))
        return self


@dataclass
class _Pool:
    """What the audit knows of one record pool."""

    method: str
    target_source: str
    calibration: str | None
    tally: Tally


class Auditor:
    """The audits of one server (see the module docstring); thread-safe."""

    def __init__(
        self,
        options: AuditOptions,
        upstreams: Upstreams,
        metrics: Metrics,
        recorder: Recorder | None = None,
    ):
        self.options = options.check()
        self.upstreams = upstreams
        self.metrics = metrics
        self.recorder = recorder
        self.workers = ThreadPoolExecutor(options.concurrency, thread_name_prefix="mars-audit")
        self._lock = threading.Lock()
        self._seen = 0  # MARS questions offered (the pick draws one number each)
        self._seq = 0  # audits counted
        self._running: dict[int, cancel.CancelScope] = {}
        self._why: dict[int, str] = {}  # why a running audit was cancelled
        self._next = 0
        self._closed = False
        self.pools: dict[str, _Pool] = {}
        self.methods: dict[str, Tally] = {}
        self.picked: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.tokens: Counter[str] = Counter()
        self._writers: dict[str, _AuditedPool | None] = {}

    # -- picking and starting ----------------------------------------------------------------

    def pick(self, asked: bool) -> str | None:
        """Whether the next MARS question answered is audited: ``request`` (its client asked),
        ``sample`` (the seeded draw), or None. Every question draws, so the sample does not
        depend on which clients ask."""
        with self._lock:
            k = self._seen
            self._seen += 1
        if asked:
            return "request"
        if self.options.rate <= 0:
            return None
        u = derive_seed(self.options.seed, k, _PICK_SALT) / float(1 << 63)
        return "sample" if u < self.options.rate else None

    def offer(self, prep: Prepared, o: Outcome, rid: str, client: str, waiting: int) -> None:
        """A question has been answered (its client has everything): audit it if it is picked
        and there is room (``waiting``: requests waiting for a slot now)."""
        picked = self.pick(prep.question.audit)
        if picked is None:
            return
        with self._lock:
            self.picked[picked] += 1
            why = (
                "shutdown"
                if self._closed
                else "busy"
                if waiting
                else "full"
                if len(self._running) >= self.options.concurrency
                else None
            )
            if why is None:
                key, self._next = self._next, self._next + 1
                scope = self._running[key] = cancel.CancelScope()
        if why is not None:
            self._drop(why)
            return
        self.metrics.audits_running.set(len(self._running))
        try:
            fut = self.workers.submit(self._run, key, scope, prep, o, rid, client, picked)
        except RuntimeError:  # the server shut down between the two
            self._forget(key, "shutdown")
            return
        fut.add_done_callback(lambda f: self._forget(key, "shutdown") if f.cancelled() else None)

    def preempt(self) -> None:
        """A request has to wait for a slot: the running audits give their upstream capacity
        back (each cancelled, counted as preempted)."""
        self._cancel_all("preempted")

    def close(self) -> None:
        """Cancel every audit (shutdown) and wait for their threads: nothing is left running at
        the upstream."""
        with self._lock:
            self._closed = True
        self._cancel_all("shutdown")
        self.workers.shutdown(wait=True, cancel_futures=True)

    def _cancel_all(self, why: str) -> None:
        with self._lock:
            running = list(self._running.items())
            for key, _ in running:
                self._why.setdefault(key, why)
        for _, scope in running:
            scope.cancel()

    def _drop(self, why: str) -> None:
        with self._lock:
            self.dropped[why] += 1
        self.metrics.audits_dropped.labels(why).inc()

    def _forget(self, key: int, why: str | None = None) -> None:
        with self._lock:
            had = self._running.pop(key, None) is not None
            self._why.pop(key, None)
            n = len(self._running)
        if had and why is not None:
            self._drop(why)
        self.metrics.audits_running.set(n)

    # -- one audit (a worker thread) ---------------------------------------------------------

    def _run(
        self,
        key: int,
        scope: cancel.CancelScope,
        prep: Prepared,
        o: Outcome,
        rid: str,
        client: str,
        picked: str,
    ) -> None:
        run = o.run
        why: str | None = None
        with logs.serving(rid, client):
            t0 = time.perf_counter()
            try:
                assert run.table is not None
                q = prep.question
                be = self.upstreams.backend(
                    prep.text,
                    prep.prompt_ids,
                    prep.plan.max_tokens,
                    q.temperature,
                    q.top_p,
                    q.answer_pattern,
                )  # fmt: skip  (a view of its own: its requests named and counted as the audit's)
                if hasattr(be, "ledger"):
                    be.ledger = Ledger(f"{rid}-audit", run.warmup, self.metrics, kind="audit")
                if o.params is None:  # not recorded: the pool it counts in, all the same
                    o.params = pool_params(prep)
                    o.pool = Recorder.pool_name(o.params)
                with cancel.scope(scope):
                    done = complete_question(
                        be,
                        prep.problem,
                        run.table,
                        prep.plan,
                        stopped=run.stopped_traces,
                        launched=run.launched,
                    )
            except cancel.Cancelled:
                with self._lock:
                    why = self._why.get(key, "shutdown")
                log.info("an audit was cancelled (%s)", why)
                return
            except (ServerError, MarsError) as exc:
                why = "failed"
                log.warning("an audit failed: %s", first_line(exc))
                return
            except Exception as exc:  # a bug: the audit is lost, the server goes on
                why = "failed"
                log.error("an audit failed", exc_info=exc)
                return
            finally:
                self._forget(key, why)
            try:
                self._count(prep, o, done, picked, time.perf_counter() - t0)
            except Exception as exc:  # a bug: one line and its traceback, the server goes on
                log.error("an audit could not be counted", exc_info=exc)

    def _count(self, prep: Prepared, o: Outcome, done: Completed, picked: str, wall: float) -> None:
        """Count a finished audit, raise the alarm if it must, and record the question."""
        plan, run = prep.plan, o.run
        assert o.pool is not None and o.params is not None
        target, source = risk_target(plan.method, plan.knobs, self.options.target)
        cal = None if plan.calibration is None else plan.calibration.digest
        with self._lock:
            self._seq += 1
            rec = audit_record(
                qid=o.record.qid if o.record is not None else -1,
                pool=o.pool,
                seq=self._seq,
                at=time.time(),
                method=run.method,
                answer=run.answer,
                completed=done,
                stopped_by=run.stopped_by,
                stop_position=run.stop_position,
                target=target,
                target_source=source,
                confidence=self.options.confidence,
                picked=picked,
                calibration=cal,
                wall_s=wall,
            )
            pool = self.pools.get(o.pool)
            if pool is None:
                pool = self.pools[o.pool] = _Pool(
                    run.method, source, cal, Tally(target, self.options.confidence)
                )
            was = pool.tally.alarm
            raised = pool.tally.add(rec["disagree"])
            method = self.methods.get(run.method)
            if method is None:
                method = self.methods[run.method] = Tally(target, self.options.confidence)
            method.target = min(method.target, target)
            method.add(rec["disagree"])
            self.tokens["traces"] += done.tokens
            self.tokens["probes"] += done.probe_tokens
            self._export(o.pool, run.method, pool.tally)
            self._export(ALL, run.method, method)
        m = self.metrics
        m.audits.labels(run.method, o.pool).inc()
        if rec["disagree"]:
            m.audit_disagreements.labels(run.method, o.pool).inc()
        m.audit_tokens.labels("traces").inc(done.tokens)
        m.audit_tokens.labels("probes").inc(done.probe_tokens)
        t = pool.tally
        log.info(
            "audited %s with %s: served %s, the full budget %s (%s); %d traces run on, %d tokens",
            o.pool,
            run.method,
            rec["answer"],
            rec["full_answer"],
            "differs" if rec["disagree"] else "agrees",
            len(done.continued),
            done.tokens + done.probe_tokens,
        )
        if raised:
            log.warning(
                "audit alarm: pool %s (%s): %d of %d audited answers differ from the full-budget "
                "vote (%.1f %%); the upper bound %.4f at %g %% confidence is above the target %g "
                "(%s); %s",
                o.pool,
                run.method,
                t.disagreements,
                t.audits,
                100 * t.rate,
                t.upper,
                100 * t.confidence,
                t.target,
                source,
                f"the calibration it doubts: {cal} (refit it on the audited questions: mars "
                f"calibrate <record>/{o.pool}/{AUDITED_DIR}, then reload)"
                if cal
                else "its warmup understates the switches it stops on",
            )
        elif was and not t.alarm:
            log.warning(
                "audit alarm cleared: pool %s (%s): the upper bound %.4f is back at or under the "
                "target %g",
                o.pool,
                run.method,
                t.upper,
                t.target,
            )
        if self.recorder is not None and o.record is not None:
            self._record(prep, o, done, rec)

    def _export(self, pool: str, method: str, t: Tally) -> None:
        m = self.metrics
        m.audit_risk_upper.labels(method, pool).set(t.upper)
        m.audit_target.labels(method, pool).set(t.target)
        m.audit_alarm.labels(method, pool).set(int(t.alarm))

    def _record(self, prep: Prepared, o: Outcome, done: Completed, rec: dict) -> None:
        """Keep the audited question, completed, in its pool's ``audited/`` folder; a write that
        fails is one log line (the audit is counted all the same)."""
        assert self.recorder is not None and o.record is not None
        assert o.params is not None and o.pool is not None
        with self._lock:
            if o.pool not in self._writers:
                try:
                    self._writers[o.pool] = _AuditedPool(
                        self.recorder.root / o.record.pool / AUDITED_DIR, o.params, o.record.pool
                    )
                except (OSError, MarsError, pa.ArrowException) as exc:
                    log.error("audited questions of %s cannot be kept: %s", o.pool, first_line(exc))
                    self._writers[o.pool] = None
            writer = self._writers[o.pool]
        if writer is None:
            return
        q = prep.question
        row = {
            "qid": o.record.qid,
            "ground_truth": q.ground_truth or None,
            "question": prep.text,
            "dataset": DATASET,
            "model": o.params.get("model", ""),
            "prompt_ids": prep.prompt_ids,
        }
        try:
            writer.add(o.record.qid, done.table, row, rec)
        except (OSError, MarsError, pa.ArrowException) as exc:
            log.error("an audited question could not be kept: %s", first_line(exc))

    # -- what it says ------------------------------------------------------------------------

    def view(self) -> dict:
        """``GET /v1/mars/audit``: the options, what was picked, run and dropped, and per method
        and per pool the tallies."""
        o = self.options
        with self._lock:
            return {
                "rate": o.rate,
                "seed": o.seed,
                "concurrency": o.concurrency,
                "confidence": o.confidence,
                "default_target": o.target,
                "running": len(self._running),
                "questions": self._seen,  # MARS questions answered (each drew once)
                "picked": dict(self.picked),
                "dropped": dict(self.dropped),
                "tokens": dict(self.tokens),
                "methods": {name: t.view() for name, t in self.methods.items()},
                "pools": {
                    name: {
                        "method": p.method,
                        "target_source": p.target_source,
                        "calibration": p.calibration,
                        **p.tally.view(),
                    }
                    for name, p in self.pools.items()
                },
            }


class _AuditedPool:
    """A served pool's audited questions, completed: a pool of whole traces in its
    ``audited/`` folder, each question with its audit's record, written as the served pool is
    (trace file, record, then the question table and manifest)."""

    def __init__(self, path: Path, params: dict, pool: str):
        self.path = path
        self.params = params
        self.pool = pool
        self.lock = threading.Lock()
        self.writer = PoolDirWriter(path, params, record=".audit.json", what="audited record")
        self.rows: list[dict] = []
        manifest = path / schema.POOL_MANIFEST
        if manifest.exists():
            found = read_json_object(manifest, PoolError)
            if found.get("audited") != params:
                raise PoolError(f"{path}: holds audited questions of other settings")
            self.rows = pq.read_table(path / schema.POOL_QUESTIONS).to_pylist()
            check_qids([r["qid"] for r in self.rows], str(path / schema.POOL_QUESTIONS))
        make_dirs(path / schema.POOL_TRACES_DIR)
        make_dirs(path / AUDIT_DIR)

    def add(self, qid: int, table: pa.Table, row: dict, rec: dict) -> None:
        """Write one audited question under its number in the served pool (its rows renumbered
        so, as the served pool's are)."""
        table = table.set_column(
            table.schema.get_field_index("qid"),
            "qid",
            pc.cast(pa.array([qid] * table.num_rows), pa.int64()),
        )
        # the record's cross-process lock (several proxies on one folder): the rows as they are
        # on disk now, not as this process last wrote them
        with self.lock, folder_lock(self.path.parents[1]):
            rows = [r for r in self._on_disk() if r["qid"] != qid] + [row]
            written: list[Path] = []
            try:
                self.writer.write_question(qid, table)
                written.append(self.writer.trace_path(qid))
                path = self.path / AUDIT_DIR / f"q{qid:06d}.json"
                write_json_atomic(path, rec)
                written.append(path)
                self.writer.finish(rows, self._manifest(rows))
            except BaseException:
                for p in written:
                    with contextlib.suppress(OSError):
                        p.unlink()
                raise
            self.rows = rows

    def _on_disk(self) -> list[dict]:
        qfile = self.path / schema.POOL_QUESTIONS
        if not qfile.exists():
            return []
        rows = pq.read_table(qfile).to_pylist()
        check_qids([r["qid"] for r in rows], str(qfile))
        return rows

    def _manifest(self, rows: list[dict]) -> dict:
        skip = ("settings", "method", "warmup", "compare_full", "generator")
        return {
            "generator": AUDITED_GENERATOR,
            **{k: v for k, v in self.params.items() if k not in skip},
            "n_traces": int(self.params["warmup"] + self.params["n_traces"]),
            "qids": sorted(r["qid"] for r in rows),
            "audited": self.params,
            "pool": self.pool,
        }
