"""The server backend's trace batches: traces kept as token ids on our side, continued
checkpoint by checkpoint with one request per trace (its own seed each), and the text-prompt
variant that lands on the same checkpoint grid though the server re-tokenizes every request."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...store.problems import Problem
from ..base import ProbeResult, StoredTrace
from ..tokens import (
    TokenTraceBatch,
    window_conf,
)
from .errors import ServerError
from .openai_text import text_cut
from .protocol import TraceKey, generation_seed, probe_seed

log = logging.getLogger(__name__)

#: A question's traces may have at most this share of their confidences stood in for (a token
#: the server sent no usable log-probabilities for takes the confidence of the token before it),
#: beyond :data:`STOOD_IN_FREE` tokens: more, and the confidences would be made up, not measured.
MAX_STOOD_IN_SHARE = 0.05
STOOD_IN_FREE = 8


class ServerTraceBatch(TokenTraceBatch):
    """``n`` traces of one question, continued checkpoint by checkpoint through the server."""

    backend: Any  # the ServerBackend that started it (which imports this module)

    def __init__(self, backend, problem: Problem, n: int, seed: int, first_trace: int):
        super().__init__(backend, problem, n, seed, first_trace)
        #: per trace: log-probabilities the server left out for no reason it has
        #: (:meth:`_count_missing`), which :meth:`_check_stood_in` bounds
        self._missing = np.zeros(self.n, np.int64)

    def _trace(self, j: int) -> int:
        return self.first_trace + int(j)

    def _keys(self, js: Sequence[int]) -> list[TraceKey]:
        """Which trace each request of traces ``js`` belongs to: (seed, qid, trace index), what
        its generation and probe seeds are drawn from (a router keeps a trace on one replica)."""
        return [(self.seed, self.problem.qid, self._trace(j)) for j in js]

    def resume(self, j: int, trace: StoredTrace) -> None:
        """A trace is token ids on our side and each request carries its own seed: taken back
        from its stored ids and confidences, it goes on with the very requests it would have
        sent had it never been stopped."""
        j = int(j)
        if self._ids[j] or self._stopped[j]:
            raise ValueError("resume() of a trace that has advanced")
        ids, confs = trace.token_ids, trace.confs
        if ids is None or confs is None or len(ids) != trace.length or len(confs) != trace.length:
            raise ServerError(
                f"question {self.problem.qid}, trace {self._trace(j)}: a stopped trace is "
                "continued from its token ids and confidences, and its record lacks them"
            )
        self._ids[j] = [int(x) for x in ids]
        self._confs[j] = [float(x) for x in np.asarray(confs, np.float64)]

    def advance(self, target: int) -> None:
        target = min(int(target), self.backend.max_tokens)
        while self._advance_once(target):
            pass

    def _advance_once(self, target: int) -> bool:
        """One request per running trace below ``target`` (up to it, or to the next multiple of
        ``segment``); False when none is left."""
        be = self.backend
        lengths = self.lengths
        run = np.flatnonzero(~self.ended & (lengths < target)).tolist()
        if not run:
            return False
        t0 = time.perf_counter()
        reqs = []
        for j in run:
            n = int(lengths[j])
            end = target if be.segment is None else min(target, (n // be.segment + 1) * be.segment)
            seed = generation_seed(self.seed, self.problem.qid, self._trace(j), n)
            reqs.append((self.prompt + self._ids[j], end - n, seed))
        outs = be.complete(reqs, logprobs=True, traces=self._keys(run))
        be.stats["generate_calls"] += 1
        for j, c in zip(run, outs):
            self._ids[j].extend(c.ids)
            assert c.confs is not None
            self._add_confs(j, c.confs)
            self._count_missing(j, c.confs)
            if c.finished:
                self._eos[j] = True
            be.count("generate", c)
        self._check_stood_in()
        log.debug("to %d: %d requests, %.2f s", target, len(run), time.perf_counter() - t0)
        return True

    def _count_missing(self, j: int, confs: Sequence[float]) -> None:
        """Count the log-probabilities trace ``j``'s last request left out (its last
        ``len(confs)`` tokens) that the server had no reason to leave out.  Some (llama.cpp)
        leave out those of a token after which the text ends inside a multi-byte character
        (:attr:`~.protocol.Protocol.omits_logprobs_inside_characters`); anything else missing is
        the server's fault."""
        ids, base = self._ids[j], len(self._ids[j]) - len(confs)
        inside = self.backend.protocol.omits_logprobs_inside_characters
        for i, v in enumerate(confs):
            if math.isnan(v) and not (inside and self._ends_inside_a_character(ids, base + i)):
                self._missing[j] += 1

    def _ends_inside_a_character(self, ids: list[int], k: int) -> bool:
        """Whether the text of ``ids`` ends inside a character after token ``k`` (a character
        takes at most 4 bytes, so the 4 tokens up to it tell)."""
        tail = self.backend.tokenizer.decode(ids[max(0, k - 3) : k + 1], skip_special_tokens=False)
        return tail.endswith("\ufffd")

    def _check_stood_in(self) -> None:
        """Refuse the question once the server left out, for no reason it has (see
        :meth:`_count_missing`), the log-probabilities of more than :data:`MAX_STOOD_IN_SHARE`
        of its tokens (beyond :data:`STOOD_IN_FREE`): its confidences would be made up, not
        measured.  Every stand-in is counted into the pool's provenance all the same."""
        n, total = int(self._missing.sum()), int(self.lengths.sum())
        if n > STOOD_IN_FREE and n > MAX_STOOD_IN_SHARE * total:
            raise ServerError(
                f"the server at {self.backend.base_url} sent no usable log-probabilities for "
                f"{n:,} of the {total:,} tokens of question {self.problem.qid} so far (more than "
                f"{MAX_STOOD_IN_SHARE * 100:g} %, the most a pool's confidences may be stood in "
                "for): its confidences would be made up; is it sending NaN?"
            )

    def probe(self, idx) -> list[ProbeResult]:
        be = self.backend
        idx = self._probe_targets(idx)
        if idx.size == 0:
            return []
        js = idx.tolist()
        pos = [len(self._ids[j]) for j in js]
        reqs = [
            (
                self.prompt + self._ids[j][:p] + be.suffix_ids,
                be.probe_max_new_tokens,
                probe_seed(self.seed, self.problem.qid, self._trace(j), p),
            )
            for j, p in zip(js, pos)
        ]
        outs = be.complete(reqs, logprobs=False, traces=self._keys(js))
        be.stats["probe_calls"] += 1
        # the server generated each trace so far: the prompt and the trace are its to reuse
        out = [
            be.probe_result(c, len(r[0]), window_conf(self._confs[j], p), len(self.prompt) + p)
            for j, p, r, c in zip(js, pos, reqs, outs)
        ]
        be.check_probe_cache()
        return out


