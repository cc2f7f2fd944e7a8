"""One question in memory: the flat arrays every pool reader produces, and the error any raises.

Both formats are turned into the same :class:`QuestionData` (numpy buffers plus offsets, never
per-token Python objects), so everything above the storage layer reads one shape; its
:meth:`~QuestionData.content_hash` keys caches and result provenance.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace

import numpy as np

from ...errors import MarsError
from ..schema import FINALS

__all__ = ["MAX_TRACE_LENGTH", "PoolError", "QuestionData"]


class PoolError(MarsError):
    """Bad pool input. The message is one line naming the file, question and trace."""


#: No trace is longer than this many tokens (far beyond any model's context); a larger length is
#: damage, and must not size a buffer.
MAX_TRACE_LENGTH = 1 << 24


@dataclass
class QuestionData:
    """One question's traces as flat numpy buffers (the output of the pool readers)."""

    qid: int
    ground_truth: str
    trace_idx: np.ndarray  # int64 [n]
    lengths: np.ndarray  # int64 [n], generated tokens
    final_answers: list  # [n] str | None
    probe_offsets: np.ndarray  # int64 [n+1] into the flat probe arrays
    probe_positions: np.ndarray  # int64 [total probes]
    probe_codes: np.ndarray  # int32 [total probes], index into probe_strings, -1 = abstained
    probe_strings: list  # unique probe answer strings
    conf_offsets: np.ndarray | None = None  # int64 [n+1]
    conf_values: np.ndarray | None = None  # float16 [total tokens]
    probe_cost: np.ndarray | None = (
        None  # int64 [total probes, 3]: prompt, cached, generated; -1 unknown
    )
    question: str | None = None
    source: str = "<memory>"
    meta: dict = field(default_factory=dict)
    #: int64 [n]: probes the source recorded per trace (-1: unknown; schema.PROBE_STEPS_FIELD)
    probe_steps: np.ndarray | None = None
    #: [total probes]: a probe's raw text where it gave no answer (read for pools that record
    #: probe_steps: Parallel-Probe's evaluation votes with "ERR" or "" as written)
    probe_raw: list | None = None

    @property
    def n_traces(self) -> int:
        return len(self.lengths)

    @property
    def has_confs(self) -> bool:
        return self.conf_values is not None

    def confs(self, j: int) -> np.ndarray:
        """Per-token confidences of trace ``j`` (float16 view)."""
        assert self.conf_values is not None and self.conf_offsets is not None
        return self.conf_values[self.conf_offsets[j] : self.conf_offsets[j + 1]]

    def with_finals(self, finals: str) -> QuestionData:
        """The question with its final answers as ``finals`` says (:data:`FINALS`): for pools of a
        model that does not box its answers (no trace has a final answer, nothing to vote on),
        ``last-probe`` lets a trace without one take the answer of its last probe that gave one.
        The content hash then covers the answers taken, so caches, fits and results made with
        the trace's own answers are not mistaken for these."""
        if finals == "trace":
            return self
        if finals != "last-probe":
            raise ValueError(f"finals {finals!r}: one of {', '.join(FINALS)}")
        out = list(self.final_answers)
        answered = self.probe_codes >= 0
        for j, a in enumerate(out):
            if a:
                continue
            lo, hi = int(self.probe_offsets[j]), int(self.probe_offsets[j + 1])
            given = np.flatnonzero(answered[lo:hi])
            if given.size:  # the last by position (probes are stored in position order)
                last = lo + int(given[np.argmax(self.probe_positions[lo + given])])
                out[j] = self.probe_strings[int(self.probe_codes[last])]
        return replace(self, final_answers=out, meta={**self.meta, "finals": finals})

    def content_hash(self) -> str:
        """Digest of everything the simulator reads; keys caches and result provenance.

        SHA-256 (its first 128 bits): it passes over every token's confidence, and where the CPU
        has SHA instructions it runs 3× faster than BLAKE2b (1.8 against 0.53 GB/s here).
        """
        h = hashlib.sha256()
        h.update(
            json.dumps(
                [self.qid, self.ground_truth, self.final_answers, self.probe_strings]
            ).encode()
        )
        for arr in (
            self.trace_idx,
            self.lengths,
            self.probe_offsets,
            self.probe_positions,
            self.probe_codes,
        ):
            h.update(np.ascontiguousarray(arr).data.cast("B"))
        if self.conf_values is not None:
            h.update(np.ascontiguousarray(self.conf_offsets).data.cast("B"))
            h.update(np.ascontiguousarray(self.conf_values).view(np.uint16).data.cast("B"))
        if self.probe_steps is not None:
            h.update(b"probe_steps")
            h.update(np.ascontiguousarray(self.probe_steps, dtype=np.int64).data.cast("B"))
        return h.hexdigest()[:32]

    def where(self, j: int | None = None) -> str:
        """Location prefix for error messages."""
        loc = f"{self.source}: question {self.qid}"
        if j is not None:
            loc += f", trace {int(self.trace_idx[j])}"
        return loc
