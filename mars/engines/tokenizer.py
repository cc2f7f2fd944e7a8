"""Where the server backend's tokenizer comes from, and what each source needs installed.

The server backend keeps traces as token ids, so it needs the served model's tokenizer. Three
sources, each checked before it is used (:func:`tokenizer_needs`):

* **the server's own** (``tokenizer=server``): ``POST /tokenize`` and ``/detokenize``, which
  llama.cpp's ``llama-server`` and vLLM both serve, and the chat template the server applies
  (llama.cpp ``/apply-template``; vLLM ``/tokenize`` of the messages). Needs nothing beyond the
  HTTP client: a llama.cpp user need not install PyTorch. :class:`ServerTokenizer`.
* **a tokenizer folder or a ``tokenizer.json`` file** (``tokenizer=PATH``): transformers, which
  reads it with the ``tokenizers`` library, no PyTorch (a ``tokenizer_config.json`` beside a
  ``tokenizer.json`` gives the chat template).
* **a GGUF file** (what llama.cpp reports it serves, the default source there): transformers reads
  the tokenizer out of the GGUF, which needs ``gguf`` and PyTorch too.

When the default source needs what is not installed and the server can tokenize, the server's own
tokenizer is taken, and said in one log line; a source asked for by name that needs what is not
installed is one line naming the missing packages.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Sequence
from typing import Any

from ..errors import MarsError

#: What the ``tokenizer=`` option takes to mean the server's own tokenizer.
SERVER = "server"
#: Special-token markup in a chat template (``<|im_start|>``, ``<|eot_id|>``, ``</s>``...).
_MARKUP = re.compile(r"<\|[^|<>\s]{1,40}\|>|</?s>")


def is_gguf(source: str) -> bool:
    """A GGUF file (what transformers can read a tokenizer out of only with gguf and torch)."""
    return source.lower().endswith(".gguf") or (
        os.path.isfile(source) and not source.lower().endswith(".json")
    )


def tokenizer_needs(source: str) -> tuple[str, ...]:
    """The modules loading a tokenizer from ``source`` needs (``server``: none)."""
    if source == SERVER:
        return ()
    if is_gguf(source):
        return ("transformers", "gguf", "torch")
    return ("transformers",)


def missing_modules(names: Sequence[str]) -> list[str]:
    """The modules of ``names`` that cannot be imported here (without importing them)."""
    out = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a module set to None in sys.modules, a broken parent
            found = False
        if not found:
            out.append(name)
    return out


def describe_source(source: str) -> str:
    if source == SERVER:
        return "the server's own tokenizer"
    return f"the tokenizer of {'the GGUF file ' if is_gguf(source) else ''}{source!r}"


def load_local(source: str):
    """A tokenizer from a model folder, hub id, ``tokenizer.json`` file or GGUF file (transformers;
    the caller has checked :func:`tokenizer_needs`)."""
    from .models import load_tokenizer

    if os.path.isfile(source) and source.lower().endswith(".json"):
        folder = os.path.dirname(os.path.abspath(source))
        if os.path.basename(source) == "tokenizer.json" and os.path.isfile(
            os.path.join(folder, "tokenizer_config.json")
        ):
            return load_tokenizer(folder)
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast(tokenizer_file=source)
    return load_tokenizer(source)


class ServerTokenizer:
    """The served model's tokenizer, asked over HTTP (``/tokenize``, ``/detokenize``, the chat
    template): the part of a transformers tokenizer the server backend uses.  How each question
    is asked and its answer read is the server's :class:`~mars.engines.server.Protocol`'s
    (:attr:`~mars.engines.server.Protocol.serves_tokenizer`).

    ``skip_special_tokens`` drops the begin- and end-of-text tokens and the special tokens the
    chat template writes (``<|im_start|>``...): the server renders every token as text, and does
    not say which are special. ``request(path, body)`` is the backend's ``(status, JSON)``.
    """

    def __init__(self, protocol, request, report: dict):
        if not protocol.serves_tokenizer:  # the backend says which do, before it gets here
            raise MarsError(f"a {protocol.kind} server's tokenizer cannot be asked over HTTP")
        self.protocol, self.model, self._request = protocol, protocol.model, request
        self.kind = protocol.kind
        self.chat_template: str | None = protocol.chat_template(report)
        n_vocab = protocol.n_vocab(report)
        self._n_vocab = int(n_vocab) if n_vocab else None
        bos, eos = protocol.bos_eos(report)
        self.bos_token_id = self._one_id(bos)
        self.eos_token_id = self._one_id(eos)
        markup, added = protocol.special_markup(self, report)
        marks = set(_MARKUP.findall(markup))
        special = {self._one_id(m) for m in sorted(marks)} | {self.bos_token_id, self.eos_token_id}
        self.all_special_ids = sorted(i for i in special | added if i is not None)
        self._special = frozenset(self.all_special_ids)

    def ask(self, path: str, body: dict) -> dict:
        """The server's JSON object answer to ``POST path``; any other answer is a
        :class:`MarsError`."""
        status, out = self._request(path, body)
        if status != 200 or not isinstance(out, dict):
            raise MarsError(f"the server's {path} answered HTTP {status}: {str(out)[:200]}")
        return out

    def _one_id(self, text: Any) -> int | None:
        if not isinstance(text, str) or not text:
            return None
        ids = self.encode(text, add_special_tokens=False)
        return ids[0] if len(ids) == 1 else None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        tokens = self.protocol.tokens_of(
            self.ask(*self.protocol.tokenize(text, add_special_tokens))
        )
        if not isinstance(tokens, list):
            raise MarsError("the server's /tokenize answered no tokens")
        return [int(t["id"]) if isinstance(t, dict) else int(t) for t in tokens]

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        return {"input_ids": self.encode(text, add_special_tokens=add_special_tokens)}

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        ids = [int(i) for i in ids]
        if skip_special_tokens:
            ids = [i for i in ids if i not in self._special]
        if not ids:
            return ""
        text = self.protocol.text_of(self.ask(*self.protocol.detokenize(ids)))
        if not isinstance(text, str):
            raise MarsError("the server's /detokenize answered no text")
        return text

    def apply_chat_template(
        self, messages: list[dict], add_generation_prompt: bool = True, tokenize: bool = False
    ):
        """The conversation as the server's chat template writes it (text, or its ids)."""
        return self.protocol.apply_template(self, messages, add_generation_prompt, tokenize)

    def __len__(self) -> int:
        if self._n_vocab is None:
            raise MarsError("the server does not say its vocabulary size")
        return self._n_vocab
