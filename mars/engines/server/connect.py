"""What is asked of a server before any generation (the served model, the kind of server, its
report, the tokenizer and a trial request), so that every way a server can be unfit is one line
before any work rather than a failure mid-run."""

from __future__ import annotations

import logging
import os
from typing import Any

from ...errors import MarsError
from ..endpoint import shown
from ..tokenizer import (
    SERVER,
    ServerTokenizer,
    describe_source,
    load_local,
    missing_modules,
    tokenizer_needs,
)
from ..tokens import (
    CONF_TOP_K,
    PROBE_SUFFIX,
    build_prompt_ids,
    build_prompt_text,
    encode_suffix,
    load_tokenizer,
)
from .errors import ServerError
from .llamacpp import LlamaCppProtocol
from .openai_text import OpenAITextProtocol, token_ends
from .protocol import TEXT, Completion, Protocol, Sampling, one_line, read_int
from .retry import RETRY_STATUS
from .sglang import SGLangProtocol
from .transport import Http, answer_limit, asked_for
from .vllm import VLLMProtocol

log = logging.getLogger(__name__)

#: Deadline (seconds) of the connect-time questions (models, server report, tokenizer check).
INFO_TIMEOUT = 30.0
#: A sample the tokenizer must split as the server does (digits, LaTeX, non-ASCII, the suffix).
TOKENIZER_SAMPLE = "Let x = 3.25; then \\frac{x}{2} ≤ 1.7 — naïve 中文 é." + PROBE_SUFFIX


#: The servers, by :attr:`~.protocol.Protocol.kind` (what ``server=`` takes): what differs by
#: server is its protocol's, so a new one is its module and an entry here (docs/backends.md,
#: "Add a server").
PROTOCOLS: dict[str, type[Protocol]] = {
    p.kind: p for p in (LlamaCppProtocol, VLLMProtocol, SGLangProtocol, OpenAITextProtocol)
}


def owned_by(owner: str) -> type[Protocol] | None:
    """The server whose ``/v1/models`` cards say ``owned_by: owner`` (None: none says so)."""
    return next((p for p in PROTOCOLS.values() if owner in p.owned_by), None)


