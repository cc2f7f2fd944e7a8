"""The transformers engine's trace batch: traces of one question decoding together in chunks
that share one KV cache, each trace dropped from its chunk as it ends; probes branch off a copy
of the cache."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from ...store.problems import Problem
from ..base import ProbeResult
from ..models import _torch
from ..static_decode import (
    StaticChunk,
)
from ..tokens import (
    TokenTraceBatch,
    derive_seed,
    window_conf,
)
from .sampling import UniformStream, round_confs


class Chunk:
    """Traces decoding together: their KV cache (rows in ``rows`` order) and next-token logits."""

    def __init__(self, be: Any, rows: np.ndarray, cache, logits):
        self.be = be
        self.rows = rows
        self.cache = cache
        self.logits = logits

    def select(self, keep: np.ndarray) -> None:
        """Keep the rows where ``keep`` is True (in the cache, the logits and ``rows``)."""
        if keep.all():
            return
        if not keep.any():
            self.rows, self.cache, self.logits = self.rows[:0], None, None
            return
        torch = _torch()
        sel = torch.as_tensor(np.flatnonzero(keep), device=self.logits.device)
        self.cache.batch_select_indices(sel)
        self.logits = self.logits.index_select(0, sel)
        self.rows = self.rows[keep]

    def feed(self, tok: np.ndarray) -> None:
        """Feed each row its next token; the logits after it."""
        torch = _torch()
        ids = torch.as_tensor(tok, device=self.logits.device).unsqueeze(-1)
        self.logits, self.cache = self.be._forward(ids, self.cache)

    def probe_source(self, want: np.ndarray) -> tuple[Any, np.ndarray | None]:
        """The cache a probe of the rows ``want`` branches off, and those rows (None: all)."""
        return self.cache, None if want.all() else np.flatnonzero(want)

    def release(self) -> None:
        self.rows, self.cache, self.logits = self.rows[:0], None, None


class TransformersTraceBatch(TokenTraceBatch):
    """``n`` traces of one question, decoded in chunks of ``backend.batch_size``."""

    def __init__(self, backend: Any, problem: Problem, n: int, seed: int, first_trace: int):
        torch = _torch()
        super().__init__(backend, problem, n, seed, first_trace)
        be = backend
        self._streams = [
            UniformStream(derive_seed(self.seed, problem.qid, self.first_trace + j))
            for j in range(self.n)
        ]
        self._chunk_of = np.full(self.n, -1, np.int64)
        self._chunks: list[Any] = []
        if self.n == 0:
            return
        import time

        t0 = time.perf_counter()
        with torch.inference_mode():
            ids = torch.tensor([self.prompt], device=be.device)
            logits, cache = be._forward(ids)
            be.stats["prefill_tokens"] += len(self.prompt)
            cap = len(self.prompt) + be.max_tokens
            for c, lo in enumerate(range(0, self.n, be.batch_size)):
                rows = np.arange(lo, min(self.n, lo + be.batch_size))
                first = logits.expand(rows.size, -1).clone()
                if be.decode == "eager":
                    ch_cache = copy.deepcopy(cache)
                    ch_cache.batch_repeat_interleave(rows.size)
                    self._chunks.append(Chunk(be, rows, ch_cache, first))
                else:
                    self._chunks.append(StaticChunk.start(be._pool, rows, cache, first, cap))
                self._chunk_of[rows] = c
        be.stats["generate_s"] += time.perf_counter() - t0

    # -- interface -------------------------------------------------------------------------------

    def advance(self, target: int) -> None:
        import time

        torch = _torch()
        be = self.backend
        target = min(int(target), be.max_tokens)
        t0 = time.perf_counter()
        with torch.inference_mode():
            for ch in self._chunks:
                while ch.rows.size and len(self._ids[ch.rows[0]]) < target:
                    self._step(ch)
        be.stats["generate_s"] += time.perf_counter() - t0

    def _step(self, ch) -> None:
        """Sample the next token of every row of ``ch``; feed it unless the row ended."""
        be = self.backend
        u = np.array([self._streams[j].next() for j in ch.rows.tolist()])
        tok, conf = be._sample(ch.logits, u)
        conf = round_confs(conf)
        keep = np.ones(ch.rows.size, bool)
        for i, j in enumerate(ch.rows.tolist()):
            t = int(tok[i])
            self._ids[j].append(t)
            self._confs[j].append(float(conf[i]))
            if t in be.eos_ids:
                self._eos[j] = True
                keep[i] = False
            elif len(self._ids[j]) >= be.max_tokens:
                keep[i] = False
        be.stats["trace_tokens"] += int(ch.rows.size)
        ch.select(keep)
        if ch.rows.size:
            ch.feed(tok[keep])

    def stop(self, idx) -> None:
        idx = np.asarray(idx, np.int64)
        super().stop(idx)
        for ch in self._chunks:
            if ch.rows.size:
                ch.select(~np.isin(ch.rows, idx))

    def probe(self, idx) -> list[ProbeResult]:
        import time

        torch = _torch()
        be = self.backend
        idx = self._probe_targets(idx)
        if idx.size == 0:
            return []
        t0 = time.perf_counter()
        results: dict[int, ProbeResult] = {}
        with torch.inference_mode():
            for ch in self._chunks:
                want = np.isin(ch.rows, idx)
                if not want.any():
                    continue
                results.update(zip(ch.rows[want].tolist(), self._probe_chunk(ch, want)))
        be.stats["probe_s"] += time.perf_counter() - t0
        return [results[j] for j in idx.tolist()]

    def _probe_chunk(self, ch, want: np.ndarray) -> list[ProbeResult]:
        """Probe the rows ``want`` of chunk ``ch`` together (all hold the same number of tokens)."""
        be = self.backend
        rows = ch.rows[want]
        p = len(self._ids[rows[0]])
        seeds = [
            derive_seed(self.seed, self.problem.qid, self.first_trace + j, p) for j in rows.tolist()
        ]
        if be.probe_kv_reuse:
            cache, sel = ch.probe_source(want)
            out = be._probe_tokens(rows.size, seeds, be.device, cache=cache, rows=sel)
            cached = len(self.prompt) + p
        else:
            full = [self.prompt + self._ids[j] + be.suffix_ids for j in rows.tolist()]
            out = be._probe_tokens(rows.size, seeds, be.device, full=full)
            cached = 0
        return [
            be._probe_result(
                out[i],
                window_conf(self._confs[j], p),
                len(self.prompt) + p + len(be.suffix_ids),
                cached,
            )
            for i, j in enumerate(rows.tolist())
        ]

    def close(self) -> None:
        for ch in self._chunks:
            ch.release()
        self._chunks = []
