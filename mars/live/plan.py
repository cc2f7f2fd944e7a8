"""How one question is solved live, decided once: :class:`LivePlan`.

Every edge that starts a live run — `mars solve` (:func:`plan_for`, once the engine's token cap
is known), ``mars serve`` (once the question's context is known), the library — builds one plan,
every check done there; the live loop (:func:`mars.live.solve`), the audit that runs a question on
and the writers of its records take it whole, so the method, the sizes, the grid and the knobs are
read and checked in one place, and the run's parameters (the ``live`` block of its manifest,
:meth:`LivePlan.params`) are written from it by one function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..engines.base import Backend
from ..engines.generate import backend_info, token_cap
from ..errors import UsageError
from ..method.learned import Calibration
from ..method.registry import DEFAULT_METHOD, Method, check_calibrated, live_method
from ..method.settings import Settings
from ..store import schema
from ..store.grid import Grid
from .records import live_grid, live_settings
from .stepper import Stopper, Warmup


@dataclass(frozen=True, eq=False)
class LivePlan:
    """One question's live run, checked: the method, its ``traces`` (N, the main traces) after
    ``warmup`` (W) traces, the traces' ``seed``, the checkpoint ``grid`` up to ``max_tokens``, the
    rule's ``knobs`` (as given) and the walk's ``settings`` they make, and the ``calibration``
    MARS2 reads instead of a warmup. Build it with :meth:`build` (or :meth:`capped`)."""

    method: Method
    traces: int
    warmup: int
    seed: int
    grid: Grid  # spacing, 2·spacing, … ≤ max_tokens
    max_tokens: int
    settings: Settings
    knobs: dict = field(default_factory=dict)
    calibration: Calibration | None = None

    @classmethod
    def build(
        cls,
        method: str | Method = DEFAULT_METHOD,
        *,
        traces: int = 64,
        warmup: int = 16,
        seed: int = 0,
        spacing: int = schema.CHECKPOINT_SPACING,
        max_tokens: int,
        knobs: dict | None = None,
        calibration: Calibration | None = None,
    ) -> LivePlan:
        """The plan, every part checked with the command line's one-line messages."""
        m = live_method(method)
        settings = live_settings(traces, warmup, seed, spacing, None, dict(knobs or {}))
        plan = cls.capped(m, settings, knobs or {}, max_tokens, calibration)
        check_live_calibration(calibration, m, warmup)
        return plan

    @classmethod
    def capped(
        cls,
        method: Method,
        settings: Settings,
        knobs: dict,
        max_tokens: int,
        calibration: Calibration | None = None,
    ) -> LivePlan:
        """The plan of a method and settings already checked (:func:`live_settings`, what a
        served request is read into before its token cap is known), its grid fitted to
        ``max_tokens``: only the grid is checked."""
        assert settings.spacing is not None  # a live run's settings have its spacing
        return cls(
            method=method,
            traces=int(settings.budget),
            warmup=int(settings.warmup),
            seed=int(settings.seed),
            grid=live_grid(settings.spacing, int(max_tokens)),
            max_tokens=int(max_tokens),
            settings=settings,
            knobs=dict(sorted(knobs.items())),
            calibration=calibration,
        )

    @property
    def spacing(self) -> int:
        return self.grid.spacing

    @cached_property
    def checkpoints(self) -> np.ndarray:
        """The grid's checkpoints: spacing, 2·spacing, … ≤ max_tokens."""
        return self.grid.checkpoints()

    def stopper(self, warmup: Warmup | None = None, memo: dict | None = None) -> Stopper:
        """The library's stopper of this plan (:class:`mars.Stopper`): its method, its N traces
        over its grid, its settings, and its calibration (then no ``warmup``)."""
        return Stopper(
            self.method,
            self.traces,
            self.checkpoints,
            None if self.calibration is not None else warmup,
            settings=self.settings,
            memo=memo,
            calibration=self.calibration,
        )

    def params(
        self,
        generator: str,
        backend: Backend,
        dataset: Any,
        compare_full: bool = False,
        **more: Any,
    ) -> dict:
        """The run's parameters, the ``live`` block of its manifest (what `mars replay` reads
        to re-decide it): who wrote it, the engine, the plan, then ``more``."""
        params = {
            "generator": generator,
            **backend_info(backend),
            "method": self.method.name,
            "seed": self.seed,
            "n_traces": self.traces,
            "warmup": self.warmup,
            "spacing": self.spacing,
            "max_tokens": self.max_tokens,
            "settings": dict(self.knobs),
            "compare_full": bool(compare_full),
            "dataset": dataset,
            **more,
        }
        if self.calibration is not None:  # only then: earlier runs' parameters stay as they were
            params["calibration"] = self.calibration.digest
        return params


def plan_for(
    backend: Backend,
    method: str | Method = DEFAULT_METHOD,
    *,
    n_traces: int = 64,
    warmup: int = 16,
    seed: int = 0,
    spacing: int = schema.CHECKPOINT_SPACING,
    max_tokens: int | None = None,
    calibration: Calibration | None = None,
    **knobs: Any,
) -> LivePlan:
    """The plan of a live run on ``backend`` (`mars solve`'s options and the library's keywords):
    ``max_tokens`` None is the backend's own cap; ``knobs`` are
    :data:`mars.method.settings.LIVE_KEYS` settings."""
    return LivePlan.build(
        method,
        traces=n_traces,
        warmup=warmup,
        seed=seed,
        spacing=spacing,
        max_tokens=token_cap(backend, max_tokens),
        knobs=knobs,
        calibration=calibration,
    )


def check_live_calibration(calibration: Calibration | None, method: Method, warmup: int) -> None:
    """A calibration replaces the warmup and serves MARS2 under self-consistency (one line)."""
    if calibration is None:
        return
    if warmup:
        raise UsageError(f"--warmup {warmup}: a calibration replaces the warmup (give --warmup 0)")
    check_calibrated(method, calibration)


def pool_manifest(params: dict, **more: Any) -> dict:
    """The manifest of a live run's pool (``pool.json``, which `mars simulate` reads as any pool)
    from its parameters: theirs but for what only the live run reads, its trace count W + N,
    ``more``, and the parameters whole under ``live``."""
    return {
        **{
            k: v
            for k, v in params.items()
            if k not in ("settings", "method", "warmup", "compare_full")
        },
        "n_traces": int(params["warmup"] + params["n_traces"]),
        **more,
        "live": params,
    }
