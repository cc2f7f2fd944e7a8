"""The one place a backend is built by name: for ``mars generate``, ``mars solve`` and the library.

``make_backend("synthetic", preset=...)``, ``make_backend("transformers" | "sglang",
model=PATH, ...)`` or ``make_backend("server", model=SERVED_NAME, base_url=URL, ...)``.
Real-backend options (sampling, engine, batch size…: the keyword arguments of
:class:`~mars.engines.transformers.TransformersBackend`,
:class:`~mars.engines.sglang.SGLangBackend` or :class:`~mars.engines.server.ServerBackend`)
come from ``options`` (None values ignored) over the JSON object in the environment variable
``MARS_BACKEND_OPTIONS``, e.g. ``MARS_BACKEND_OPTIONS='{"top_k": 20, "batch_size": 8}'``.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

from ..errors import MarsError, first_line, install_hint
from ..store.userfiles import parse_json
from .base import Backend

BACKENDS = ("synthetic", "transformers", "sglang", "server")
#: Options only the server backend has (its command-line flags).
SERVER_OPTIONS = ("base_url", "concurrency", "timeout")
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
    if name not in BACKENDS:
        raise MarsError(f"unknown backend {name!r} ({' | '.join(BACKENDS)})")
    if max_tokens is not None and max_tokens < 1:
        raise MarsError(f"--max-tokens {max_tokens}: must be at least 1")
    if name == "synthetic":
        from .synthetic import DEFAULT_PRESET, SyntheticBackend

        ignored = sorted(k for k, v in options.items() if v is not None)
        if ignored:
            raise MarsError(
                "the synthetic backend has no "
                f"{', '.join('--' + k.replace('_', '-') for k in ignored)} "
                "(its sampling is part of the preset)"
            )
        return SyntheticBackend(
            preset or DEFAULT_PRESET, skill=skill, max_tokens=max_tokens, with_confs=with_confs
        )
    if preset is not None or skill is not None:
        raise MarsError(f"--preset and --skill are for the synthetic backend, not {name}")
    if name != "server":
        misplaced = [k for k in SERVER_OPTIONS if options.get(k) is not None]
        if misplaced:
            raise MarsError(f"--{misplaced[0].replace('_', '-')} is for --backend server")
    if not model and name != "server":
        raise MarsError(f"--backend {name} needs --model (a model directory, hub id or .gguf file)")
    opts = _env_options()
    opts.update({k: v for k, v in options.items() if v is not None})
    if max_tokens is not None:
        opts["max_tokens"] = int(max_tokens)
    try:
        if name == "transformers":
            from .transformers import TransformersBackend

            cls: type[Backend] = TransformersBackend
        elif name == "server":
            from .server import ServerBackend

            cls = ServerBackend
        else:
            from .sglang import SGLangBackend

            cls = SGLangBackend
    except ImportError as exc:
        raise _not_installed(name, exc) from None
    # objects, not options (the server backend's tokenizer is a path: an option)
    objects = {"self", "model_path", "engine", "model", "transport"}
    if name != "server":
        objects.add("tokenizer")
    known = set(inspect.signature(cls.__init__).parameters) - objects
    bad = sorted(set(opts) - known)
    if bad:
        raise MarsError(f"unknown {name} backend options {bad} (known: {', '.join(sorted(known))})")
    try:
        return cls(model, **opts)  # type: ignore[call-arg]
    except ImportError as exc:
        raise _not_installed(name, exc) from None
    except OSError as exc:  # transformers: no such model directory / hub id not cached offline
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MarsError(f"cannot load model {model!r}: {first}") from None


def _not_installed(name: str, exc: ImportError) -> MarsError:
    """A backend whose extra is missing: what failed to import and the command that installs it
    (once: an engine's own message may already hold it)."""
    text, hint = first_line(exc), install_hint(name)
    return MarsError(
        f"backend {name!r} is not installed ({text})" + ("" if hint in text else f"; {hint}")
    )


def _env_options() -> dict:
    raw = os.environ.get("MARS_BACKEND_OPTIONS", "").strip()
    opts = parse_json(raw, "MARS_BACKEND_OPTIONS") if raw else {}
    if not isinstance(opts, dict):
        raise MarsError("MARS_BACKEND_OPTIONS must be a JSON object")
    return opts
