"""The synthetic engine's trace batch: every latent quantity of its traces fixed at start, so
advancing moves a cursor along each trace's answer timeline and a probe reads it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import signal, special

from ...errors import MarsError
from ...store.problems import Problem
from ..base import ProbeResult, StoredTrace, TraceBatch, TraceResult
from .latent import MAXSEG, UNIQ, dataset_key, mix, question_latent, unif, uniforms, wrong_answer

_BLOCK = 64  # tokens per confidence block
_PROBE_SUFFIX_TOKENS = 24
_PROBE_MAX_NEW = 50
_UNPARSED = ("Let me", "\\frac{", "I think the", "the answer is", "\\text{", "")


class SyntheticTraceBatch(TraceBatch):
    """Traces of one question; every latent quantity is fixed at start, advancing moves a cursor."""

    def __init__(self, backend: Any, problem: Problem, n: int, seed: int, first_trace: int):
        self.n = int(n)
        self.problem = problem
        self.seed = int(seed)
        self.first_trace = int(first_trace)
        prm = self.params = backend.params_for(problem.dataset)
        self.with_confs = backend.with_confs
        self.q = q = question_latent(problem, seed, prm)
        self._dkey = dataset_key(problem.dataset)
        n = self.n
        self._U = U = uniforms(self.seed, problem.qid, self.first_trace, n, self._dkey)

        # final answers
        u0 = U[:, 0]
        correct = u0 < q.p_correct
        uw = np.clip((u0 - q.p_correct) / max(1e-12, 1 - q.p_correct), 0, 1 - 1e-12)
        unique = ~correct & (uw < q.eta)
        ud = np.clip((uw - q.eta) / max(1e-12, 1 - q.eta), 0, 1 - 1e-12)
        dcum = np.cumsum(q.distractor_w)
        dist_idx = np.minimum(np.searchsorted(dcum / dcum[-1], ud, side="right"), len(dcum) - 1)
        final = np.where(correct, 0, 1 + dist_idx).astype(np.int64)
        salts = (U[:, 2] * (1 << 40)).astype(np.int64)
        final = np.where(unique, UNIQ + salts, final)
        self._final = final
        self._correct = correct
        self._none = U[:, 7] < q.p_none

        # lengths
        loglen = (
            math.log(q.len_median)
            + prm["len_wrong_shift"] * (~correct)
            + prm["len_trace_sd"] * special.ndtri(np.clip(U[:, 3], 1e-12, 1 - 1e-12))
        )
        natural = np.maximum(np.rint(np.exp(loglen)), prm["min_tokens"]).astype(np.int64)
        self.max_tokens = cap = int(prm["max_tokens"])
        self._natural = natural
        self._Lfin = np.minimum(natural, cap)
        self._cut = natural > cap
        # convergence point: the question's typical fraction, logit-normal spread over its traces
        z_conv = special.ndtri(np.clip(U[:, 4], 1e-12, 1 - 1e-12))
        conv = special.expit(special.logit(q.conv_frac) + prm["conv_trace_sd"] * z_conv) * natural

        # answer timeline: optional attractor segment, exploratory segments, then the final answer
        attracted = (q.attractor >= 0) & (U[:, 5] < q.attractor_share)
        release = (
            prm["attractor_release_lo"]
            + (prm["attractor_release_hi"] - prm["attractor_release_lo"]) * U[:, 6]
        )
        guess = prm["attractor_release_tokens"]
        if guess > 0:  # a guess made while reading, held for a number of tokens (a shorter
            # trace leaves it as far into its length) and left before the trace converges
            rel = np.minimum(guess, natural) * release
            conv = np.where(attracted, np.maximum(conv, rel), conv)
        else:
            rel = conv * release
        self._conv = conv
        offset = np.where(attracted, rel, 0.0)
        dur = -np.log1p(-U[:, 16 : 16 + MAXSEG]) * prm["seg_tokens"]
        starts = offset[:, None] + np.concatenate(
            [np.zeros((n, 1)), np.cumsum(dur[:, :-1], axis=1)], axis=1
        )
        ua = U[:, 16 + MAXSEG : 16 + 2 * MAXSEG]
        pu = prm["explore_unique"]
        kp = max(prm["explore_own_pow"], 1e-3)
        rel_t = np.clip(starts / np.maximum(conv, 1.0)[:, None], 0.0, 1.0)
        pf = np.minimum((kp + 1) * prm["explore_own_final"] * rel_t**kp, 1 - pu)
        ecum = np.cumsum(q.explore_w)
        ue = np.clip((ua - pf - pu) / np.maximum(1e-12, 1 - pf - pu), 0, 1 - 1e-12)
        pool = q.explore_codes[
            np.minimum(np.searchsorted(ecum / ecum[-1], ue, side="right"), len(ecum) - 1)
        ]
        seg_salt = (ua * (1 << 60)).astype(np.int64) & ((1 << 40) - 1)
        seg_code = np.where(ua < pf, final[:, None], np.where(ua < pf + pu, UNIQ + seg_salt, pool))
        all_starts = np.concatenate([np.zeros((n, 1)), starts, conv[:, None]], axis=1)
        att_code = q.attractor if q.attractor >= 0 else 0
        all_codes = np.concatenate([np.full((n, 1), att_code), seg_code, final[:, None]], axis=1)
        valid = np.concatenate(
            [
                attracted[:, None] & (rel[:, None] > 0),
                starts < conv[:, None],
                np.ones((n, 1), bool),
            ],
            axis=1,
        )
        # a non-attracted trace whose exploration starts at 0 has an empty attractor slot (invalid)
        st = np.floor(all_starts[valid]).astype(np.int64)
        tr = np.broadcast_to(np.arange(n)[:, None], valid.shape)[valid]
        codes = all_codes[valid]
        # keep, within a trace, the last segment starting at a given token, and sort
        key = tr.astype(np.int64) * (1 << 40) + st
        order = np.argsort(key, kind="stable")
        key, codes, tr, st = key[order], codes[order], tr[order], st[order]
        keep = np.append(key[1:] != key[:-1], True)
        self._seg_key, self._seg_code, self._seg_trace, self._seg_start = (
            key[keep],
            codes[keep],
            tr[keep],
            st[keep],
        )
        self._seg_off = np.searchsorted(self._seg_trace, np.arange(n + 1))

        self._hkey = (U[:, 10] * (1 << 53)).astype(np.uint64)
        self._pos = np.zeros(n, np.int64)
        self._stopped = np.zeros(n, bool)
        self._confs: list[np.ndarray | None] = [None] * n
        self._block_cs: list[np.ndarray | None] = [None] * n
        self._strings = dict(q.vocab)

    # -- interface -----------------------------------------------------------------------------

    @property
    def lengths(self) -> np.ndarray:
        return self._pos.copy()

    @property
    def ended(self) -> np.ndarray:
        return (self._pos >= self._Lfin) | self._stopped

    def advance(self, target: int) -> None:
        run = ~self.ended
        self._pos[run] = np.maximum(self._pos[run], np.minimum(int(target), self._Lfin[run]))

    def stop(self, idx) -> None:
        self._stopped[np.asarray(idx, dtype=np.int64)] = True

    def resume(self, j: int, trace: StoredTrace) -> None:
        """A synthetic trace is a function of (preset, seed, question, trace): taking it back is
        moving its cursor to where it was stopped (a stored trace longer than the one rebuilt is
        refused: another preset or seed)."""
        j, n = int(j), int(trace.length)
        if self._pos[j] or self._stopped[j]:
            raise ValueError("resume() of a trace that has advanced")
        if n > self._Lfin[j]:
            raise MarsError(
                f"question {self.problem.qid}, trace {self.first_trace + j}: the stopped trace "
                f"({n} tokens) is longer than the one seed {self.seed} gives ({self._Lfin[j]})"
            )
        self._pos[j] = n

    def probe(self, idx) -> list[ProbeResult]:
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size == 0:
            return []
        pos = self._pos[idx]
        codes, none = self.probe_codes(idx, pos)
        qtok = self.q.question_tokens
        out = []
        for j, p, c, nn in zip(idx.tolist(), pos.tolist(), codes.tolist(), none.tolist()):
            conf = self._window_conf(j, p) if self.with_confs else None
            if nn:
                frag = _UNPARSED[int(self._hkey[j] ^ np.uint64(p)) % len(_UNPARSED)]
                out.append(
                    ProbeResult(
                        None,
                        "\\boxed{" + frag,
                        conf,
                        qtok + p + _PROBE_SUFFIX_TOKENS,
                        qtok + p,
                        _PROBE_MAX_NEW,
                    )
                )
            else:
                a = self.answer_string(c)
                out.append(
                    ProbeResult(
                        a,
                        "\\boxed{" + a + "}",
                        conf,
                        qtok + p + _PROBE_SUFFIX_TOKENS,
                        qtok + p,
                        min(_PROBE_MAX_NEW, 2 + (len(a) + 2) // 3),
                    )
                )
        return out

    def result(self, j: int) -> TraceResult:
        j = int(j)
        length = int(self._pos[j])
        complete = length >= self._Lfin[j]
        finished = bool(complete and not self._cut[j])
        code = (
            int(self.final_codes()[j]) if complete else -1
        )  # stopped early (live mode): no answer
        final = self.answer_string(code) if code >= 0 else None
        confs = self._trace_confs(j)[:length] if self.with_confs else None
        return TraceResult(
            length=length,
            final_answer=final,
            finished=finished,
            confs=confs,
            text=self._text(j, length, final),
        )

    # -- latent access (calibration, tests) ----------------------------------------------------

    def final_codes(self) -> np.ndarray:
        """Final answer code of every trace run to its end (-1: no answer). A finished trace
        answers its latent final answer unless it is a no-answer trace; a trace cut at the cap
        keeps the answer it held there with probability ``cut_boxed_prob``."""
        if getattr(self, "_final_codes", None) is None:
            fc = np.where(self._none, -1, self._final)
            idx = np.flatnonzero(self._cut)
            if idx.size:
                held = self.timeline_codes(idx, self._Lfin[idx] - 1)
                fc[idx] = np.where(self._U[idx, 8] < self.params["cut_boxed_prob"], held, -1)
            self._final_codes = fc
        return self._final_codes

    def timeline_codes(self, idx: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Answer code held by traces ``idx`` at token ``pos`` (no probe noise)."""
        q = idx.astype(np.int64) * (1 << 40) + np.asarray(pos, np.int64)
        k = np.searchsorted(self._seg_key, q, side="right") - 1
        return self._seg_code[k]

    def probe_codes(self, idx: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Probe answer codes and unparseable flags of traces ``idx`` at ``pos`` (vectorised)."""
        prm = self.params
        codes = self.timeline_codes(idx, pos)
        h1 = mix(self._hkey[idx] ^ mix(np.asarray(pos, np.uint64)))
        h2 = mix(h1)
        h3 = mix(h2)
        p = np.asarray(pos, np.float64)
        p_err = np.where(p < self._conv[idx], prm["err_explore"], prm["err_converged"]) + prm[
            "err_early"
        ] * (p / max(1.0, prm["err_early_tokens"])) * np.exp(
            1 - p / max(1.0, prm["err_early_tokens"])
        )
        none = unif(h1) < p_err
        noisy = unif(h2) < prm["probe_noise"]
        if noisy.any():
            ecum = np.cumsum(self.q.explore_w)
            pick = np.minimum(
                np.searchsorted(ecum / ecum[-1], unif(h3[noisy]), side="right"), len(ecum) - 1
            )
            codes = codes.copy()
            codes[noisy] = self.q.explore_codes[pick]
        return codes, none

    def answer_string(self, code: int) -> str:
        code = int(code)
        s = self._strings.get(code)
        if s is None:
            s = self._strings[code] = wrong_answer(self.q.truth, code - UNIQ)
        return s

    @property
    def latent(self) -> dict:
        """Latent per-trace quantities (for calibration and tests; not part of the interface)."""
        return {
            "natural_length": self._natural,
            "length": self._Lfin,
            "cut": self._cut,
            "convergence": self._conv,
            "final_code": self._final,
            "correct": self._correct,
            "no_answer": self._none,
            "p_correct": self.q.p_correct,
            "attractor": self.q.attractor,
        }

    # -- internals -------------------------------------------------------------------------------

    def _changes(self, j: int) -> np.ndarray:
        """Token positions where trace j changes its answer (excluding token 0)."""
        a, b = self._seg_off[j], self._seg_off[j + 1]
        st, cd = self._seg_start[a:b], self._seg_code[a:b]
        if st.size < 2:
            return st[:0]
        return st[1:][cd[1:] != cd[:-1]]

    def _trace_confs(self, j: int) -> np.ndarray:
        c = self._confs[j]
        if c is not None:
            return c
        prm = self.params
        L = int(self._Lfin[j])
        rng = np.random.default_rng(
            np.random.SeedSequence(
                [self.seed, self.problem.qid, self.first_trace + j, self._dkey], spawn_key=(1,)
            )
        )
        nb = -(-L // _BLOCK)
        x = (np.arange(nb) + 0.5) * _BLOCK
        rho = prm["conf_conv_corr"]
        z_t = special.ndtri(min(max(self._U[j, 9], 1e-9), 1 - 1e-9))
        if rho:
            z_t = math.sqrt(1 - rho * rho) * z_t - rho * special.ndtri(
                min(max(self._U[j, 4], 1e-12), 1 - 1e-12)
            )
        level = (
            prm["conf_level"]
            + prm["conf_trace_sd"] * z_t
            + prm["conf_correct_bonus"] * float(self._correct[j])
            + prm["conf_hard_slope"] * self.q.hardness
        )
        lv = np.full(nb, level)
        lv += prm["conf_explore_penalty"] * (x < self._conv[j])
        phi, sd = prm["conf_ar_phi"], prm["conf_ar_sd"]
        e = rng.standard_normal(nb)
        e[1:] *= sd * math.sqrt(max(0.0, 1 - phi * phi))
        e[0] *= sd
        lv += signal.lfilter([1.0], [1.0, -phi], e)
        ch = self._changes(j)
        if ch.size:
            depth = prm["conf_dip_depth"] * (0.5 + rng.random(ch.size))
            w = prm["conf_dip_tokens"]
            ch = ch - prm["conf_dip_lead"]
            lo = np.searchsorted(x, ch - 4 * w)
            hi = np.searchsorted(x, ch + 4 * w)
            for c0, d, a, b in zip(ch.tolist(), depth.tolist(), lo.tolist(), hi.tolist()):
                lv[a:b] -= d * np.exp(-0.5 * ((x[a:b] - c0) / w) ** 2)
        tok = rng.standard_exponential(nb * _BLOCK, dtype=np.float32)
        tok *= np.float32(-prm["conf_token_scale"])
        blocks = tok.reshape(nb, _BLOCK)
        blocks += lv.astype(np.float32)[:, None]
        np.clip(tok, prm["conf_floor"], prm["conf_ceil"], out=tok)
        c = self._confs[j] = tok[:L].astype(np.float16)
        # block prefix sums of the stored (float16) values: window means for probes
        bs = np.zeros(nb + 1)
        np.cumsum(
            c[: (L // _BLOCK) * _BLOCK].reshape(-1, _BLOCK).sum(axis=1, dtype=np.float64),
            out=bs[1 : L // _BLOCK + 1],
        )
        self._block_cs[j] = bs
        return c

    def _window_conf(self, j: int, p: int, w: int = 2048) -> float | None:
        """Mean confidence of tokens [p - w, p) of trace j (the probe's ``conf``)."""
        c = self._trace_confs(j)
        a = max(0, p - w)
        if p <= a:
            return None
        if a % _BLOCK == 0 and p % _BLOCK == 0 and p <= (len(c) // _BLOCK) * _BLOCK:
            bs = self._block_cs[j]
            assert bs is not None  # set by _trace_confs
            return float((bs[p // _BLOCK] - bs[a // _BLOCK]) / (p - a))
        return float(c[a:p].astype(np.float64).mean())

    def _text(self, j: int, length: int, final: str | None) -> str:
        a, b = self._seg_off[j], self._seg_off[j + 1]
        st, cd = self._seg_start[a:b], self._seg_code[a:b]
        seen = [self.answer_string(int(c)) for s, c in zip(st.tolist(), cd.tolist()) if s < length]
        path = [s for k, s in enumerate(seen) if k == 0 or s != seen[k - 1]]
        if len(path) > 8:
            path = [*path[:3], "...", *path[-4:]]
        body = (
            f"<think>[synthetic trace {self.first_trace + j} of question {self.problem.qid}: "
            f"{length} tokens; answers considered: {' -> '.join(path) or '-'}]</think>\n"
        )
        return body + (
            f"The answer is \\boxed{{{final}}}." if final is not None else "[no final answer]"
        )

    def close(self) -> None:
        self._confs = [None] * self.n
        self._block_cs = [None] * self.n
