"""Decoding over a static KV cache, on a GPU each step replayed as a CUDA graph: the transformers
backend's ``decode="static"`` and ``decode="cuda-graphs"`` (``--decode``).

Why: eager decoding (a ``DynamicCache`` that grows by concatenation, one forward pass launched op
by op from Python) took about 60 ms a step on an H100 whatever the batch (1-64 traces) or the
model (135 M or 7.35 B parameters; benchmarks/README.md): the step was bound by launching some
thousand small kernels, not by the GPU.  A captured graph launches them all at once, and needs
fixed shapes and fixed addresses: hence the static cache.

* :class:`StaticDecoder`: ``rows`` sequences in one transformers ``StaticCache`` of ``length``
  positions, all at the same position (the backend's chunks never pad).  Tokens fed are written
  at that position for every row; attention reads the whole length, masked beyond the position.
  A row that ends keeps its slot and is fed a dummy token (its logits unread), so shapes never
  change; the backend moves the live rows to a decoder of fewer rows once they fit in half
  (:func:`rows_for`), and to a longer one when the cache is full (:func:`length_for`: powers of
  two from :data:`MIN_LENGTH`, so the masked tail never exceeds the part in use).
* With ``graphs`` (CUDA only) a decoder's first one-token step runs eagerly on a side stream (the
  warm-up, and the step's result), then the step is captured in a ``torch.cuda.CUDAGraph`` and
  every later step is one replay.  The graph reads the token buffer and the cache's position
  counters, device tensors that the captured step itself advances, so a replay is a step; loading
  other sequences into the decoder (in place) keeps its graph valid.
* :class:`DecoderPool`: released decoders are kept (at most :data:`IDLE_MAX`, the least recently
  used freed first, all of them when memory runs short), so the next chunk, question or probe of
  the same shape reuses a cache and its graph.

What differs from eager decoding: the same model and, row by row, the same arithmetic, but
attention runs over the masked full length (another kernel, sums in another order), and rows that
have ended still take part in the batch's matrix products (other shapes).  Logits therefore differ
in their last bits (float32 on a CPU: ~1e-5 for SmolLM2-135M), a token (greedy or sampled) differs
only where that moves a choice between two candidates that close, and a confidence rounded to 3
decimals can differ by one unit of its last place.  A graph replays the kernels of the eager static
step on the same shapes, so ``cuda-graphs`` is expected to give what ``static`` gives, bit for bit
(benchmarks/gpu_run.sh checks it).  The decode step must read nothing back to the host (a graph
cannot); tests/engines/transformers/test_static_decode.py checks that it does not on the models
we run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import MarsError
from .models import _torch

__all__ = [
    "DECODE_MODES",
    "IDLE_MAX",
    "MIN_LENGTH",
    "DecoderPool",
    "StaticChunk",
    "StaticDecoder",
    "check_device",
    "check_static",
    "kv_source",
    "length_for",
    "probe_decoder",
    "rows_for",
]

#: The decoding modes of the transformers backend (the option ``decode``).
DECODE_MODES = ("eager", "static", "cuda-graphs")
#: Fewest positions a static cache is given (then powers of two).
MIN_LENGTH = 256
#: Most idle decoders a pool keeps (their memory buys not capturing their graphs again).
IDLE_MAX = 4


def pow2(n: int) -> int:
    """The least power of two ≥ ``n`` (1 for n ≤ 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def length_for(need: int, cap: int | None = None) -> int:
    """Positions allotted to hold ``need``: the next power of two (at least :data:`MIN_LENGTH`),
    but no more than ``cap`` (the most the sequences can ever hold) when that is ≥ ``need``."""
    n = max(MIN_LENGTH, pow2(need))
    return n if cap is None else max(int(need), min(n, int(cap)))


def rows_for(live: int, rows: int) -> int:
    """The rows of the decoder that ``live`` sequences of a ``rows``-row decoder move to: the next
    power of two ≥ ``live`` once that is at most half of ``rows``, else ``rows`` (stay)."""
    n = pow2(live)
    return n if 2 * n <= rows else rows


def check_device(mode: str, device: str) -> None:
    """One-line :class:`MarsError` when ``mode`` cannot run on ``device`` (graphs need CUDA)."""
    if mode not in DECODE_MODES:
        raise MarsError(f"--decode {mode!r}: one of {', '.join(DECODE_MODES)}")
    if mode == "cuda-graphs" and not str(device).startswith("cuda"):
        raise MarsError(
            f"--decode cuda-graphs needs a CUDA device, not {device!r} "
            "(--decode static runs on any)"
        )


def check_static(model, mode: str) -> None:
    """One-line :class:`MarsError` when ``model`` cannot decode over a static cache: only
    full-attention layers (no sliding window, no linear attention), transformers 5 or later.
    Allocates nothing."""
    import transformers

    major = int(transformers.__version__.split(".")[0])
    if major < 5:
        raise MarsError(
            f"--decode {mode} needs transformers 5 or later (installed: {transformers.__version__})"
        )
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    kinds = {type(layer) for layer in StaticCache(config=model.config, max_cache_len=1).layers}
    if kinds != {StaticLayer}:
        names = ", ".join(sorted(k.__name__ for k in kinds - {StaticLayer}))
        raise MarsError(
            f"--decode {mode}: {type(model).__name__} has attention layers it does not handle "
            f"(sliding window or other: {names}); use --decode eager"
        )


def kv_source(cache) -> tuple[list[tuple[Any, Any]], int]:
    """(every layer's keys and values [rows, heads, positions, dim], positions held) of a
    transformers cache (``DynamicCache``) or a :class:`StaticDecoder`."""
    if isinstance(cache, StaticDecoder):
        return cache.kv(), cache.pos
    return [(layer.keys, layer.values) for layer in cache.layers], int(cache.get_seq_length())


class StaticDecoder:
    """``rows`` sequences in one static KV cache of ``length`` positions (module docstring)."""

    def __init__(
        self,
        model,
        rows: int,
        length: int,
        *,
        graphs: bool = False,
        keep_kw: str | None = None,
        stats: dict | None = None,
    ):
        torch = _torch()
        from transformers import StaticCache

        self.model = model
        self.rows, self.length = int(rows), int(length)
        self.cache = StaticCache(config=model.config, max_cache_len=self.length)
        self.device = next(model.parameters()).device
        self.graphs = bool(graphs)
        self.stats = stats if stats is not None else {}
        self._keep = {keep_kw: 1} if keep_kw else {}
        self._tok = torch.zeros((self.rows, 1), dtype=torch.long, device=self.device)
        self._graph: Any = None
        self._out: Any = None
        #: the position of every row: tokens held (mirrors the cache's counters, on the host)
        self.pos = 0

    def kv(self) -> list[tuple[Any, Any]]:
        return [(layer.keys, layer.values) for layer in self.cache.layers]

    @property
    def allocated(self) -> bool:
        return all(layer.is_initialized for layer in self.cache.layers)

    def allocate(self, layout: Sequence[tuple[Any, Any]]) -> None:
        """Allocate the cache now, like ``layout`` (each layer's keys and values, any rows and
        positions: their heads, sizes, dtype and device), rather than at the first load."""
        for layer, (k, v) in zip(self.cache.layers, layout, strict=True):
            if not layer.is_initialized:
                layer.lazy_initialization(
                    k[:1, :, :1].expand(self.rows, -1, -1, -1),
                    v[:1, :, :1].expand(self.rows, -1, -1, -1),
                )

    def load(self, src: Sequence[tuple[Any, Any]], n: int, index=None) -> None:
        """Positions ``[0, n)`` from ``src`` (each layer's keys and values, [b, heads, ≥ n, dim]):
        its rows ``index`` (a device tensor) when given, into rows ``0..b-1``; a single row is
        repeated into every row.  The position is then ``n``; the other rows keep what they held
        (their slots are dead)."""
        if n > self.length:
            raise ValueError(f"{n} positions do not fit a static cache of {self.length}")
        layers = self.cache.layers
        if len(layers) != len(src):
            raise ValueError(f"{len(src)} layers given for a cache of {len(layers)}")
        self.allocate(src)
        for layer, (k, v) in zip(layers, src):
            k, v = k[:, :, :n], v[:, :, :n]
            if index is not None:
                k, v = k.index_select(0, index), v.index_select(0, index)
            if k.shape[0] == 1 and self.rows > 1:
                k, v = k.expand(self.rows, -1, -1, -1), v.expand(self.rows, -1, -1, -1)
            b = k.shape[0]
            layer.keys[:b, :, :n].copy_(k)
            layer.values[:b, :, :n].copy_(v)
        self.seek(n)

    def seek(self, n: int) -> None:
        """Set every row's position to ``n`` (what lies beyond is overwritten as tokens come)."""
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.cumulative_length.fill_(int(n))
        self.pos = int(n)

    def feed(self, ids) -> Any:
        """Feed ``ids`` [b, n] (b ≤ rows; the other rows get token 0) at the position, in one
        forward pass; returns the logits after the last of them, [b, vocab] float32."""
        torch = _torch()
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device)
        b, n = ids.shape
        if self.pos + n > self.length:
            raise ValueError(f"{self.pos} + {n} positions do not fit {self.length}")
        if b < self.rows:
            ids = torch.cat([ids, ids.new_zeros((self.rows - b, n))])
        logits = self._forward(ids)
        self.pos += n
        return logits[:b]

    def step(self, tokens: np.ndarray) -> Any:
        """Feed one token per row (``tokens`` [rows]); the logits after it, [rows, vocab] float32
        (a tensor of the caller's: a later step does not overwrite it)."""
        torch = _torch()
        if self.pos + 1 > self.length:
            raise ValueError(f"a static cache of {self.length} positions is full")
        self._tok.copy_(torch.as_tensor(np.asarray(tokens, np.int64).reshape(self.rows, 1)))
        if self._graph is not None:
            self._graph.replay()
            self.stats["forward_calls"] = self.stats.get("forward_calls", 0) + 1
            out = self._out.clone()
        elif self.graphs:
            out = self._capture()
        else:
            out = self._forward(self._tok)
        self.pos += 1
        return out

    def _forward(self, ids) -> Any:
        out = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True, **self._keep)
        self.stats["forward_calls"] = self.stats.get("forward_calls", 0) + 1
        return out.logits[:, -1, :].float()

    def _capture(self) -> Any:
        """Run the step eagerly on a side stream (warm-up: kernels chosen, workspaces allocated),
        then capture it without running it; returns the eager step's logits."""
        torch = _torch()
        here = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(device=self.device)
        side.wait_stream(here)
        with torch.cuda.stream(side):
            out = self._forward(self._tok)
        here.wait_stream(side)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self._out = self._forward(self._tok)
        self.stats["forward_calls"] -= 1  # the capture ran nothing
        self.stats["graph_captures"] = self.stats.get("graph_captures", 0) + 1
        self._graph = graph
        return out


