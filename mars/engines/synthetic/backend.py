"""The synthetic engine: a stand-in reasoning model, parameterised by a preset, behind the same
interface as the real engines."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import MarsError
from ...store.problems import Problem
from ..base import Backend, GeneratorInfo, ProbeResult, StoredTrace
from .batch import SyntheticTraceBatch
from .presets import DEFAULT_PRESET, PARAMS, load_preset, resolve_params


class SyntheticBackend(Backend):
    """A stand-in reasoning model, parameterised by a preset (see :data:`PARAMS`).

    ``skill`` (mean per-trace correctness over questions) and ``max_tokens`` override the preset
    for every dataset; ``params`` overrides any parameter; ``with_confs=False`` skips per-token
    confidences (fast latent-only runs, probe ``conf`` is then None).
    """

    name = "synthetic"

    def __init__(
        self,
        preset: str | dict = DEFAULT_PRESET,
        skill: float | None = None,
        max_tokens: int | None = None,
        params: dict | None = None,
        with_confs: bool = True,
    ):
        self.preset = load_preset(preset)
        self.preset_name = str(self.preset.get("name", "custom"))
        self.model = str(self.preset.get("model") or f"synthetic:{self.preset_name}")
        self.skill = skill
        self.overrides = dict(params or {})
        bad = set(self.overrides) - set(PARAMS)
        if bad:
            raise MarsError(f"unknown synthetic parameters {sorted(bad)}")
        if skill is not None and not 0 < skill < 1:
            raise MarsError(f"skill must lie in (0, 1), got {skill}")
        self._max_tokens = max_tokens
        self.with_confs = with_confs
        self.max_tokens = int(self.params_for("")["max_tokens"])

    def params_for(self, dataset: str) -> dict:
        return resolve_params(
            self.preset,
            dataset,
            **{**self.overrides, "skill": self.skill, "max_tokens": self._max_tokens},
        )

    def start(
        self, problem: Problem, n_traces: int, seed: int, first_trace: int = 0
    ) -> SyntheticTraceBatch:
        self.check_start(n_traces, seed, first_trace)
        return SyntheticTraceBatch(self, problem, n_traces, seed, first_trace)

    #: the synthetic engine rebuilds a trace from (preset, seed, question, trace): no token ids
    reprobe_needs_token_ids = False

    def reprobe(
        self,
        problem: Problem,
        traces: Sequence[StoredTrace],
        positions: Sequence[np.ndarray],
        generator: GeneratorInfo,
    ) -> list[list[ProbeResult]]:
        """Probe stored synthetic traces again at any positions.

        A synthetic trace is a deterministic function of (preset, seed, question, trace index),
        all recorded in its pool, so its latent answer path is rebuilt exactly and probed by the
        very code inline probing runs: at the generation's spacing the probes are the ones
        generation wrote. A stored trace longer than the rebuilt one is refused (another preset
        or seed than the pool's).
        """
        if not traces:
            return []
        seed = int(generator.manifest.get("seed", 0))
        idx = np.array([t.trace_idx for t in traces], np.int64)
        lo = int(idx.min())
        batch = self.start(problem, int(idx.max()) + 1 - lo, seed, first_trace=lo)
        rows = idx - lo
        lengths = np.array([t.length for t in traces], np.int64)
        finals = batch.final_codes()[rows]
        rebuilt = [batch.answer_string(c) if c >= 0 else None for c in finals.tolist()]
        # a trace with an answer ran to its end: its length and answer must be the rebuilt
        # ones; a trace without one may have been stopped early (live runs), never later
        bad = np.flatnonzero(
            (lengths > batch._Lfin[rows])
            | np.array(
                [
                    t.final_answer is not None
                    and (t.length != batch._Lfin[r] or t.final_answer != a)
                    for t, r, a in zip(traces, rows.tolist(), rebuilt)
                ],
                dtype=bool,
            )
        )
        if bad.size:
            i = int(bad[0])
            raise MarsError(
                f"question {problem.qid}, trace {int(idx[i])}: the stored trace ({int(lengths[i])} "
                f"tokens) is not what preset {self.preset_name} with seed {seed} gives "
                f"({int(batch._Lfin[rows[i]])} tokens): probe with the generator's preset and seed"
            )
        pairs = [(int(p), i) for i, ps in enumerate(positions) for p in np.asarray(ps).tolist()]
        pairs.sort()
        out: list[list[ProbeResult]] = [[] for _ in traces]
        k = 0
        while k < len(pairs):
            p = pairs[k][0]
            members = []
            while k < len(pairs) and pairs[k][0] == p:
                members.append(pairs[k][1])
                k += 1
            sel = rows[members]
            batch._pos[sel] = p
            for i, r in zip(members, batch.probe(sel)):
                out[i].append(r)
        return out

    def describe(self) -> dict:
        """Provenance for a pool manifest."""
        return {
            "backend": self.name,
            "preset": self.preset_name,
            "model": self.model,
            "imitates": self.preset.get("imitates", ""),
            "skill_override": self.skill,
            "max_tokens": self.max_tokens,
            "param_overrides": self.overrides,
            "with_confs": self.with_confs,
        }
