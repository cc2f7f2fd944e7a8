"""The one place a backend is built by name: for every command and the library.

``make_backend("synthetic", preset=...)``, ``make_backend("transformers" | "sglang",
model=PATH, ...)`` or ``make_backend("server", model=SERVED_NAME, base_url=URL, ...)``; the
names and what each takes are the engine registry's (:mod:`mars.engines.registry`).
Real-backend options (sampling, engine, batch size…: the keyword arguments of the engine's
class) come from ``options`` (None values ignored) over the JSON object in the environment
variable ``MARS_BACKEND_OPTIONS``, e.g. ``MARS_BACKEND_OPTIONS='{"top_k": 20, "batch_size": 8}'``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import MarsError
from ..store.userfiles import parse_json
from . import registry
from .base import Backend

BACKENDS = registry.names()
PRESET_DIR = Path(__file__).resolve().parent.parent / "data" / "presets"


def bundled_presets() -> list[str]:
    """Names of the synthetic presets shipped with the package (no import of the backend)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


def make_backend(
    name: str,
    *,
    model: str | None = None,
    preset: str | None = None,
    skill: float | None = None,
    max_tokens: int | None = None,
    with_confs: bool = True,
    **options: Any,
) -> Backend:
    """A backend by name; bad names, options or models are a one-line :class:`MarsError`.

    ``with_confs=False`` spares the synthetic backend computing confidences; real engines always
    return them (generation drops them from the pool when asked).
    """
    engine = registry.get(name)
    if max_tokens is not None and max_tokens < 1:
        raise MarsError(f"--max-tokens {max_tokens}: must be at least 1")
    if engine.build is not None:
        return engine.build(engine, options, max_tokens, with_confs, preset, skill)
    if preset is not None or skill is not None:
        raise MarsError(f"--preset and --skill are for the synthetic backend, not {name}")
    for key, value in options.items():
        other = registry.owner(key)
        if value is not None and other not in (None, engine):
            assert other is not None
            raise MarsError(f"--{key.replace('_', '-')} is for --backend {other.name}")
    if not model and engine.needs_model:
        raise MarsError(f"--backend {name} needs --model (a model directory, hub id or .gguf file)")
    opts = _env_options()
    opts.update({k: v for k, v in options.items() if v is not None})
    if max_tokens is not None:
        opts["max_tokens"] = int(max_tokens)
    cls: Any = engine.load()
    known = engine.options()
    bad = sorted(set(opts) - known)
    if bad:
        raise MarsError(f"unknown {name} backend options {bad} (known: {', '.join(sorted(known))})")
    try:
        return cls(model, **opts)
    except ImportError as exc:
        raise engine.not_installed(exc) from None
    except OSError as exc:  # transformers: no such model directory / hub id not cached offline
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MarsError(f"cannot load model {model!r}: {first}") from None


def _env_options() -> dict:
    raw = os.environ.get("MARS_BACKEND_OPTIONS", "").strip()
    opts = parse_json(raw, "MARS_BACKEND_OPTIONS") if raw else {}
    if not isinstance(opts, dict):
        raise MarsError("MARS_BACKEND_OPTIONS must be a JSON object")
    return opts