class ServerConnect:
    """What :class:`~.backend.ServerBackend` asks a server before any generation: the served
    model and kind of server, its own report, the tokenizer (loaded, and checked to split a
    sample as the server does), and a trial request that must come back with what the traces
    need; each failure one line.  A part of the backend, apart only to keep it readable."""

    # set by the backend before it connects
    http: Http
    base_url: str
    api_key_env: str
    sampling: Sampling
    prompt_template: str
    system_prompt: str | None
    probe_suffix: str
    server_bos: int | None
    token_ids_refused: str | None
    # set here
    model: str
    protocol: Protocol
    report: dict[str, Any]
    context_len: int | None
    tokenizer: Any
    tokenizer_source: str | None
    tokenizer_checked: bool
    reports_cached: bool

    def read(self, out: Any, max_new: int, logprobs: bool) -> Completion:
        raise NotImplementedError  # the backend's

    def describe(self) -> dict:
        raise NotImplementedError  # the backend's

    def prompt_ids(self, question: str) -> list[int]:
        """The chat-templated prompt's token ids."""
        return build_prompt_ids(self.tokenizer, question, self.prompt_template, self.system_prompt)

    def _get(self, path: str, *, required: bool) -> Any:
        status, out = self.http.run(
            lambda: self.http.request(
                "GET", path, retry_connect=False, timeout=min(INFO_TIMEOUT, self.http.timeout)
            )
        )
        if status == 200:
            return out
        if status in (401, 403):
            raise ServerError(
                f"the server at {self.base_url} refused the API key (HTTP {status}): set "
                f"{self.api_key_env}"
            )
        if required:
            raise ServerError(
                f"{self.base_url}{path}: HTTP {status} ({self.http.message(out)}): not an "
                "OpenAI-compatible server at this URL?"
            )
        return None

    def _connect(self, model, server, concurrency, tokenizer) -> None:
        listing = self._get("/v1/models", required=True)
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list) or not data:
            raise ServerError(f"{self.base_url}/v1/models lists no model")
        served = {str(m.get("id")): m for m in data if isinstance(m, dict)}
        names = sorted(served)[:20]
        if model is None:
            if len(served) != 1:
                listed = ", ".join(self.http.hide(shown(m, 60)) for m in names)
                raise ServerError(f"the server serves [{listed}]: pass --model NAME")
            model = next(iter(served))
        if model not in served:
            raise ServerError(
                f"--model {shown(model)} is not served at {self.base_url} (served: "
                f"{', '.join(self.http.hide(m, 60) for m in names)})"
            )
        self.model = str(model)
        card = served[self.model]
        known = owned_by(str(card.get("owned_by", "")))
        detect = server == "auto" and known is None
        if server == "auto":
            # llama.cpp, vLLM and SGLang say who they are; any other server is asked at the trial
            # whether it takes token-id prompts (llama-cpp-python's, owned_by "me", does not)
            server = (known or OpenAITextProtocol).kind
        self.protocol = PROTOCOLS[server](self.model)
        report: dict[str, Any] = {"model": card}
        for path in self.protocol.info_paths():
            out = self._get(path, required=False)
            if isinstance(out, dict):
                report[path] = out
        self.report = report
        self.context_len = self.protocol.context_length(report)
        if concurrency is None:  # the server's own (llama.cpp: its slots), else the default
            default = self.protocol.default_concurrency(report)
            if default:
                self.http.limit(default)
        if detect:  # before the tokenizer: a server to refuse is refused at once
            self.token_ids_refused = self._token_ids_refused(str(card.get("owned_by", "")))
        self._load_tokenizer(tokenizer)
        self._check_tokenizer()
        if self.protocol.prompt_mode == TEXT:
            self._check_text_tokenizer()
            self._trial_text()
        else:
            self._trial()
        if not self.reproducible_seeds():
            log.warning("server backend: %s", self.describe()["reproducible"])

    def _load_tokenizer(self, tokenizer) -> None:
        """The model's tokenizer: an object given, ``server`` (the server's own), a path or hub id
        (transformers), by default the model path the server reports, else the served name.
        What a source needs is checked first (:mod:`mars.engines.tokenizer`); a default source
        whose packages are missing gives way to the server's own tokenizer where it has one."""
        #: where the tokenizer came from (a path, hub id or ``server``; None: an object given)
        self.tokenizer_source: str | None = None
        if tokenizer is not None and not isinstance(tokenizer, (str, os.PathLike)):
            self.tokenizer = tokenizer
        else:
            self._load_tokenizer_from(tokenizer)
        self.suffix_ids = encode_suffix(self.tokenizer, self.probe_suffix)
        try:  #: the ids the tokenizer has (0..vocab_size - 1), None when it cannot say
            self.vocab_size: int | None = len(self.tokenizer)
        except (TypeError, MarsError):
            self.vocab_size = None

    def _load_tokenizer_from(self, tokenizer) -> None:
        """The tokenizer of a source named (a path, hub id or ``server``), or the default one."""
        given = tokenizer is not None
        if tokenizer is None:
            reported = self.protocol.model_path(self.report)
            tokenizer = reported if reported and os.path.exists(reported) else self.model
        source = os.fspath(tokenizer)
        missing = missing_modules(tokenizer_needs(source))
        if missing and not given and self.protocol.serves_tokenizer:
            log.info(
                "server backend: the tokenizer is the server's own (/tokenize, /detokenize): %s "
                "needs %s, not installed",
                describe_source(source),
                ", ".join(missing),
            )
            source = SERVER
        elif missing:
            raise ServerError(
                f"{describe_source(source)} needs {', '.join(missing)}, which "
                f"{'is' if len(missing) == 1 else 'are'} not installed: install "
                f"{'it' if len(missing) == 1 else 'them'}, or pass tokenizer=server (the "
                "server's own, llama.cpp and vLLM) or tokenizer=PATH of a tokenizer folder in "
                "MARS_BACKEND_OPTIONS"
            )
        if source == SERVER:
            if self.protocol.prompt_mode == TEXT:
                raise ServerError(
                    "tokenizer=server: a server that takes text prompts only needs the model's "
                    "tokenizer here (pass tokenizer=PATH)"
                )
            if not self.protocol.serves_tokenizer:
                serving = [kind for kind, p in PROTOCOLS.items() if p.serves_tokenizer]
                raise MarsError(
                    f"a {self.protocol.kind} server's tokenizer cannot be asked over HTTP here "
                    f"(only {' and '.join(serving)}'s): pass tokenizer=PATH (a model folder, "
                    "tokenizer.json or GGUF file)"
                )
            self.tokenizer = ServerTokenizer(self.protocol, self._tokenizer_request, self.report)
            self.tokenizer_source = SERVER
        else:
            try:
                if source.lower().endswith(".json") and os.path.isfile(source):
                    self.tokenizer = load_local(source)  # a tokenizers file
                else:
                    self.tokenizer = load_tokenizer(source)
            except ImportError as exc:
                raise ServerError(
                    f"{describe_source(source)} cannot be loaded ({one_line(exc, 120)})"
                ) from None
            except (OSError, ValueError) as exc:
                raise ServerError(
                    f"cannot load the tokenizer of {self.model!r} from {source!r} "
                    f"({one_line(exc, 120)}): pass tokenizer=PATH (a model directory, "
                    "tokenizer.json or GGUF file) or tokenizer=server in MARS_BACKEND_OPTIONS"
                ) from None
            self.tokenizer_source = os.path.abspath(source) if os.path.exists(source) else source

    def _tokenizer_request(self, path: str, body: dict) -> tuple[int, Any]:
        return self.http.run(lambda: self.http.request("POST", path, body, timeout=INFO_TIMEOUT))

    def _check_tokenizer(self) -> None:
        """The tokenizer must split a sample as the server does (when the server can say)."""
        path, body = self.protocol.tokenize(TOKENIZER_SAMPLE)
        status, out = self.http.run(
            lambda: self.http.request(
                "POST", path, body, timeout=min(INFO_TIMEOUT, self.http.timeout)
            )
        )
        tokens = self.protocol.tokens_of(out) if status == 200 else None
        if not isinstance(tokens, list):
            self.tokenizer_checked = False
            return
        theirs = [read_int(t.get("id") if isinstance(t, dict) else t, "a token id") for t in tokens]
        ours = list(self.tokenizer.encode(TOKENIZER_SAMPLE, add_special_tokens=False))
        special = set(getattr(self.tokenizer, "all_special_ids", None) or ()) | {
            getattr(self.tokenizer, "bos_token_id", None)
        }
        if self.protocol.prompt_mode == TEXT and theirs[1:] == ours and theirs[0] in special:
            # llama-cpp-python tokenizes as it tokenizes a prompt: with the BOS the model adds
            self.server_bos = theirs[0]
            theirs = theirs[1:]
        if theirs != ours:
            k = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), None)
            k = min(len(theirs), len(ours)) if k is None else k
            raise ServerError(
                f"the tokenizer {self.tokenizer_source or 'given'} does not tokenize like the "
                f"server's model {self.model!r} (they part at token {k}): pass tokenizer=PATH "
                "of the served model in MARS_BACKEND_OPTIONS"
            )
        self.tokenizer_checked = True

    def _trial(self) -> None:
        """Two tokens with top-20 log-probabilities from a token-id prompt: the server takes
        token ids and returns what the traces need."""
        ids = self.prompt_ids("What is 1 + 1?")
        body = self.protocol.body(ids, 2, self.sampling, 0, logprobs=True)
        status, out = self.http.run(
            lambda: self.http.request(
                "POST",
                self.protocol.path,
                body,
                limit=answer_limit(2, True, ids),
                asked=asked_for(2),
            )
        )
        if status != 200:
            raise ServerError(
                f"the {self.protocol.kind} server at {self.base_url} refused a token-id prompt "
                f"with {CONF_TOP_K} top log-probabilities (HTTP {status}: {self.http.message(out)})"
                + self.protocol.trial_hint(self.http.message(out))
            )
        c = self.read(out, 2, logprobs=True)
        self.reports_cached = c.cached_tokens is not None
        if not self.reports_cached:
            log.warning(
                "server backend: the server reports no cached prompt tokens (vLLM: start it with "
                "--enable-prompt-tokens-details); probe records will not have them"
            )

    def _check_text_tokenizer(self) -> None:
        """Text prompts need a tokenizer that gives back the text it encodes, piece by piece: a
        trace's text is decoded from its ids to make the next request, and the answers' text is
        encoded and its tokens' characters found by decoding them."""
        tok = self.tokenizer
        assert isinstance(self.protocol, OpenAITextProtocol)
        self.protocol.tokenizer = tok
        self.protocol.top_k = self.sampling.top_k
        if getattr(tok, "eos_token_id", None) is None:
            raise ServerError(
                "the tokenizer has no end-of-text token (eos_token_id): with a text-prompt "
                "server the end of a trace is written as that token"
            )
        ids = list(tok.encode(TOKENIZER_SAMPLE, add_special_tokens=False))
        _, whole = token_ends(tok, ids)
        for k in [0, *(k + 1 for k, w in enumerate(whole) if w)]:
            head = tok.decode(ids[:k], skip_special_tokens=True)
            tail = tok.decode(ids[k:], skip_special_tokens=True)
            again = tok.decode(tok.encode(tail, add_special_tokens=False), skip_special_tokens=True)
            if head + tail != TOKENIZER_SAMPLE or again != tail:
                raise ServerError(
                    f"the tokenizer {self.tokenizer_source or 'given'} does not give back the "
                    f"text it encodes when cut at token {k} (a SentencePiece tokenizer's leading "
                    "space?): the server takes only text prompts, and a trace's text would change "
                    "at every request"
                )

    def _token_ids_refused(self, owner: str) -> str:
        """A server of unknown kind: a one-token request from a token-id prompt (ids any
        vocabulary has; a 500 not tried again: llama-cpp-python answers a prompt that is not
        text with a 500).  One that takes it is refused (which server it is decides how token ids
        are read back); the reason one refuses it is returned."""
        body = {"model": self.model, "prompt": [1, 2, 3], "max_tokens": 1, "temperature": 0.0}
        status, out = self.http.run(
            lambda: self.http.request(
                "POST",
                OpenAITextProtocol.path,
                body,
                retry_status=RETRY_STATUS - {500},
                limit=answer_limit(1, False),
                asked="a request of 1 token",
            )
        )
        if status == 200:
            raise ServerError(
                f"the server at {self.base_url} (owned_by {owner!r}) takes token-id prompts but "
                "does not say which server it is: pass server=vllm, sglang or llama.cpp in "
                "MARS_BACKEND_OPTIONS if it is one of them, or server=openai to send text prompts"
            )
        return f"HTTP {status}: {self.http.message(out)}"

    def _trial_text(self) -> None:
        """Two tokens with top-20 log-probabilities from a text prompt: the server takes text
        and returns what the traces need (20 log-probabilities for a token, text offsets)."""
        p = self.protocol
        body = p.body(self.prompt_text("What is 1 + 1?"), 2, self.sampling, 0, logprobs=True)
        status, out = self.http.run(
            lambda: self.http.request(
                "POST",
                p.path,
                body,
                limit=answer_limit(2, True, body["prompt"]),
                asked=asked_for(2),
            )
        )
        refused = self.token_ids_refused
        if status != 200:
            raise ServerError(
                f"the server at {self.base_url} refused "
                + (f"a token-id prompt ({refused}) and " if refused else "")
                + f"a text prompt with {CONF_TOP_K} top log-probabilities (HTTP {status}: "
                f"{self.http.message(out)})"
            )
        c = self.read(out, 2, logprobs=True)
        top = out["choices"][0]["logprobs"]["top_logprobs"]
        most = max((len(t) for t in top if isinstance(t, dict)), default=0)
        if most < CONF_TOP_K:
            raise ServerError(
                f"/v1/completions: {most} top log-probabilities for a token, not {CONF_TOP_K} "
                "(the confidence is the mean of 20)"
            )
        self.reports_cached = c.cached_tokens is not None
        if not self.tokenizer_checked:  # no tokenize endpoint: the prompt's count at least
            ours = len(self.prompt_ids("What is 1 + 1?"))
            if c.prompt_tokens is not None and c.prompt_tokens not in (ours, ours + 1):
                raise ServerError(
                    f"the tokenizer {self.tokenizer_source or 'given'} counts {ours} tokens in "
                    f"a prompt the server counts {c.prompt_tokens}: pass tokenizer=PATH of the "
                    "served model in MARS_BACKEND_OPTIONS"
                )
            log.warning(
                "server backend: the server has no tokenize endpoint: the tokenizer %s is "
                "checked against the server's prompt token count only",
                self.tokenizer_source or "given",
            )
        log.info(
            "server backend: the server at %s takes text prompts only (%s): each request's "
            "prompt goes as text, and the answers' text is tokenized here",
            self.base_url,
            refused or "server=openai",
        )

    def prompt_text(self, question: str) -> str:
        """The chat-templated prompt as text, as the token-id prompt is built; without its BOS
        when the server adds one to every text prompt (so the model sees it once)."""
        text = build_prompt_text(self.tokenizer, question, self.prompt_template, self.system_prompt)
        bos = self.server_bos
        if bos is not None and self.prompt_ids(question)[:1] == [bos]:
            mark = self.tokenizer.decode([bos], skip_special_tokens=False)
            if mark and text.startswith(mark):
                text = text[len(mark) :]
        return text

    def reproducible_seeds(self) -> bool:
        return not self.protocol.reproducible(self.report).startswith("no")

    # -- interface -------------------------------------------------------------------------------
