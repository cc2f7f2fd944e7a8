"""The server backend: a running inference server behind the generation interface
(:class:`~mars.engines.base.Backend`), so ``mars generate``, ``probe`` and ``solve`` drive it as
they drive an in-process engine.  How it talks to each server: docs/backends.md, "Servers"."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from ...errors import MarsError, install_hint
from ...store.problems import Problem
from ..base import Backend, GeneratorInfo, ProbeResult, StoredTrace
from ..endpoint import api_key, redact
from ..tokens import (
    CONF_TOP_K,
    DEFAULT_PROMPT_TEMPLATE,
    PROBE_MAX_NEW_TOKENS,
    PROBE_SUFFIX,
    TokenProbing,
    check_context,
    parse_probe,
    prefix_text,
    window_conf,
)
from .batches import ServerTraceBatch, TextTraceBatch
from .connect import PROTOCOLS, ServerConnect
from .errors import ServerError
from .protocol import TEXT, Completion, Sampling, TraceKey, probe_seed
from .retry import RetryPolicy
from .transport import (
    Http,
    answer_limit,
    asked_for,
    first_error,
    normalise_base_url,
)

log = logging.getLogger(__name__)

#: Probes that found less than this share of what they could reuse in the server's prefix cache
#: (the prompt and trace the server has already seen) are said to come back mostly uncached ...
UNCACHED_SHARE = 0.5
#: ... once their reusable prompt tokens reach this many (one line, once per backend).
UNCACHED_MIN_TOKENS = 256


class ServerBackend(ServerConnect, TokenProbing, Backend):
    """A running inference server behind the generation interface (docs/backends.md).

    Args:
        model: the served model name (``GET /v1/models``); None when the server serves one.
        base_url: the server, ``http://HOST:PORT`` (a trailing ``/v1`` is dropped).
        server: ``"auto"`` (from ``owned_by``; a server of another kind that refuses token-id
            prompts: openai) or a kind of :data:`~.connect.PROTOCOLS`: llama.cpp, vllm, sglang
            (token-id prompts) or openai (an OpenAI-compatible ``/v1/completions`` given text
            prompts).
        api_key_env: environment variable holding the API key (sent as a bearer token).
        concurrency: requests in flight at most (default: llama.cpp's slots, 1 for
            llama-cpp-python's server, else 32).
        timeout: seconds one request may take (a generation of a checkpoint's tokens).
        connect_timeout: seconds to open a connection.
        retries: further tries of a request that timed out, lost its connection or got
            408/429/5xx; backoff 0.5 s, 1 s, 2 s, … less a random jitter, or what ``Retry-After``
            asks (:class:`~.retry.RetryPolicy`).
        tokenizer: the model's tokenizer (model directory, hub id or GGUF file); default: the
            model path the server reports, else the served name.
        temperature, top_p, top_k, min_p: sampling (``top_k`` 0/None: off).
        max_tokens: token cap of a trace.
        segment: a generation request never crosses a multiple of this many tokens (None: requests
            end at the checkpoints only).  A trace depends on where its requests start (each has
            its own seed): generations cut alike — inline at spacing S, or ``--probe none`` with
            ``segment`` S — give the same traces.
        probe_max_new_tokens, probe_suffix: the probes (spec: 50 tokens, the reference suffix).
        generator_tokenizer: the probe stage only, as for the other token engines.
        prompt_template, system_prompt: the chat prompt.
        transport: an ``httpx`` async transport to use instead of the network (tests).
    """

    #: requests go through one event loop, each with its own seed: two batches advance at once
    #: (the diagnostic ``stats`` counters are not locked)
    concurrent_batches = True

    name = "server"

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        server: str = "auto",
        api_key_env: str = "MARS_API_KEY",
        concurrency: int | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        retries: int = 4,
        tokenizer: Any = None,
        temperature: float = 0.6,
        top_p: float = 0.95,
        top_k: int | None = 20,
        min_p: float | None = None,
        max_tokens: int = 32768,
        segment: int | None = None,
        probe_max_new_tokens: int = PROBE_MAX_NEW_TOKENS,
        probe_suffix: str = PROBE_SUFFIX,
        generator_tokenizer: Any = None,
        prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
        system_prompt: str | None = None,
        transport: Any = None,
    ):
        if base_url is None:
            raise ServerError("--backend server needs --base-url (e.g. http://127.0.0.1:8080)")
        if temperature < 0 or not 0 < top_p <= 1 or (top_k is not None and top_k < 0):
            raise ServerError(
                f"bad sampling settings: temperature={temperature}, top_p={top_p}, top_k={top_k}"
            )
        if min_p is not None and not 0 <= min_p <= 1:
            raise ServerError(f"bad sampling settings: min_p={min_p} (must be in [0, 1])")
        if max_tokens <= 0 or probe_max_new_tokens <= 0 or (segment is not None and segment <= 0):
            raise ServerError("max_tokens, segment and probe_max_new_tokens must be positive")
        if concurrency is not None and concurrency < 1:
            raise ServerError(f"--concurrency {concurrency}: must be at least 1")
        if not timeout > 0 or not connect_timeout > 0:
            raise ServerError(f"--timeout {timeout}: must be positive")
        if retries < 0:
            raise ServerError(f"retries={retries}: must be 0 or more")
        if server != "auto" and server not in PROTOCOLS:
            raise ServerError(f"server={server!r}: one of auto, {', '.join(PROTOCOLS)}")
        if "{question}" not in prompt_template:
            raise ServerError("prompt_template must contain '{question}'")
        if not probe_suffix:
            raise ServerError("the probe suffix must not be empty")
        try:
            import httpx  # noqa: F401
        except ImportError as exc:
            raise ImportError(f"the server backend needs httpx: {install_hint('server')}") from exc
        url = normalise_base_url(base_url)
        #: the server as messages name it: credentials in its URL hidden
        self.base_url = redact(url)
        self.sampling = Sampling(float(temperature), float(top_p), int(top_k or 0), min_p)
        self.max_tokens = int(max_tokens)
        self.segment = None if segment is None else int(segment)
        self.probe_max_new_tokens = int(probe_max_new_tokens)
        self.probe_suffix = str(probe_suffix)
        self.generator_tokenizer = generator_tokenizer
        self.prompt_template = prompt_template
        self.system_prompt = system_prompt
        self.api_key_env = api_key_env
        try:  # one line, before any request, if a header cannot carry it
            key = api_key(api_key_env)
        except MarsError as exc:
            raise ServerError(str(exc)) from None
        if key and urlsplit(url).username is not None:
            raise ServerError(
                f"--base-url {self.base_url} holds credentials and ${api_key_env} a key: both "
                "would go in the one Authorization header; give one of them"
            )
        self.http = Http(
            url,
            headers={"Authorization": f"Bearer {key}"} if key else None,
            timeout=timeout,
            connect_timeout=connect_timeout,
            retry=RetryPolicy(retries=retries),
            concurrency=concurrency or 32,
            transport=transport,
            secrets=[key],
        )
        #: server-reported token counts, summed (generation and probes)
        self.stats = {
            "generate_calls": 0,
            "generate_prompt_tokens": 0,
            "generate_cached_tokens": 0,
            "generate_completion_tokens": 0,
            "probe_calls": 0,
            "probe_prompt_tokens": 0,
            "probe_cached_tokens": 0,
            "probe_completion_tokens": 0,
            # probes: prompt tokens the server had seen before as a prefix (prompt + the trace so
            # far), and how many of them it served from its cache
            "probe_reusable_tokens": 0,
            "probe_reused_tokens": 0,
            "missing_confs": 0,
            # text-prompt servers: their own count of the tokens they generated (the completion
            # tokens above are ours, of the text they returned)
            "generate_server_tokens": 0,
            "probe_server_tokens": 0,
            # text-prompt servers: confidences not of the token's own top 20 (``exact``)
            "approx_confs": 0,
        }
        #: text-prompt servers: the BOS token the server puts before every text prompt (None:
        #: none, or not known), and why it refused a token-id prompt (None: not asked)
        self.server_bos: int | None = None
        self.token_ids_refused: str | None = None
        self._said_uncached = False
        try:
            self._connect(model, server, concurrency, tokenizer)
        except ServerError as exc:  # a refusal may quote the server, which may echo the key
            self.http.close()
            raise exc.retold(self.http.hide(exc, 1000)) from None
        except BaseException:
            self.http.close()
            raise

    def start(
        self, problem: Problem, n_traces: int, seed: int, first_trace: int = 0
    ) -> ServerTraceBatch:
        self.check_start(n_traces, seed, first_trace)
        cls = TextTraceBatch if self.protocol.prompt_mode == TEXT else ServerTraceBatch
        return cls(self, problem, n_traces, seed, first_trace)

    def context_budget(self) -> tuple[int, str] | None:
        if not self.context_len:
            return None
        return self.context_len, f"the server's context length {self.context_len}"

    def check_context(self, problem: Problem) -> None:
        check_context(self, problem)

    def model_source(self) -> tuple[str | None, str | None]:
        return None, None

    def describe(self) -> dict:
        """Provenance for a pool manifest: what shapes the traces (not where the server runs, so
        a run resumes against the same server restarted elsewhere)."""
        p = self.protocol
        s = self.sampling
        text = p.prompt_mode == TEXT
        server: dict[str, Any] = {
            "kind": p.kind,
            "version": p.version(self.report),
            "request": f"POST {p.path}, {'text' if text else 'token-id'} prompts, one request "
            "per trace or probe",
            "generation_requests": "end at every checkpoint"
            + ("" if self.segment is None else f" and every multiple of {self.segment} tokens"),
            "cached_tokens": "reported" if self.reports_cached else "not reported",
        }
        sampling: dict[str, Any] = {
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k,
            "min_p": s.min_p,
            "seed": (
                f"{p.seeds}: (seed, qid, trace_idx, start) per generation request, "
                "(seed, qid, trace_idx, position) per probe"
            ),
        }
        if text:
            server["tokenization"] = (
                "each request is the prompt's text + the trace's text so far, tokenized by the "
                "server; token ids, lengths and checkpoints are the returned text tokenized here, "
                "confidences those of the server's tokens that match ours (else NaN)"
            )
            server["bos"] = (
                "added by the server to every prompt"
                if self.server_bos is not None
                else "none added"
                if self.tokenizer_checked
                else "not known"
            )
            sampling["order"] = getattr(p, "sampler_order", "the server's")
        return {
            "backend": self.name,
            "model": self.model,
            "model_path": None,
            "tokenizer": self.tokenizer_source,
            "tokenizer_vocab": self.vocab_digest(),
            "prompt_mode": p.prompt_mode,
            "server": server,
            "sampling": sampling,
            "reproducible": p.reproducible(self.report),
            "logprobs": p.logprobs_mode,
            "conf": f"-mean(top-{CONF_TOP_K} logprobs), 3 decimals, float16"
            + (
                "; text prompts: of the server's token with the same text when its top 20 can be "
                "told (no two keys shared), else that of the server's token over the token's last "
                "character, or -mean of the fewer entries sent; the end of text takes the token's "
                "before it (stats approx_confs counts them)"
                if text
                else ""
            ),
            "probe_max_new_tokens": self.probe_max_new_tokens,
            "probe_suffix": self.probe_suffix,
            "prompt_template": self.prompt_template,
            "system_prompt": self.system_prompt,
        }

    def describe_probe(self) -> dict:
        return {
            **self.describe(),
            "probe_order": "each trace's probes in position order, traces concurrently",
            "probe_input": self.probe_input(),
        }

    # -- requests ------------------------------------------------------------------------------

    def complete(
        self,
        requests: Sequence[tuple[list[int] | str, int, int | None]],
        logprobs: bool,
        traces: Sequence[TraceKey] | None = None,
    ) -> list[Completion]:
        """``[(prompt, max_new, seed), …]`` → the completions, concurrently (bounded); a prompt
        is token ids, or text for a text-prompt server. ``traces``: the trace of each request
        (one server: not needed; ``mars serve``'s router keeps a trace on one replica)."""
        p = self.protocol
        bodies = [p.body(ids, m, self.sampling, s, logprobs) for ids, m, s in requests]
        limits = [(answer_limit(m, logprobs, prompt), asked_for(m)) for prompt, m, _ in requests]
        outs = self.http.post_all(p.path, bodies, limits)
        return [self.read(o, m, logprobs) for o, (_, m, _) in zip(outs, requests)]

    def read(self, out: Any, max_new: int, logprobs: bool) -> Completion:
        """A completion from a server's answer: read by its protocol, every token id checked
        against the tokenizer's vocabulary (an id it does not have would be stored, and the probe
        stage would crash on it).  A refusal quoting the answer hides what the server echoes of
        the key."""
        try:
            c = self.protocol.parse(out, max_new, logprobs)
        except ServerError as exc:
            raise exc.retold(self.http.hide(exc, 1000)) from None
        n = self.vocab_size
        bad = next((t for t in c.ids if t < 0 or (n is not None and t >= n)), None)
        if bad is not None:
            raise ServerError(
                f"the server at {self.base_url} answered token id {bad}, outside the vocabulary "
                f"of the tokenizer (0..{n - 1 if n is not None else '…'})"
            )
        return c

    def count(self, kind: str, c: Completion, taken: int | None = None) -> None:
        """Add a request's counts to :attr:`stats` (``taken``: the tokens of the answer a trace
        kept, when it kept fewer)."""
        n = c.completion_tokens if taken is None else int(taken)
        self.stats[f"{kind}_prompt_tokens"] += c.prompt_tokens or 0
        self.stats[f"{kind}_cached_tokens"] += c.cached_tokens or 0
        self.stats[f"{kind}_completion_tokens"] += n
        if c.server_tokens is not None:
            self.stats[f"{kind}_server_tokens"] += c.server_tokens
        if c.confs is not None:
            self.stats["missing_confs"] += int(np.isnan(np.asarray(c.confs[:n], float)).sum())
        if c.exact is not None:
            self.stats["approx_confs"] += n - sum(c.exact[:n])

    def probe_result(
        self, c: Completion, request_len: int, conf: float | None, reusable: int = 0
    ) -> ProbeResult:
        """A probe's record; ``reusable``: its prompt tokens the server has seen before as a
        prefix (:meth:`check_probe_cache`)."""
        self.count("probe", c)
        if reusable and c.cached_tokens is not None:
            self.stats["probe_reusable_tokens"] += int(reusable)
            self.stats["probe_reused_tokens"] += min(int(c.cached_tokens), int(reusable))
        return ProbeResult(
            answer=parse_probe(c.text),
            raw_text="\\boxed{" + c.text,
            conf=conf,
            prompt_tokens=c.prompt_tokens if c.prompt_tokens is not None else request_len,
            cached_tokens=c.cached_tokens,
            generated_tokens=c.completion_tokens,
        )

    def check_probe_cache(self) -> None:
        """Say once, in one line, when the probes' prompts come back mostly uncached: the server
        keeps no prefix cache (vLLM without ``--enable-prefix-caching``, a model whose server
        cannot cache prefixes) or evicts it, and every probe re-reads its whole trace."""
        s = self.stats
        seen, reused = s["probe_reusable_tokens"], s["probe_reused_tokens"]
        if self._said_uncached or seen < UNCACHED_MIN_TOKENS or reused >= UNCACHED_SHARE * seen:
            return
        self._said_uncached = True
        log.warning(
            "server backend: the server's prefix cache served %.0f %% of the probes' prompt "
            "tokens it had seen before (%d of %d): each probe re-reads its trace (start vLLM "
            "with --enable-prefix-caching; llama.cpp: --parallel at least the traces in flight; "
            "docs/backends.md)",
            100 * reused / seen,
            reused,
            seen,
        )

    def reprobe(
        self,
        problem: Problem,
        traces: Sequence[StoredTrace],
        positions: Sequence[np.ndarray],
        generator: GeneratorInfo,
    ) -> list[list[ProbeResult]]:
        """Probe stored traces: each trace's probes one after another in position order (its
        next prefix extends the one the server just cached), the traces concurrently; seeds
        (seed, qid, trace_idx, position) as inline probes."""
        gen, prompt, plan = self.probe_plan(problem, traces, positions, generator.manifest)
        seed = int(generator.manifest.get("seed", 0))
        out: list[list[Any]] = [[None] * len(p) for p in positions]
        p = self.protocol
        text = self.prompt_text(problem.question) if p.prompt_mode == TEXT else None

        def request(t: StoredTrace, d: int, pre: np.ndarray) -> tuple[list[int] | str, int]:
            """(the probe's prompt, its length in our tokens)."""
            n = len(prompt) + len(pre) + len(self.suffix_ids)
            if text is None:
                return prompt + [int(x) for x in pre] + self.suffix_ids, n
            if gen.same_ids:  # a character the cut at d splits is left out, as in its text
                assert t.token_ids is not None
                trace = prefix_text(self.tokenizer, t.token_ids, d)
            else:
                trace = self.tokenizer.decode([int(x) for x in pre], skip_special_tokens=True)
            return text + trace + self.probe_suffix, n

        async def chain(i: int) -> None:
            t = traces[i]
            before = 0  # the prefix the previous probe of this trace sent (none: nothing known)
            for k, d in enumerate(np.asarray(positions[i]).tolist()):
                req, n = request(t, d, plan[i][k])
                m = self.probe_max_new_tokens
                body = p.body(
                    req, m, self.sampling, probe_seed(seed, problem.qid, t.trace_idx, d), False
                )
                limit = answer_limit(m, False, req)
                answer = await self.http.post(p.path, body, limit, asked_for(m))
                c = self.read(answer, m, False)
                conf = None if t.confs is None else window_conf(t.confs, d)
                out[i][k] = self.probe_result(c, n, conf, before)
                before = len(prompt) + len(plan[i][k])

        async def go():
            async with asyncio.TaskGroup() as tg:
                for i, pos in enumerate(positions):
                    if len(pos):
                        tg.create_task(chain(i))

        try:
            self.http.run(go)
        except ExceptionGroup as eg:
            raise first_error(eg) from None
        self.stats["probe_calls"] += 1
        self.check_probe_cache()
        return out

    def close(self) -> None:
        self.http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
