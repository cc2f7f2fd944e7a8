"""The one interface every generation backend implements (synthetic, transformers, SGLang).

A backend starts a *batch*: N traces of one question advanced together. The driver
(:mod:`mars.engines.generate`) moves the batch checkpoint by checkpoint, probes every running trace
at
each checkpoint, and either runs everything to completion (offline pool generation) or stops the
batch when a stopping rule fires (live mode). Offline generation and live MARS therefore take the
very same path through a backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import MarsError, UsageError
from ..method.answers import extract_boxed, normalize_answer
from ..store.problems import Problem


@dataclass
class ProbeResult:
    """What a probe of a partial trace returned, and what it cost when the engine says."""

    answer: str | None  # normalised answer, None when nothing parseable came out
    raw_text: str | None = None
    conf: float | None = None  # mean token confidence of the window before the probe
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    generated_tokens: int | None = None


@dataclass
class TraceResult:
    """A trace as it ended (finished, cut at the cap, or stopped early in live mode)."""

    length: int
    final_answer: str | None
    finished: bool  # True: the model ended the trace itself
    confs: np.ndarray | None = None  # float16 per-token confidence, or None
    text: str | None = None
    token_ids: np.ndarray | None = None  # int32 generated token ids (token-level engines)
    #: confidences stood in for log-probabilities the engine did not send (each the confidence
    #: of the token before it); the pool's provenance records the count
    stood_in: int = 0


@dataclass
class StoredTrace:
    """A generated trace as a pool keeps it: what probing it again needs."""

    trace_idx: int
    length: int
    token_ids: np.ndarray | None = None  # int32, the generator's tokens
    confs: np.ndarray | None = None  # float16 per-token confidence
    text: str | None = None
    final_answer: str | None = None  # None: no answer, or stopped early by a live run


@dataclass
class GeneratorInfo:
    """Who generated the traces being probed: the generation's manifest (backend, model,
    preset, seed, ...) and the question's prompt as the generator tokenised it."""

    manifest: dict
    prompt_ids: list[int] | None = None


class TraceBatch(ABC):
    """N traces of one question that advance together."""

    n: int

    @abstractmethod
    def advance(self, target: int) -> None:
        """Generate until every running trace holds ``target`` tokens or has ended."""

    @property
    @abstractmethod
    def lengths(self) -> np.ndarray:
        """Tokens generated so far per trace (int64 [n])."""

    @property
    @abstractmethod
    def ended(self) -> np.ndarray:
        """True where a trace has ended: end of text, token cap, or stopped (bool [n])."""

    @abstractmethod
    def probe(self, idx: np.ndarray) -> list[ProbeResult]:
        """Ask the given running traces for their current answer, without disturbing them."""

    @abstractmethod
    def stop(self, idx: np.ndarray) -> None:
        """Stop the given traces now (live early stopping); they keep what they generated."""

    @abstractmethod
    def result(self, j: int) -> TraceResult:
        """The record of trace ``j`` once it has ended (or been stopped)."""

    def resume(self, j: int, trace: StoredTrace) -> None:
        """Take trace ``j`` back from where a stopped run left it (``trace``: what the run kept
        of it, its ``length`` tokens), before the batch first advances: the next
        :meth:`advance` generates only what comes after, as the trace would have gone on had it
        never been stopped (its requests keep their own seeds). An engine that cannot refuses in
        one line (the audit of a served question then cannot continue its traces)."""
        raise MarsError(f"the {type(self).__name__} engine cannot continue a stopped trace")

    def confs_so_far(self, j: int) -> np.ndarray | None:
        """Per-token confidences trace ``j`` has generated so far (float16), None without them.

        Live mode reads them at every checkpoint; backends override this with a cheap copy.
        """
        return self.result(j).confs

    def close(self) -> None:  # noqa: B027 - optional hook: a no-op unless the engine holds resources
        """Release engine resources."""


class Backend(ABC):
    """A generation engine."""

    name: str = "backend"
    model: str = ""
    #: two batches of it may advance at once, from two threads (a server: each request its own;
    #: an in-process engine: no): overlapping launches then run side by side
    concurrent_batches: bool = False

    @staticmethod
    def check_start(n_traces: int, seed: int, first_trace: int) -> None:
        """The argument checks every ``start`` shares."""
        if n_traces < 0 or first_trace < 0 or seed < 0:
            raise UsageError("n_traces, first_trace and seed must be non-negative")

    def check_context(self, problem: Problem) -> None:  # noqa: B027 - optional hook: no limit
        """Refuse (one-line :class:`~mars.errors.MarsError`) a question whose longest request
        cannot fit the model's context; engines with a limit override this. Generation and live
        runs call it for every question before any work."""

    #: whether :meth:`reprobe` needs the traces' token ids (the probe stage checks before work)
    reprobe_needs_token_ids: bool = True

    def final_answer(self, text: str | None) -> str | None:
        """A trace's final answer from its text: the last ``\\boxed{…}``, normalised; a served
        question may ask for another format (:class:`mars.serve.upstreams.ServedBackend`)."""
        return normalize_answer(extract_boxed(text or ""))

    def bind_generator(self, manifest: dict) -> object:
        """Prepare to probe the traces of the generation whose pool manifest is ``manifest``
        (token-level engines: how its token ids reach the probe model); the probe stage calls it
        before any check or work."""
        return None

    def check_probe_context(  # noqa: B027 - optional hook
        self, problem: Problem, trace_idx: int, length: int, token_ids: np.ndarray | None = None
    ) -> None:
        """Refuse (one-line :class:`~mars.errors.MarsError`, naming the trace and position) a
        stored trace whose longest probe would not fit the probe model's context (``token_ids``:
        the trace's, when the engine needs them to count)."""

    def reprobe(
        self,
        problem: Problem,
        traces: Sequence[StoredTrace],
        positions: Sequence[np.ndarray],
        generator: GeneratorInfo,
    ) -> list[list[ProbeResult]]:
        """Probe stored traces again: trace ``traces[i]`` at each of ``positions[i]`` (ascending,
        within 0..length). A probe at position d sees the prompt, the first d generated tokens and
        the probe suffix. Returns one list of results per trace, in position order."""
        raise MarsError(f"the {self.name} backend cannot probe stored traces")

    @abstractmethod
    def start(self, problem: Problem, n_traces: int, seed: int, first_trace: int = 0) -> TraceBatch:
        """Launch traces ``first_trace .. first_trace + n_traces - 1`` of ``problem``.

        Trace ``t`` of a question must be reproducible from (seed, qid, t) alone wherever the
        engine allows it, so shards and resumed runs give the same traces.
        """