class DecoderPool:
    """Static decoders of one model, kept between uses (module docstring): at most
    :data:`IDLE_MAX` idle ones, the least recently used freed first, and all of them when a new
    one would not fit beside them (on a GPU) or is refused memory."""

    def __init__(
        self, model, *, graphs: bool = False, keep_kw: str | None = None, stats: dict | None = None
    ):
        self.model = model
        self.graphs = bool(graphs)
        self.keep_kw = keep_kw
        self.stats = stats if stats is not None else {}
        self._idle: list[StaticDecoder] = []  # oldest first
        self._layout: list[tuple[Any, Any]] | None = None  # one position of each layer's K, V

    def take(self, rows: int, length: int) -> StaticDecoder:
        """An idle decoder of this shape (its graph with it), else a new one."""
        for i in range(len(self._idle) - 1, -1, -1):
            if (self._idle[i].rows, self._idle[i].length) == (int(rows), int(length)):
                return self._idle.pop(i)
        self.stats["static_decoders"] = self.stats.get("static_decoders", 0) + 1
        dec = StaticDecoder(
            self.model, rows, length, graphs=self.graphs, keep_kw=self.keep_kw, stats=self.stats
        )
        if self._layout is not None:
            torch = _torch()
            if dec.device.type == "cuda" and self._idle:
                # idle caches give way when the new one (and as much again for what loading and
                # decoding it allocates) would not fit beside them
                free, _ = torch.cuda.mem_get_info(dec.device)
                free += torch.cuda.memory_reserved(dec.device)
                free -= torch.cuda.memory_allocated(dec.device)
                if free < 2 * self.nbytes(rows, length):
                    self.clear()
                    torch.cuda.empty_cache()
            try:
                dec.allocate(self._layout)
            except torch.cuda.OutOfMemoryError:
                self.clear()
                torch.cuda.empty_cache()
                dec.allocate(self._layout)
        return dec

    def nbytes(self, rows: int, length: int) -> int:
        """Bytes of a cache of ``rows`` × ``length`` positions (0 before the first is known)."""
        per = sum(k.nbytes + v.nbytes for k, v in self._layout or [])  # one row, one position
        return per * int(rows) * int(length)

    def give(self, decoder: StaticDecoder) -> None:
        """Keep ``decoder`` for a next use of its shape."""
        if self._layout is None and decoder.allocated:
            self._layout = [(k[:1, :, :1].clone(), v[:1, :, :1].clone()) for k, v in decoder.kv()]
        self._idle.append(decoder)
        del self._idle[:-IDLE_MAX]

    def clear(self) -> None:
        """Free every idle decoder (its cache and graph)."""
        self._idle.clear()


