"""The engines by name: one :class:`Engine` each, registered once, the one place every command
(``mars generate``, ``probe``, ``solve``, ``serve``) and the library find an engine.

An engine names its class (imported on first use: its extra may not be installed), the package
extra that installs it, and which of the declared options (:mod:`mars.engines.options`) are its
own: another engine given one refuses it in one line, before anything loads.  Everything else
the command line or ``MARS_BACKEND_OPTIONS`` sets must be a keyword of the class's constructor.
An engine that rebuilds its generator from a pool's manifest (the synthetic one, whose traces are
a function of its preset and seed) says how, for the probe stage.  Adding an engine is one
:func:`register` call.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import MarsError, UsageError, first_line, install_hint
from .base import Backend
from .options import BY_NAME, OPTIONS, SERVER

#: constructor parameters that are objects, not options (a test's engine, a transport, ...)
OBJECTS = frozenset({"self", "model_path", "engine", "model", "transport", "tokenizer"})


@dataclass(frozen=True)
class Engine:
    """One engine: ``module:cls`` (relative to :mod:`mars.engines`), its extra, its own options
    (names in :mod:`mars.engines.options`), whether it needs ``--model``, and its special
    builders (None: the class built from the model and the options)."""

    name: str
    module: str
    cls: str
    extra: str
    own: tuple[str, ...] = ()
    needs_model: bool = True
    objects: frozenset[str] = OBJECTS
    #: ``build(engine, options, max_tokens, with_confs, preset, skill)`` instead of the class
    #: with the model and the options (an engine that takes ``--preset`` and ``--skill``)
    build: Callable[..., Backend] | None = None
    #: ``from_pool(manifest, options)``: the engine that generated a pool, for the probe stage
    from_pool: Callable[[dict, dict], Backend] | None = None

    def load(self) -> type[Backend]:
        """The engine's class (a missing extra: one line naming the command that installs it)."""
        try:
            return getattr(importlib.import_module(self.module, __package__), self.cls)
        except ImportError as exc:
            raise self.not_installed(exc) from None

    def options(self) -> set[str]:
        """The keyword options its constructor takes (objects left out)."""
        return set(inspect.signature(self.load().__init__).parameters) - self.objects

    def not_installed(self, exc: ImportError) -> MarsError:
        """What failed to import and the command that installs it (once: an engine's own
        message may already hold it)."""
        text, hint = first_line(exc), install_hint(self.extra)
        return MarsError(
            f"backend {self.name!r} is not installed ({text})"
            + ("" if hint in text else f"; {hint}")
        )


ENGINES: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    """Add an engine by its name; its own options must be declared ones."""
    unknown = [o for o in engine.own if o not in BY_NAME]
    if unknown:
        raise ValueError(f"engine {engine.name}: undeclared options {unknown}")
    ENGINES[engine.name] = engine
    return engine


def names() -> tuple[str, ...]:
    return tuple(ENGINES)


def get(name: str) -> Engine:
    """The engine called ``name``; an unknown name is one line listing the known ones."""
    try:
        return ENGINES[name]
    except KeyError:
        raise UsageError(f"unknown backend {name!r} ({' | '.join(ENGINES)})") from None


def owner(option: str) -> Engine | None:
    """The engine whose own option ``option`` is (None: any engine's)."""
    return next((e for e in ENGINES.values() if option in e.own), None)


# -- the synthetic engine: its sampling is its preset ------------------------------------------


def _no_options(options: dict[str, Any]) -> None:
    ignored = sorted(k for k, v in options.items() if v is not None)
    if ignored:
        raise MarsError(
            "the synthetic backend has no "
            f"{', '.join('--' + k.replace('_', '-') for k in ignored)} "
            "(its sampling is part of the preset)"
        )


def _build_synthetic(engine: Engine, options, max_tokens, with_confs, preset, skill) -> Backend:
    _no_options(options)
    from .synthetic import DEFAULT_PRESET

    cls: Any = engine.load()
    return cls(preset or DEFAULT_PRESET, skill=skill, max_tokens=max_tokens, with_confs=with_confs)


def _synthetic_from_pool(manifest: dict, options: dict[str, Any]) -> Backend:
    """The same preset, skill, cap and parameters: the traces it generated, probed again."""
    if manifest.get("backend") != "synthetic":
        raise MarsError("the synthetic engine can only probe traces it generated itself")
    extra = {k: v for k, v in options.items() if v is not None}
    if extra:
        flags = ", ".join("--" + k.replace("_", "-") for k in extra)
        raise MarsError(f"the synthetic backend has no {flags}")
    cls: Any = ENGINES["synthetic"].load()
    return cls(
        str(manifest.get("preset")),
        skill=manifest.get("skill_override"),
        max_tokens=manifest.get("max_tokens"),
        params=manifest.get("param_overrides") or None,
        with_confs=bool(manifest.get("with_confs", True)),
    )


def _of(config: str) -> tuple[str, ...]:
    """The declared options of one config place."""
    return tuple(o.name for o in OPTIONS if o.config == config)


register(
    Engine(
        "synthetic",
        ".synthetic",
        "SyntheticBackend",
        extra="synthetic",
        own=("skill",),
        needs_model=False,
        build=_build_synthetic,
        from_pool=_synthetic_from_pool,
    )
)
register(
    Engine("transformers", ".transformers", "TransformersBackend", "transformers", own=("decode",))
)
register(Engine("sglang", ".sglang", "SGLangBackend", "sglang", own=("tp_size", "dp_size")))
register(
    Engine(
        "server",
        ".server",
        "ServerBackend",
        "server",
        own=_of(SERVER),
        needs_model=False,  # a server that serves one model needs no --model
        objects=OBJECTS - {"tokenizer"},  # its tokenizer is a path: an option
    )
)
