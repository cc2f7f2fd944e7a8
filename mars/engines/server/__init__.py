"""Generation and probes through a running inference server over HTTP (``--backend server``).

llama.cpp's ``llama-server``, vLLM and SGLang get token-id prompts (their prefix caches serve each
continuation); an OpenAI-compatible server that takes text only (llama-cpp-python's) gets text.
How each is asked, what an answer may hold and what is recorded: docs/backends.md ("Servers").

The package, one concept a module: :mod:`.transport` (HTTP on a private event loop, bounded) with
:mod:`.retry` (the retry policy) and :mod:`.errors` (typed errors); :mod:`.protocol` (what every
wire protocol shares) and one module per server: :mod:`.llamacpp`, :mod:`.vllm`, :mod:`.sglang`,
:mod:`.openai_text`; :mod:`.connect` (what is asked of a server before any generation),
:mod:`.backend` (:class:`ServerBackend`) and :mod:`.batches` (its trace batches).  What differs
by server is its protocol's, so a new server is one module and its entry in :data:`PROTOCOLS`
(docs/backends.md, "Add a server").
"""

from __future__ import annotations

from .backend import UNCACHED_MIN_TOKENS, UNCACHED_SHARE, ServerBackend
from .batches import MAX_STOOD_IN_SHARE, STOOD_IN_FREE, ServerTraceBatch, TextTraceBatch
from .connect import INFO_TIMEOUT, PROTOCOLS, TOKENIZER_SAMPLE
from .errors import (
    ServerBusy,
    ServerConnectionError,
    ServerError,
    ServerStatusError,
    ServerTimeout,
    ServerUnavailable,
)
from .llamacpp import LlamaCppProtocol
from .openai_text import OpenAITextProtocol
from .protocol import (
    Completion,
    MetricsReading,
    Protocol,
    Sampling,
    TraceKey,
    generation_seed,
    probe_seed,
)
from .retry import MAX_BACKOFF, RETRY_STATUS, RetryPolicy
from .sglang import SGLangProtocol
from .transport import Http, answer_limit, normalise_base_url
from .vllm import VLLMProtocol

__all__ = [
    "INFO_TIMEOUT",
    "MAX_BACKOFF",
    "MAX_STOOD_IN_SHARE",
    "PROTOCOLS",
    "RETRY_STATUS",
    "STOOD_IN_FREE",
    "TOKENIZER_SAMPLE",
    "UNCACHED_MIN_TOKENS",
    "UNCACHED_SHARE",
    "Completion",
    "Http",
    "LlamaCppProtocol",
    "MetricsReading",
    "OpenAITextProtocol",
    "Protocol",
    "RetryPolicy",
    "SGLangProtocol",
    "Sampling",
    "ServerBackend",
    "ServerBusy",
    "ServerConnectionError",
    "ServerError",
    "ServerStatusError",
    "ServerTimeout",
    "ServerTraceBatch",
    "ServerUnavailable",
    "TextTraceBatch",
    "TraceKey",
    "VLLMProtocol",
    "answer_limit",
    "generation_seed",
    "normalise_base_url",
    "probe_seed",
]