class StaticChunk:
    """A chunk decoding in a :class:`StaticDecoder`: live row ``rows[i]`` in slot ``slots[i]``
    (a row that ends leaves its slot dead; the live rows move to a smaller decoder once they fit
    in half of it, and to a longer one when it is full)."""

    def __init__(self, pool: DecoderPool, rows: np.ndarray, dec: StaticDecoder, logits, cap: int):
        self.pool = pool
        self.rows = rows
        self.dec: StaticDecoder | None = dec
        self.slots = np.arange(rows.size)
        self.logits = logits
        self.cap = int(cap)  # the most positions a row can hold (prompt + max_tokens)

    def select(self, keep: np.ndarray) -> None:
        if keep.all():
            return
        if not keep.any():
            self.release()
            return
        torch = _torch()
        sel = torch.as_tensor(np.flatnonzero(keep), device=self.logits.device)
        self.logits = self.logits.index_select(0, sel)
        self.rows, self.slots = self.rows[keep], self.slots[keep]

    @classmethod
    def start(cls, pool: DecoderPool, rows: np.ndarray, prompt, logits, cap: int) -> StaticChunk:
        """The chunk of ``rows`` after the prompt (its cache ``prompt``, one row, repeated;
        ``logits`` those after it, one row per trace); ``cap``: prompt + the token cap."""
        kv, n = kv_source(prompt)
        dec = pool.take(rows.size, length_for(n + 1, cap))
        dec.load(kv, n)
        return cls(pool, rows, dec, logits, cap)

    def feed(self, tok: np.ndarray) -> None:
        """Feed each live row its next token (moving the rows first when the decoder is full or
        they fit in half of it); the logits after it."""
        torch = _torch()
        dec = self.dec
        assert dec is not None
        rows = rows_for(self.rows.size, dec.rows)
        full = dec.pos + 1 > dec.length
        if full or rows < dec.rows:
            length = length_for(dec.pos + 1, self.cap) if full else dec.length
            moved = self.pool.take(rows, length)
            moved.load(dec.kv(), dec.pos, torch.as_tensor(self.slots, device=dec.device))
            self.pool.give(dec)
            self.dec, self.slots, dec = moved, np.arange(self.rows.size), moved
        ids = np.zeros(dec.rows, np.int64)
        ids[self.slots] = tok
        out = dec.step(ids)
        if self.slots.size < dec.rows or (self.slots != np.arange(dec.rows)).any():
            out = out.index_select(0, torch.as_tensor(self.slots, device=dec.device))
        self.logits = out

    def probe_source(self, want: np.ndarray) -> tuple[Any, np.ndarray | None]:
        return self.dec, self.slots[want]

    def release(self) -> None:
        if self.dec is not None:
            self.pool.give(self.dec)
        self.rows, self.dec, self.logits = self.rows[:0], None, None


def probe_decoder(
    pool: DecoderPool, n: int, source, index, prefill: int, new: int
) -> StaticDecoder:
    """A decoder of the pool for ``n`` probes: ``source``'s rows ``index`` (a ``DynamicCache`` or
    a :class:`StaticDecoder`; all rows if None) loaded into slots ``0..n-1``, or nothing
    (``source`` None: the probes prefill from scratch), with room for ``prefill`` tokens fed at
    once and ``new`` decoded (rows and positions in powers of two, so that probes reuse it)."""
    if source is None:
        dec = pool.take(pow2(n), length_for(prefill + new))
        dec.seek(0)
        return dec
    kv, ctx = kv_source(source)
    dec = pool.take(pow2(n), length_for(ctx + prefill + new))
    dec.load(kv, ctx, index)
    return dec
