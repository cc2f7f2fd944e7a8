"""Loading a model and its tokenizer, from a model directory, a hub id in the local cache or a
GGUF file (de-quantised): what the transformers engine and the token layer both read, so neither
imports the other for it."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from ..errors import MarsError, install_hint

__all__ = ["convert_gguf", "load_model", "load_tokenizer", "save_model"]


def _torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the transformers backend needs torch and transformers: " + install_hint("transformers")
        ) from exc
    return torch


@contextlib.contextmanager
def _fast_gguf():
    """Speed up transformers' GGUF loading (about 3x): parse each file once, map names once.

    transformers parses a GGUF file once for the tokenizer, once for the config and once for the
    tensors, and rebuilds gguf's tensor-name map for every module; all of it is pure Python and
    takes minutes for a small model on a slow CPU.  Within this context ``gguf.GGUFReader`` returns
    one reader per file and ``gguf.get_tensor_name_map`` is memoised.  transformers imports both
    inside its functions (``from gguf import …``), so patching the module attributes reaches it;
    if a future version does not, this is simply a no-op.
    """
    try:
        import gguf
    except ImportError:
        yield
        return
    orig_reader, orig_map = gguf.GGUFReader, getattr(gguf, "get_tensor_name_map", None)
    readers: dict = {}

    def reader(path, *args, **kwargs):
        key = (os.path.realpath(os.fspath(path)), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = orig_reader(path, *args, **kwargs)
        return readers[key]

    maps: dict = {}

    def name_map(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in maps:
            maps[key] = orig_map(*args, **kwargs)
        return maps[key]

    gguf.GGUFReader = reader
    if orig_map is not None:
        gguf.get_tensor_name_map = name_map
    try:
        yield
    finally:
        gguf.GGUFReader = orig_reader
        if orig_map is not None:
            gguf.get_tensor_name_map = orig_map


def _split_model_path(
    model_path: str | os.PathLike, gguf_file: str | None
) -> tuple[str, str | None]:
    path = os.fspath(model_path)
    if gguf_file is None and path.endswith(".gguf") and os.path.isfile(path):
        return os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    return path, gguf_file


def _resolve_dtype(torch, dtype, device: str):
    if dtype is None:
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    if isinstance(dtype, str):
        if dtype == "auto":
            return "auto"
        try:
            return getattr(torch, dtype)
        except AttributeError:
            raise MarsError(f"unknown torch dtype {dtype!r}") from None
    return dtype


def load_model(
    model_path: str | os.PathLike,
    gguf_file: str | None = None,
    device: str = "cpu",
    dtype: Any = None,
    trust_remote_code: bool = False,
):
    """(model, tokenizer) from a model directory / hub id, or a GGUF file (de-quantised).

    ``model_path`` may be the ``.gguf`` file itself.  The model is put in eval mode on ``device``.
    """
    torch = _torch()
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, gguf_file = _split_model_path(model_path, gguf_file)
    torch_dtype = _resolve_dtype(torch, dtype, device)
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    major = int(transformers.__version__.split(".")[0])
    minor = int(transformers.__version__.split(".")[1])
    dtype_kw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    ctx = _fast_gguf() if gguf_file else contextlib.nullcontext()
    with ctx:
        tokenizer = AutoTokenizer.from_pretrained(
            path, trust_remote_code=trust_remote_code, **extra
        )
        model = AutoModelForCausalLM.from_pretrained(
            path, trust_remote_code=trust_remote_code, **{dtype_kw: torch_dtype}, **extra
        )
    model.to(device)
    model.eval()
    return model, tokenizer


def save_model(model, tokenizer, out_dir: str | os.PathLike) -> Path:
    """Write a loaded (possibly GGUF-de-quantised)
    model and its tokenizer as a plain model directory."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # a GGUF-loaded model carries a quantizer that refuses to serialise; its weights are plain
    # float tensors already, so drop the marker (the written directory loads like any other)
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def convert_gguf(
    gguf_path: str | os.PathLike, out_dir: str | os.PathLike, dtype: Any = "float32"
) -> Path:
    """De-quantise a GGUF file once into a model directory that loads in about a second."""
    model, tokenizer = load_model(gguf_path, dtype=dtype)
    return save_model(model, tokenizer, out_dir)


def load_tokenizer(path: str, gguf_file: str | None = None):
    """A model's tokenizer alone: from a model directory, a hub id in the local cache, or a GGUF
    file (``path`` itself, or ``gguf_file`` inside the directory ``path``)."""
    import contextlib

    from transformers import AutoTokenizer

    path = os.fspath(path)
    if os.path.isfile(path):
        path, gguf_file = os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    with _fast_gguf() if gguf_file else contextlib.nullcontext():
        return AutoTokenizer.from_pretrained(path, **extra)
