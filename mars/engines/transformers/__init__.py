"""The Hugging Face transformers engine (``--backend transformers``): real generation and
KV-cache-reusing probes on CPU or CUDA, with its own sampling loop.  What it does and why:
:mod:`.backend` and docs/backends.md."""

from ..models import convert_gguf, load_model, save_model
from .backend import TransformersBackend
from .batch import TransformersTraceBatch
from .sampling import sample_tokens

__all__ = [
    "TransformersBackend",
    "TransformersTraceBatch",
    "convert_gguf",
    "load_model",
    "sample_tokens",
    "save_model",
]
