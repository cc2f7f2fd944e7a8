"""SGLang backend: ``sglang.Engine`` offline, token-id requests, radix-cache-served probes.

Install with ``pip install 'mars-stopping[sglang]'`` (CUDA only).  **Not run on a live SGLang
engine in this project** (no GPU with SGLang was available): the adapter is tested against
hand-written engine outputs with the shape of SGLang 0.5.23's ``Engine.generate`` results (and
0.5.9's, which differ in a few ``meta_info`` keys), replayed by a fake engine
(``tests/data/sglang/``); the engine behaviour below was read in the source of both versions, see
docs/backends.md.

How a batch of N traces of one question runs (one :class:`SGLangTraceBatch`):

* **Prompt**: the tokenizer's chat template (user message = question + ``\\boxed{}`` instruction,
  generation prompt added), sent as **token ids** (never re-tokenised text, so prefixes stay exact).
  Before the first request, the question's longest request (prompt + ``max_tokens`` + probe
  suffix + probe tokens) must fit the engine's context length (:meth:`SGLangBackend.check_context`).
* **advance(target)**: one batched ``engine.generate(input_ids=[prompt + ids_j …],
  sampling_params=[{max_new_tokens: target − len_j, temperature, top_p, top_k, sampling_seed}, …],
  return_logprob=True, top_logprobs_num=20)`` for the running traces.  Each continuation's prefix
  (prompt + the trace so far, but its last token) is served by the radix cache; the engine's
  ``cached_tokens`` are kept in :attr:`SGLangBackend.stats`.  ``finish_reason`` is a dict:
  ``{"type": "stop", …}`` ends a trace (finished); ``{"type": "length", …}`` at the token cap ends
  it as cut.
* **Reproducible traces** (``seed_per_trace=True``, the default): SGLang honours a request's
  ``sampling_seed`` only when the engine runs with ``enable_deterministic_inference=True`` (without
  it the seed is ignored and sampling uses the engine's global generator), so the backend starts
  the engine that way and refuses an injected engine that reports otherwise.  In that mode SGLang
  draws token ``i`` of a sequence from a hash of (``sampling_seed``, position ``i − 1``, candidate
  rank), so every generation request of a trace sends the same :func:`trace_seed` — the trace is
  then a function of (seed, qid, trace_idx) alone, whatever the checkpoint grid — and a probe sends
  :func:`probe_seed` (seed, qid, trace_idx, position).  The traps of that mode are refused
  upfront: ``min_p > 0`` (SGLang asserts in its sampler), an attention backend with which SGLang
  silently turns the radix cache off (only fa3, fa4 and triton keep it; on Blackwell GPUs its
  default is flashinfer), and requests without a seed (SGLang then gives every one the seed 42:
  identical traces).  ``seed_per_trace=False`` runs the engine without deterministic inference
  (the reference: no seed; not reproducible).  What the engine actually runs with is read back
  (``get_server_info``) and recorded by :meth:`SGLangBackend.describe`.
* **Per-token confidence** = −mean of the 20 ``output_top_logprobs`` of the token, rounded to 3
  decimals (spec §3.1); NaN for a position the engine returned no top log-probabilities for
  (``None``).  Log-probabilities SGLang clamped to the float32 minimum (a probability that
  underflowed) count as ln(2^-149), so a confidence is never infinite
  (:func:`~mars.engines.tokens.token_confidence`).  SGLang's log-probabilities are those of
  ``logits / temperature`` (before top-k/top-p) unless the engine runs with
  ``SGLANG_RETURN_ORIGINAL_LOGPROB=1``; :meth:`SGLangBackend.describe` records which (read from the
  environment when the backend is built), so it lands in the pool manifest.
* **probe(idx)**: ``input_ids = prompt + ids_j[:p] + suffix_ids`` (:data:`PROBE_SUFFIX`, spec §11),
  ``max_new_tokens = 50``, the same sampling; the radix cache serves prompt + trace but its last
  token, whose KV was never computed (``cached_tokens`` = P + p − 1), so the engine prefills that
  token and the suffix.  The completion's text → :func:`extract_probe_answer` →
  :func:`normalize_answer`; ``prompt_tokens``, ``cached_tokens``, ``completion_tokens`` of the
  engine's ``meta_info`` go into the ProbeResult.
* **Final answer**: last ``\\boxed{…}`` of the decoded trace, normalised once.
* **The probe stage** (``mars probe``, :meth:`SGLangBackend.reprobe`): stored traces are probed
  with ``input_ids = prompt + ids[:d] + suffix_ids`` (the probe model's chat template; the
  generator's ids, or its text re-encoded for another vocabulary), the probe seeds of inline
  probing, ordered as the reference prober does: tier by tier (every trace's 1st probe, then
  every 2nd, …) in calls of ``probe_batch_size`` requests, so that a trace's previous prefix is in
  the radix cache when its next probe comes; traces go in waves small enough for half the KV pool
  to hold their prefixes.  ``cached_tokens`` of each probe is the engine's.

Data parallelism: ``dp_size > 1`` starts the engine's data-parallel replicas (one Engine per job).
Requests are then routed by the engine's load balancer, so a continuation or probe may land on a
replica that does not hold the trace's prefix; ``cached_tokens`` shows it.  For full cache reuse run
one engine per GPU job on its own shard (the workflow's default).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import MarsError, install_hint
from ..store.problems import Problem
from .base import Backend, GeneratorInfo, ProbeResult, StoredTrace
from .tokens import (
    CONF_TOP_K,
    DEFAULT_PROMPT_TEMPLATE,
    PROBE_MAX_NEW_TOKENS,
    PROBE_SUFFIX,
    TokenProbing,
    TokenTraceBatch,
    build_prompt_ids,
    check_context,
    derive_seed,
    encode_suffix,
    finite_confs,
    local_path,
    parse_probe,
    token_confidence,
    window_conf,
)

__all__ = [
    "EngineOutputError",
    "SGLangBackend",
    "SGLangTraceBatch",
    "parse_generation",
    "probe_seed",
    "trace_seed",
]

log = logging.getLogger(__name__)

_PROBE_SALT = 0x9B0BE  # separates probe seeds from trace seeds
#: Attention backends with which SGLang keeps the radix cache under deterministic inference
#: (SGLang 0.5.23; 0.5.9 had fa3 and triton only, and no deterministic fa4).  With any other, SGLang
#: turns the radix cache off (with a log warning only), and every continuation and probe would
#: re-prefill its whole prefix.
RADIX_DETERMINISTIC_BACKENDS = ("fa3", "fa4", "triton")
#: Tokens SGLang keeps back from the context length: its scheduler caps a request at
#: min(context length, KV pool) − 1 tokens and cuts ``max_new_tokens`` so that input + new tokens
#: stay below that cap, so input + ``max_new_tokens`` must be ≤ context length − 2 for a request to
#: get all the tokens it asks for.
CONTEXT_RESERVE = 2
#: What :meth:`SGLangBackend.describe` records of the engine's own report (``get_server_info``).
ENGINE_KEYS = (
    "version",
    "enable_deterministic_inference",
    "attention_backend",
    "sampling_backend",
    "disable_radix_cache",
)


class EngineOutputError(RuntimeError):
    """The engine returned something the adapter cannot interpret."""


def trace_seed(seed: int, qid: int, trace_idx: int) -> int:
    """``sampling_seed`` of every generation request of trace (seed, qid, trace_idx).

    SGLang hashes (``sampling_seed``, token position) under deterministic inference, so one seed per
    trace makes a trace independent of how its generation is cut into requests.  63 bits (SGLang
    takes an int64): a per-question part derived from (seed, qid) above the trace index, so the
    traces of one question never share a seed.
    """
    if not 0 <= int(trace_idx) < 2**32:
        raise ValueError(f"trace index {trace_idx} out of range")
    return (derive_seed(seed, qid, bits=31) << 32) | int(trace_idx)


def probe_seed(seed: int, qid: int, trace_idx: int, position: int) -> int:
    """``sampling_seed`` of the probe of trace (seed, qid, trace_idx) at ``position`` (63 bits)."""
    return derive_seed(seed, qid, trace_idx, position, _PROBE_SALT, bits=63)


def _pairs(entries) -> list:
    """``[(logprob, token_id, text|None), …]`` entries (tuples or JSON lists) → list of tuples;
    ``None`` (SGLang's value for a position without entries) → []."""
    return [tuple(e) for e in entries] if entries else []


def parse_generation(out: dict, max_new_tokens: int | None = None) -> dict:
    """Interpret one ``engine.generate`` result (``{"text", "output_ids", "meta_info"}``).

    Returns ``{"ids", "confs", "finish", "matched", "text", "prompt_tokens", "cached_tokens",
    "completion_tokens", "retractions"}``.  The generated tokens are those of
    ``meta_info.output_token_logprobs`` when present (one ``(logprob, token_id, text)`` per
    generated position), else ``output_ids``; the two must agree where both exist.
    ``finish_reason`` is a dict (SGLang's shape for a finished request); ``finish`` is its
    ``"stop"`` or ``"length"``; ``"abort"``, an unknown type or anything but a dict raises.
    Other ``meta_info`` keys (``weight_version``, ``input_token_logprobs``,
    ``cached_tokens_details``, …) are not needed.
    """
    if not isinstance(out, dict) or not isinstance(out.get("meta_info"), dict):
        raise EngineOutputError(f"not an engine result: {str(out)[:200]}")
    meta = out["meta_info"]
    rid = meta.get("id")
    fr = meta.get("finish_reason")
    if not isinstance(fr, dict):
        raise EngineOutputError(
            f"request {rid}: finish_reason {fr!r} is not a dict (an unfinished request?)"
        )
    ftype = fr.get("type")
    if ftype == "abort":
        raise EngineOutputError(f"request {rid} aborted: {fr.get('message')}")
    if ftype not in ("stop", "length"):
        raise EngineOutputError(f"request {rid}: unknown finish_reason {fr!r}")
    matched = fr.get("matched", fr.get("length"))
    token_lp = meta.get("output_token_logprobs")
    out_ids = out.get("output_ids")
    if token_lp is not None:
        ids = [int(e[1]) for e in _pairs(token_lp)]
        if out_ids is not None and list(map(int, out_ids)) != ids:
            raise EngineOutputError(f"request {rid}: output_ids and output_token_logprobs disagree")
        n_lp = meta.get("output_token_logprobs_length")  # in 0.5.23, not in 0.5.9
        if n_lp is not None and int(n_lp) != len(ids):
            raise EngineOutputError(
                f"request {rid}: output_token_logprobs_length {n_lp} for {len(ids)} entries"
            )
    elif out_ids is not None:
        ids = [int(t) for t in out_ids]
    else:
        raise EngineOutputError(f"request {rid}: neither output_ids nor output_token_logprobs")
    top = meta.get("output_top_logprobs")
    if token_lp is not None and top is not None:
        if len(top) != len(ids):
            raise EngineOutputError(
                f"request {rid}: {len(top)} top-logprob entries for {len(ids)} tokens"
            )
        confs = [token_confidence([e[0] for e in _pairs(entry)]) for entry in top]
    else:
        confs = None
    completion = meta.get("completion_tokens")
    if completion is not None and int(completion) != len(ids):
        raise EngineOutputError(
            f"request {rid}: completion_tokens {completion} for {len(ids)} tokens"
        )
    if max_new_tokens is not None and len(ids) > max_new_tokens:
        raise EngineOutputError(
            f"request {rid}: {len(ids)} tokens for max_new_tokens {max_new_tokens}"
        )
    if ftype == "length" and max_new_tokens is not None and len(ids) != max_new_tokens:
        raise EngineOutputError(
            f"request {rid}: finish 'length' after {len(ids)} of {max_new_tokens} tokens "
            "(the engine cut max_new_tokens: context length or KV pool too small?)"
        )

    def _int(key):
        v = meta.get(key)
        return None if v is None else int(v)

    # renamed between versions: total_retractions (0.5.9) → num_retractions (0.5.23)
    retractions = _int("num_retractions")
    if retractions is None:
        retractions = _int("total_retractions")
    return {
        "ids": ids,
        "confs": confs,
        "finish": ftype,
        "matched": matched,
        "text": out.get("text"),
        "prompt_tokens": _int("prompt_tokens"),
        "cached_tokens": _int("cached_tokens"),
        "completion_tokens": _int("completion_tokens") if completion is not None else len(ids),
        "retractions": retractions,
    }


def engine_report(engine) -> dict:
    """What an engine says about itself: SGLang's ``get_server_info()`` (its server arguments as
    resolved at start — attention backend, deterministic inference, radix cache … — plus scheduler
    limits and ``version``) and the model's context length (``tokenizer_manager.context_len``,
    which already honours a ``context_length`` argument).  ``{}`` for an engine without them."""
    report: dict = {}
    get = getattr(engine, "get_server_info", None)
    if callable(get):
        info = get()
        if isinstance(info, dict):
            report.update(info)
    ctx = getattr(getattr(engine, "tokenizer_manager", None), "context_len", None)
    if isinstance(ctx, int) and ctx > 0:
        report["context_len"] = ctx
    return report


class SGLangBackend(TokenProbing, Backend):
    """An ``sglang.Engine`` behind the generation interface (see the module docstring).

    Args:
        model_path: model directory or hub id (the engine's ``model_path`` and the tokenizer's).
        engine: an engine-like object to use instead of starting one (tests inject a fake): it needs
            ``generate(input_ids=list[list[int]], sampling_params=list[dict], return_logprob=bool,
            top_logprobs_num=int)`` returning one ``{"text", "output_ids", "meta_info"}`` per
            request; ``get_server_info()`` and ``tokenizer_manager.context_len`` (as
            ``sglang.Engine`` has them) let the backend check its settings and the context length.
        tokenizer: a transformers-like tokenizer (``apply_chat_template``, ``__call__``, ``encode``,
            ``decode``); default ``AutoTokenizer.from_pretrained(model_path)``.
        dp_size, tp_size, mem_fraction_static, context_length, random_seed, engine_kwargs: engine
            arguments (``sglang.Engine(**ServerArgs)``).  ``enable_deterministic_inference`` is set
            from ``seed_per_trace``; an ``attention_backend`` must keep the radix cache under it.
        temperature, top_p, top_k, min_p: sampling (``top_k=None``/0: off — sent as −1; ``min_p``
            only without per-trace seeds: SGLang's seeded sampler does not implement it).
        max_tokens: token cap of a trace.
        probe_max_new_tokens: new tokens of a probe (spec: 50).
        probe_suffix: text appended after the trace to ask for its answer (default: the
            reference prober's :data:`PROBE_SUFFIX`).
        probe_batch_size: probe requests per engine call of the probe stage (the reference
            prober's 64).
        probe_wave: traces whose probes the probe stage sends together, tier by tier (None: as
            many as half the engine's KV pool holds at their longest probe; all when the engine
            reports no pool).
        generator_tokenizer: the probe stage only: the tokenizer (or its path) of the model that
            generated the traces, when the pool's recorded model path cannot be loaded here.
        seed_per_trace: reproducible traces — deterministic inference and a ``sampling_seed`` per
            request (:func:`trace_seed`, :func:`probe_seed`); False: the engine's own randomness.
        prompt_template, system_prompt: the chat prompt.
        name: the model name recorded in the pool (default ``model_path``).
    """

    name = "sglang"

    def __init__(
        self,
        model_path: str,
        *,
        engine=None,
        tokenizer=None,
        dp_size: int = 1,
        tp_size: int = 1,
        temperature: float = 0.6,
        top_p: float = 0.95,
        top_k: int | None = 20,
        min_p: float | None = None,
        max_tokens: int = 32768,
        probe_max_new_tokens: int = PROBE_MAX_NEW_TOKENS,
        probe_suffix: str = PROBE_SUFFIX,
        probe_batch_size: int = 64,
        probe_wave: int | None = None,
        generator_tokenizer=None,
        seed_per_trace: bool = True,
        prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
        system_prompt: str | None = None,
        mem_fraction_static: float | None = None,
        context_length: int | None = None,
        random_seed: int | None = None,
        engine_kwargs: dict | None = None,
        name: str | None = None,
    ):
        if temperature < 0 or not 0 < top_p <= 1 or (top_k is not None and top_k < 0):
            raise MarsError(
                f"bad sampling settings: temperature={temperature}, top_p={top_p}, top_k={top_k}"
            )
        if min_p is not None and not 0 <= min_p <= 1:
            raise MarsError(f"bad sampling settings: min_p={min_p} (must be in [0, 1])")
        if max_tokens <= 0 or probe_max_new_tokens <= 0 or dp_size <= 0 or tp_size <= 0:
            raise MarsError(
                "max_tokens, probe_max_new_tokens, dp_size and tp_size must be positive"
            )
        if "{question}" not in prompt_template:
            raise MarsError("prompt_template must contain '{question}'")
        if not probe_suffix:
            raise MarsError("the probe suffix must not be empty")
        if probe_batch_size <= 0 or (probe_wave is not None and probe_wave <= 0):
            raise MarsError("probe_batch_size and probe_wave must be positive")
        self.model_path = str(model_path)
        #: where the model was loaded from (absolute when local): what the pool records
        self.source_path = local_path(model_path)
        self.model = str(name or model_path)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.top_k = int(top_k) if top_k else -1
        self.min_p = min_p
        self.max_tokens = int(max_tokens)
        self.probe_max_new_tokens = int(probe_max_new_tokens)
        self.probe_suffix = str(probe_suffix)
        self.probe_batch_size = int(probe_batch_size)
        self.probe_wave = None if probe_wave is None else int(probe_wave)
        self.generator_tokenizer = generator_tokenizer
        self.seed_per_trace = bool(seed_per_trace)
        self.prompt_template = prompt_template
        self.system_prompt = system_prompt
        self.dp_size, self.tp_size = int(dp_size), int(tp_size)
        self.original_logprobs = os.environ.get("SGLANG_RETURN_ORIGINAL_LOGPROB", "").lower() in (
            "1",
            "true",
            "yes",
        )
        self._owns_engine = engine is None
        self._radix_off_asked = bool((engine_kwargs or {}).get("disable_radix_cache"))
        if engine is None:
            kwargs = {
                "model_path": self.model_path,
                "dp_size": self.dp_size,
                "tp_size": self.tp_size,
                **{
                    k: v
                    for k, v in {
                        "mem_fraction_static": mem_fraction_static,
                        "context_length": context_length,
                        "random_seed": random_seed,
                    }.items()
                    if v is not None
                },
                **(engine_kwargs or {}),
            }
            kwargs.setdefault("enable_deterministic_inference", self.seed_per_trace)
            self._check_settings(kwargs, requested=True)  # before minutes of engine start
            try:
                import sglang
            except ImportError as exc:
                raise ImportError(
                    f"the SGLang backend needs sglang (CUDA): {install_hint('sglang')}"
                ) from exc
            try:
                engine = sglang.Engine(**kwargs)
            except (ValueError, TypeError) as exc:  # ServerArgs validation: a bad setting
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise MarsError(f"SGLang refused the engine settings: {first}") from None
        self.engine = engine
        #: the engine's own report (see :func:`engine_report`); {} for engines without one
        self.engine_info = engine_report(engine)
        try:
            self._check_settings(self.engine_info, requested=False)
        except MarsError:
            self.shutdown()
            raise
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.tokenizer = tokenizer
        self.suffix_ids = encode_suffix(tokenizer, self.probe_suffix)
        #: engine-reported token counts, summed (generation and probes)
        self.stats = {
            "generate_calls": 0,
            "generate_prompt_tokens": 0,
            "generate_cached_tokens": 0,
            "generate_completion_tokens": 0,
            "probe_calls": 0,
            "probe_prompt_tokens": 0,
            "probe_cached_tokens": 0,
            "probe_completion_tokens": 0,
            "retractions": 0,
        }

    def _check_settings(self, args: dict, requested: bool) -> None:
        """Refuse engine settings that break reproducibility or the cheap probes.

        ``args``: the arguments the engine is about to be started with (``requested``), or what a
        running engine reports (:func:`engine_report`; a key it does not report is not checked).
        """
        where = "engine argument" if requested else "the engine runs with"
        det = args.get("enable_deterministic_inference")
        if self.seed_per_trace and det is False:
            raise MarsError(
                f"seed_per_trace needs SGLang's deterministic inference ({where} "
                "enable_deterministic_inference=False): without it SGLang ignores sampling_seed "
                "and traces are not reproducible; enable it or pass seed_per_trace=False"
            )
        if not self.seed_per_trace and det:
            raise MarsError(
                f"seed_per_trace=False with deterministic inference ({where} "
                "enable_deterministic_inference=True): SGLang would give every request the "
                "seed 42 and all traces of a question would be identical"
            )
        if det and self.min_p:
            raise MarsError(
                f"min_p={self.min_p} cannot run with per-trace seeds: SGLang's deterministic "
                "sampler does not implement min_p (it asserts); drop min_p or pass "
                "seed_per_trace=False"
            )
        ab = args.get("attention_backend")
        if det and ab is not None and ab not in RADIX_DETERMINISTIC_BACKENDS:
            raise MarsError(
                f"attention_backend={ab!r}: with deterministic inference SGLang turns the radix "
                "cache off for it, so every probe would re-prefill its whole trace; use "
                f"one of {', '.join(RADIX_DETERMINISTIC_BACKENDS)} (fa3 on Hopper, triton anywhere)"
            )
        if args.get("disable_radix_cache"):
            msg = (
                "SGLang's radix cache is off: every continuation and probe re-prefills its "
                "whole prefix (probes are no longer cheap)"
            )
            if requested or not det or self._radix_off_asked:  # the user's choice: said, allowed
                log.warning(msg)
            else:
                raise MarsError(
                    f"{msg}; the engine turned it off itself under deterministic inference "
                    f"(attention backend {args.get('attention_backend')!r}): start it with "
                    f"attention_backend one of {', '.join(RADIX_DETERMINISTIC_BACKENDS)}"
                )

    # -- interface -------------------------------------------------------------------------------

    def start(
        self, problem: Problem, n_traces: int, seed: int, first_trace: int = 0
    ) -> SGLangTraceBatch:
        self.check_start(n_traces, seed, first_trace)
        return SGLangTraceBatch(self, problem, n_traces, seed, first_trace)

    @property
    def deterministic(self) -> bool | None:
        """Whether the engine runs with deterministic inference (None: it does not say)."""
        det = self.engine_info.get("enable_deterministic_inference")
        return None if det is None else bool(det)

    def context_budget(self) -> tuple[int, str] | None:
        """Most tokens (input + ``max_new_tokens``) one request may hold and get in full, from the
        engine's context length and KV pool (None when the engine reports neither)."""
        ctx = self.engine_info.get("context_len") or self.engine_info.get("context_length")
        pool = self.engine_info.get("max_total_num_tokens")
        if not ctx and not pool:
            return None
        limits = [int(x) for x in (ctx, pool) if x]
        lim = min(limits)
        what = (
            f"SGLang's context length {ctx}"
            if ctx and lim == int(ctx)
            else f"SGLang's KV pool of {pool} tokens"
        )
        return lim - CONTEXT_RESERVE, f"{what} (less {CONTEXT_RESERVE} it keeps back)"

    def check_context(self, problem: Problem) -> None:
        """One-line :class:`MarsError` if a question's longest request cannot fit the engine
        (``start`` checks this before the first request; callers may check all questions first)."""
        check_context(self, problem)

    def describe(self) -> dict:
        """Provenance for a pool manifest, with the engine's own settings as it reports them."""
        det = self.deterministic
        engine = {k: self.engine_info.get(k) for k in ENGINE_KEYS}
        engine["context_length"] = self.engine_info.get("context_len")
        return {
            "backend": self.name,
            "model": self.model,
            "model_path": self.source_path,
            "tokenizer_vocab": self.vocab_digest(),
            "sampling": {
                "temperature": self.temperature,
                "top_p": self.top_p,
                "top_k": self.top_k,
                "min_p": self.min_p,
                "sampling_seed": (
                    "per trace (seed, qid, trace_idx); probes (seed, qid, trace_idx, position)"
                    if self.seed_per_trace and det
                    else (
                        "per trace, sent; engine did not report deterministic inference"
                        if self.seed_per_trace
                        else None
                    )
                ),
            },
            "engine": engine,
            "logprobs": (
                "log_softmax(logits) (SGLANG_RETURN_ORIGINAL_LOGPROB=1)"
                if self.original_logprobs
                else "log_softmax(logits / temperature) (SGLang default)"
            ),
            "conf": f"-mean(top-{CONF_TOP_K} logprobs), 3 decimals, float16",
            "probe_max_new_tokens": self.probe_max_new_tokens,
            "probe_suffix": self.probe_suffix,
            "prompt_template": self.prompt_template,
            "system_prompt": self.system_prompt,
            "dp_size": self.dp_size,
            "tp_size": self.tp_size,
        }

    def describe_probe(self) -> dict:
        """Provenance of the probe stage: :meth:`describe`, how requests are ordered, and how the
        probed traces' tokens reached this model (``probe_input``)."""
        return {
            **self.describe(),
            "probe_order": (
                f"tier by tier (every trace's 1st probe, then 2nd, ...) in waves of "
                f"{self.probe_wave or 'KV-pool-sized'} traces, {self.probe_batch_size} requests "
                "per engine call"
            ),
            "probe_input": self.probe_input(),
        }

    def model_source(self) -> tuple[str | None, str | None]:
        return self.source_path, None

    def prompt_ids(self, question: str) -> list[int]:
        return build_prompt_ids(self.tokenizer, question, self.prompt_template, self.system_prompt)

    def wave_size(self, n: int, request_tokens: int) -> int:
        """Traces per wave of the probe stage: :attr:`probe_wave`, else as many traces as half the
        engine's KV pool holds at ``request_tokens`` each (their prefixes must stay in the radix
        cache from one tier to the next), at least 1; all ``n`` without a reported pool."""
        if self.probe_wave is not None:
            return max(1, min(n, self.probe_wave))
        pool = self.engine_info.get("max_total_num_tokens")
        if not pool:
            return max(1, n)
        return max(1, min(n, int(pool) // 2 // max(1, request_tokens)))

    def reprobe(
        self,
        problem: Problem,
        traces: Sequence[StoredTrace],
        positions: Sequence[np.ndarray],
        generator: GeneratorInfo,
    ) -> list[list[ProbeResult]]:
        """Probe stored traces (the probe stage) so that the radix cache shares their prefixes.

        Request = prompt (the probe model's chat template) + the trace's first d tokens (the
        generator's ids, or its text re-encoded for another vocabulary) + the suffix,
        ``max_new_tokens`` = :attr:`probe_max_new_tokens`, the traces' sampling with
        ``sampling_seed`` :func:`probe_seed` (seed, qid, trace_idx, d) as inline probes.  Order:
        the traces go in waves (:meth:`wave_size`); within a wave, tier by tier — every trace's
        1st probe, then every 2nd, … — in engine calls of :attr:`probe_batch_size` requests, so
        when a trace's next probe comes its previous prefix is in the radix cache.  The engine's
        ``prompt_tokens``, ``cached_tokens`` and ``completion_tokens`` go into each result.
        """
        _gen, prompt, plan = self.probe_plan(problem, traces, positions, generator.manifest)
        seed = int(generator.manifest.get("seed", 0))
        out: list[list[Any]] = [[None] * len(p) for p in positions]
        todo = [i for i, p in enumerate(positions) if len(p)]
        if not todo:
            return out
        longest = max(len(prompt) + len(plan[i][-1]) + len(self.suffix_ids) for i in todo)
        wave = self.wave_size(len(todo), longest + self.probe_max_new_tokens)
        for lo in range(0, len(todo), wave):
            members = todo[lo : lo + wave]
            tiers = max(len(positions[i]) for i in members)
            for k in range(tiers):
                tier = [i for i in members if k < len(positions[i])]
                for b in range(0, len(tier), self.probe_batch_size):
                    batch = tier[b : b + self.probe_batch_size]
                    self._probe_requests(
                        problem, seed, prompt, [(i, k) for i in batch], traces, positions, plan, out
                    )
        return out

    def _probe_requests(self, problem, seed, prompt, reqs, traces, positions, plan, out) -> None:
        """One engine call: the probes ``reqs`` = [(trace i, its k-th probe), …]."""
        ids, params = [], []
        for i, k in reqs:
            d = int(positions[i][k])
            ids.append(prompt + [int(t) for t in plan[i][k]] + self.suffix_ids)
            s = (
                probe_seed(seed, problem.qid, traces[i].trace_idx, d)
                if self.seed_per_trace
                else None
            )
            params.append(self.sampling_params(self.probe_max_new_tokens, s))
        outs = self.generate(ids, params, logprobs=False)
        self.stats["probe_calls"] += 1
        for (i, k), req, o in zip(reqs, ids, outs):
            g = parse_generation(o, self.probe_max_new_tokens)
            text = g["text"]
            if text is None:
                text = self.tokenizer.decode(g["ids"], skip_special_tokens=True)
            for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
                self.stats[f"probe_{key}"] += g[key] or 0
            self.stats["retractions"] += g["retractions"] or 0
            confs = traces[i].confs
            out[i][k] = ProbeResult(
                answer=parse_probe(text),
                raw_text="\\boxed{" + text,
                conf=None if confs is None else window_conf(confs, int(positions[i][k])),
                prompt_tokens=g["prompt_tokens"] if g["prompt_tokens"] is not None else len(req),
                cached_tokens=g["cached_tokens"],
                generated_tokens=g["completion_tokens"],
            )

    def sampling_params(self, max_new_tokens: int, seed: int | None) -> dict:
        sp: dict[str, Any] = {
            "max_new_tokens": int(max_new_tokens),
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
        }
        if self.min_p is not None:
            sp["min_p"] = float(self.min_p)
        if seed is not None:
            sp["sampling_seed"] = int(seed)
        elif self.seed_per_trace or self.deterministic:
            # SGLang gives a seedless request the seed 42 under deterministic inference
            raise ValueError("a request without sampling_seed would get SGLang's default seed")
        return sp

    def generate(
        self, input_ids: list[list[int]], sampling_params: list[dict], logprobs: bool
    ) -> list[dict]:
        """One batched engine call; returns the per-request results in request order."""
        kwargs = {"return_logprob": True, "top_logprobs_num": CONF_TOP_K} if logprobs else {}
        outs = self.engine.generate(input_ids=input_ids, sampling_params=sampling_params, **kwargs)
        if isinstance(outs, dict):
            outs = [outs]
        outs = list(outs)
        if len(outs) != len(input_ids):
            raise EngineOutputError(
                f"engine returned {len(outs)} results for {len(input_ids)} requests"
            )
        return outs

    def shutdown(self) -> None:
        """Stop the engine if this backend started it."""
        if self._owns_engine and self.engine is not None:
            self.engine.shutdown()
            self.engine = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()


class SGLangTraceBatch(TokenTraceBatch):
    """``n`` traces of one question, continued checkpoint by checkpoint through the engine."""

    def __init__(
        self, backend: SGLangBackend, problem: Problem, n: int, seed: int, first_trace: int
    ):
        super().__init__(backend, problem, n, seed, first_trace)
        self._texts: list[list[str]] = [
            [] for _ in range(self.n)
        ]  # engine text, without a tokenizer

    def _seed(self, j: int) -> int | None:
        """The trace's ``sampling_seed`` (the same for all its generation requests)."""
        if not self.backend.seed_per_trace:
            return None
        return trace_seed(self.seed, self.problem.qid, self.first_trace + j)

    def _probe_seed(self, j: int, position: int) -> int | None:
        if not self.backend.seed_per_trace:
            return None
        return probe_seed(self.seed, self.problem.qid, self.first_trace + j, position)

    def advance(self, target: int) -> None:
        be = self.backend
        target = min(int(target), be.max_tokens)
        lengths = self.lengths
        run = np.flatnonzero(~self.ended & (lengths < target)).tolist()
        if not run:
            return
        want = [target - int(lengths[j]) for j in run]
        outs = be.generate(
            [self.prompt + self._ids[j] for j in run],
            [be.sampling_params(m, self._seed(j)) for j, m in zip(run, want)],
            logprobs=True,
        )
        be.stats["generate_calls"] += 1
        for j, m, out in zip(run, want, outs):
            g = parse_generation(out, m)
            self._ids[j].extend(g["ids"])
            if g["confs"] is None:
                self._has_confs = False
            else:
                self._confs[j].extend(finite_confs(g["confs"], self._confs[j]))
            if g["text"] is not None:
                self._texts[j].append(g["text"])
            if g["finish"] == "stop":
                self._eos[j] = True
            be.stats["generate_prompt_tokens"] += g["prompt_tokens"] or 0
            be.stats["generate_cached_tokens"] += g["cached_tokens"] or 0
            be.stats["generate_completion_tokens"] += g["completion_tokens"] or 0
            be.stats["retractions"] += g["retractions"] or 0

    def probe(self, idx) -> list[ProbeResult]:
        be = self.backend
        idx = self._probe_targets(idx)
        if idx.size == 0:
            return []
        js = idx.tolist()
        pos = [len(self._ids[j]) for j in js]
        outs = be.generate(
            [self.prompt + self._ids[j][:p] + be.suffix_ids for j, p in zip(js, pos)],
            [
                be.sampling_params(be.probe_max_new_tokens, self._probe_seed(j, p))
                for j, p in zip(js, pos)
            ],
            logprobs=False,
        )
        be.stats["probe_calls"] += 1
        res = []
        for j, p, out in zip(js, pos, outs):
            g = parse_generation(out, be.probe_max_new_tokens)
            text = g["text"]
            if text is None:
                text = be.tokenizer.decode(g["ids"], skip_special_tokens=True)
            for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
                be.stats[f"probe_{key}"] += g[key] or 0
            be.stats["retractions"] += g["retractions"] or 0
            res.append(
                ProbeResult(
                    answer=parse_probe(text),
                    raw_text="\\boxed{" + text,
                    conf=window_conf(self._confs[j], p) if self._has_confs else None,
                    prompt_tokens=g["prompt_tokens"]
                    if g["prompt_tokens"] is not None
                    else len(self.prompt) + p + len(be.suffix_ids),
                    cached_tokens=g["cached_tokens"],
                    generated_tokens=g["completion_tokens"],
                )
            )
        return res

    def _text(self, j: int) -> str:
        tok = self.backend.tokenizer
        return (
            tok.decode(self._ids[j], skip_special_tokens=True)
            if tok is not None
            else "".join(self._texts[j])
        )