class TextTraceBatch(ServerTraceBatch):
    """The traces of a text-prompt server: each request is the prompt's text + the trace's text
    so far (the server tokenizes it), and each answer's text is tokenized here, so token ids,
    lengths and the checkpoints are ours.  A request of ``m`` tokens may come back as more or
    fewer of ours: a trace keeps at most ``m`` (cut where the text is whole, the rest dropped,
    the end of text with it) and asks again for what is missing, so it still holds exactly the
    checkpoint's tokens there, with a seed of its own per request as ever."""

    def __init__(self, backend, problem: Problem, n: int, seed: int, first_trace: int):
        super().__init__(backend, problem, n, seed, first_trace)
        self.prompt_text = backend.prompt_text(problem.question)

    def _advance_once(self, target: int) -> bool:
        be = self.backend
        lengths = self.lengths
        run = np.flatnonzero(~self.ended & (lengths < target)).tolist()
        if not run:
            return False
        reqs: list[tuple[list[int] | str, int, int | None]] = []
        for j in run:
            n = int(lengths[j])
            end = target if be.segment is None else min(target, (n // be.segment + 1) * be.segment)
            seed = generation_seed(self.seed, self.problem.qid, self._trace(j), n)
            reqs.append((self.prompt_text + self._text(j), end - n, seed))
        outs = be.complete(reqs, logprobs=True, traces=self._keys(run))
        be.stats["generate_calls"] += 1
        for j, (_, want, _), c in zip(run, reqs, outs):
            n = len(self._ids[j])
            k = text_cut(c, int(want), be.max_tokens - n)
            if k == 0 and not c.ids:
                raise ServerError(
                    f"the server returned no text for {want} tokens of question "
                    f"{self.problem.qid}, trace {self._trace(j)} at {n} tokens"
                )
            if k == 0:  # its next character alone would pass the token cap: it ends here
                log.warning(
                    "server backend: question %d, trace %d ends at %d tokens, its next character "
                    "being longer than the %d tokens left",
                    self.problem.qid,
                    self._trace(j),
                    n,
                    be.max_tokens - n,
                )
                self._stopped[j] = True
                continue
            assert c.confs is not None
            if np.isnan(c.confs[0]):  # an answer of the end of text alone: the confidence of the
                # trace's token before it, or 0 (the lowest) for a trace that ends at once
                c.confs[0] = self._confs[j][-1] if self._confs[j] else 0.0
            self._ids[j].extend(c.ids[:k])
            self._add_confs(j, c.confs[:k])
            self._count_missing(j, c.confs[:k])
            if c.finished and k == len(c.ids):
                self._eos[j] = True
            be.count("generate", c, k)
        self._check_stood_in()
        return True

    def probe(self, idx) -> list[ProbeResult]:
        be = self.backend
        idx = self._probe_targets(idx)
        if idx.size == 0:
            return []
        js = idx.tolist()
        pos = [len(self._ids[j]) for j in js]
        reqs: list[tuple[list[int] | str, int, int | None]] = [
            (
                self.prompt_text + self._text(j) + be.probe_suffix,
                be.probe_max_new_tokens,
                probe_seed(self.seed, self.problem.qid, self._trace(j), p),
            )
            for j, p in zip(js, pos)
        ]
        outs = be.complete(reqs, logprobs=False, traces=self._keys(js))
        be.stats["probe_calls"] += 1
        n = len(self.prompt) + len(be.suffix_ids)
        return [
            be.probe_result(c, n + p, window_conf(self._confs[j], p))
            for j, p, c in zip(js, pos, outs)
        ]
