"""SGLang backend: ``sglang.Engine`` offline, token-id requests, radix-cache-served probes.

Install with ``pip install 'mars[sglang]'`` (CUDA only).  **Not run on a live SGLang engine in
this project** (no GPU with SGLang was available): the adapter is tested against hand-written
engine outputs shaped like SGLang 0.5.x's ``meta_info`` (``tests/data/sglang/``, replayed by a fake
engine), see docs/backends.md.

How a batch of N traces of one question runs (one :class:`SGLangTraceBatch`):

* **Prompt**: the tokenizer's chat template (user message = question + ``\\boxed{}`` instruction,
  generation prompt added), sent as **token ids** (never re-tokenised text, so prefixes stay exact).
* **advance(target)**: one batched ``engine.generate(input_ids=[prompt + ids_j …],
  sampling_params=[{max_new_tokens: target − len_j, temperature, top_p, top_k, sampling_seed}, …],
  return_logprob=True, top_logprobs_num=20)`` for the running traces.  Each continuation's prefix
  (prompt + the trace so far) is served by the radix cache; its ``cached_tokens`` are kept in
  :attr:`SGLangBackend.stats`.  ``finish_reason = {"type": "stop", …}`` ends a trace (finished);
  ``{"type": "length", …}`` at the token cap ends it as cut.
* **Per-trace seed**: ``sampling_seed`` of every request is derived from (seed, qid, trace_idx,
  position of the request's first new token), so a trace is reproducible from (seed, qid, trace_idx)
  and the checkpoint grid *where the engine honours per-request seeds* (recent SGLang; bit-exact
  only with ``enable_deterministic_inference=True``, otherwise batch composition can change the
  float rounding).  ``seed_per_trace=False`` leaves the engine's own randomness (the reference: no
  seed).
* **Per-token confidence** = −mean of the 20 ``output_top_logprobs`` of the token, rounded to 3
  decimals (spec §3.1); NaN for a position the engine returned no top log-probabilities for.
  SGLang's log-probabilities are those of ``logits / temperature`` (before top-k/top-p) unless the
  engine runs with ``SGLANG_RETURN_ORIGINAL_LOGPROB=1``; :meth:`SGLangBackend.describe` records
  which (read from the environment when the backend is built), so it lands in the pool manifest.
* **probe(idx)**: ``input_ids = prompt + ids_j[:p] + suffix_ids`` (:data:`PROBE_SUFFIX`, spec §11),
  ``max_new_tokens = 50``, the same sampling; the radix cache serves prompt + trace
  (``cached_tokens`` ≈ P + p) and only the suffix is prefilled.  The completion's text →
  :func:`extract_probe_answer` → :func:`normalize_answer`; ``prompt_tokens``, ``cached_tokens``,
  ``completion_tokens`` of the engine's ``meta_info`` go into the ProbeResult.
* **Final answer**: last ``\\boxed{…}`` of the decoded trace, normalised once.

Data parallelism: ``dp_size > 1`` starts the engine's data-parallel replicas (one Engine per job).
Requests are then routed by the engine's load balancer, so a continuation or probe may land on a
replica that does not hold the trace's prefix; ``cached_tokens`` shows it.  For full cache reuse run
one engine per GPU job on its own shard (the workflow's default).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import MarsError
from ..problems import Problem
from .base import Backend, ProbeResult
from .tokens import (
    CONF_TOP_K,
    DEFAULT_PROMPT_TEMPLATE,
    PROBE_MAX_NEW_TOKENS,
    PROBE_SUFFIX,
    TokenTraceBatch,
    build_prompt_ids,
    derive_seed,
    encode_suffix,
    parse_probe,
    token_confidence,
    window_conf,
)

__all__ = [
    "EngineOutputError",
    "SGLangBackend",
    "SGLangTraceBatch",
    "parse_generation",
    "request_seed",
]

_PROBE_SALT = 0x9B0BE  # separates probe seeds from trace seeds


class EngineOutputError(RuntimeError):
    """The engine returned something the adapter cannot interpret."""


def request_seed(seed: int, qid: int, trace_idx: int, position: int, probe: bool = False) -> int:
    """``sampling_seed`` of a request: trace (or probe) of (seed, qid, trace_idx) from ``position``.

    31 bits (positive int32), as engines commonly take a C int.
    """
    parts = (seed, qid, trace_idx, position) + ((_PROBE_SALT,) if probe else ())
    return derive_seed(*parts, bits=31)


def _pairs(entries) -> list:
    """``[(logprob, token_id, text|None), …]`` entries (tuples or JSON lists) → list of tuples."""
    return [tuple(e) for e in entries] if entries else []


def parse_generation(out: dict, max_new_tokens: int | None = None) -> dict:
    """Interpret one ``engine.generate`` result (``{"text", "output_ids", "meta_info"}``).

    Returns ``{"ids", "confs", "finish", "matched", "text", "prompt_tokens", "cached_tokens",
    "completion_tokens"}``.  The generated tokens are those of ``meta_info.output_token_logprobs``
    when present (one ``(logprob, token_id, text)`` per generated position), else ``output_ids``;
    the two must agree where both exist.  ``finish`` is ``"stop"``, ``"length"`` or raises for
    ``"abort"`` / unknown types.
    """
    if not isinstance(out, dict) or "meta_info" not in out:
        raise EngineOutputError(f"not an engine result: {str(out)[:200]}")
    meta = out["meta_info"]
    fr = meta.get("finish_reason")
    if isinstance(fr, dict):
        ftype, matched = fr.get("type"), fr.get("matched", fr.get("length"))
    elif isinstance(fr, str):  # some frontends flatten it to a string
        ftype, matched = fr, None
    else:
        raise EngineOutputError(f"request {meta.get('id')}: no finish_reason ({fr!r})")
    if ftype == "abort":
        why = fr.get("message") if isinstance(fr, dict) else fr
        raise EngineOutputError(f"request {meta.get('id')} aborted: {why}")
    if ftype not in ("stop", "length"):
        raise EngineOutputError(f"request {meta.get('id')}: unknown finish_reason {fr!r}")
    token_lp = meta.get("output_token_logprobs")
    out_ids = out.get("output_ids")
    if token_lp is not None:
        ids = [int(e[1]) for e in _pairs(token_lp)]
        if out_ids is not None and list(map(int, out_ids)) != ids:
            raise EngineOutputError(
                f"request {meta.get('id')}: output_ids and output_token_logprobs disagree"
            )
    elif out_ids is not None:
        ids = [int(t) for t in out_ids]
    else:
        raise EngineOutputError(
            f"request {meta.get('id')}: neither output_ids nor output_token_logprobs"
        )
    top = meta.get("output_top_logprobs")
    if token_lp is not None and top is not None:
        if len(top) != len(ids):
            raise EngineOutputError(
                f"request {meta.get('id')}: {len(top)} top-logprob entries for {len(ids)} tokens"
            )
        confs = [token_confidence([e[0] for e in _pairs(entry)]) for entry in top]
    else:
        confs = None
    completion = meta.get("completion_tokens")
    if completion is not None and int(completion) != len(ids):
        raise EngineOutputError(
            f"request {meta.get('id')}: completion_tokens {completion} for {len(ids)} tokens"
        )
    if max_new_tokens is not None and len(ids) > max_new_tokens:
        raise EngineOutputError(
            f"request {meta.get('id')}: {len(ids)} tokens for max_new_tokens {max_new_tokens}"
        )
    if ftype == "length" and max_new_tokens is not None and len(ids) != max_new_tokens:
        raise EngineOutputError(
            f"request {meta.get('id')}: finish 'length' after {len(ids)} of {max_new_tokens} tokens"
        )

    def _int(key):
        v = meta.get(key)
        return None if v is None else int(v)

    return {
        "ids": ids,
        "confs": confs,
        "finish": ftype,
        "matched": matched,
        "text": out.get("text"),
        "prompt_tokens": _int("prompt_tokens"),
        "cached_tokens": _int("cached_tokens"),
        "completion_tokens": _int("completion_tokens") if completion is not None else len(ids),
    }


class SGLangBackend(Backend):
    """An ``sglang.Engine`` behind the generation interface (see the module docstring).

    Args:
        model_path: model directory or hub id (the engine's ``model_path`` and the tokenizer's).
        engine: an engine-like object to use instead of starting one (tests inject a fake): it needs
            ``generate(input_ids=list[list[int]], sampling_params=list[dict], return_logprob=bool,
            top_logprobs_num=int)`` returning one ``{"text", "output_ids", "meta_info"}`` per
            request.
        tokenizer: a transformers-like tokenizer (``apply_chat_template``, ``__call__``, ``encode``,
            ``decode``); default ``AutoTokenizer.from_pretrained(model_path)``.
        dp_size, tp_size, mem_fraction_static, context_length, random_seed, engine_kwargs: engine
            arguments (``sglang.Engine(**ServerArgs)``).
        temperature, top_p, top_k, min_p: sampling (``top_k=None``/0: off — sent as −1).
        max_tokens: token cap of a trace.
        probe_max_new_tokens: new tokens of a probe (spec: 50).
        seed_per_trace: send a per-request ``sampling_seed`` (see :func:`request_seed`).
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
        if max_tokens <= 0 or probe_max_new_tokens <= 0 or dp_size <= 0 or tp_size <= 0:
            raise MarsError(
                "max_tokens, probe_max_new_tokens, dp_size and tp_size must be positive"
            )
        if "{question}" not in prompt_template:
            raise MarsError("prompt_template must contain '{question}'")
        self.model_path = str(model_path)
        self.model = str(name or model_path)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.top_k = int(top_k) if top_k else -1
        self.min_p = min_p
        self.max_tokens = int(max_tokens)
        self.probe_max_new_tokens = int(probe_max_new_tokens)
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
        if engine is None:
            try:
                import sglang
            except ImportError as exc:
                raise ImportError(
                    "the SGLang backend needs sglang (CUDA): pip install 'mars[sglang]'"
                ) from exc
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
            engine = sglang.Engine(**kwargs)
        self.engine = engine
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.tokenizer = tokenizer
        self.suffix_ids = encode_suffix(tokenizer)
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
        }

    # -- interface -------------------------------------------------------------------------------

    def start(
        self, problem: Problem, n_traces: int, seed: int, first_trace: int = 0
    ) -> SGLangTraceBatch:
        self.check_start(n_traces, seed, first_trace)
        return SGLangTraceBatch(self, problem, n_traces, seed, first_trace)

    def describe(self) -> dict:
        """Provenance for a pool manifest."""
        return {
            "backend": self.name,
            "model": self.model,
            "sampling": {
                "temperature": self.temperature,
                "top_p": self.top_p,
                "top_k": self.top_k,
                "min_p": self.min_p,
                "sampling_seed": "per request (seed, qid, trace_idx, position)"
                if self.seed_per_trace
                else None,
            },
            "logprobs": (
                "log_softmax(logits) (SGLANG_RETURN_ORIGINAL_LOGPROB=1)"
                if self.original_logprobs
                else "log_softmax(logits / temperature) (SGLang default)"
            ),
            "conf": f"-mean(top-{CONF_TOP_K} logprobs), 3 decimals, float16",
            "probe_max_new_tokens": self.probe_max_new_tokens,
            "probe_suffix": PROBE_SUFFIX,
            "prompt_template": self.prompt_template,
            "system_prompt": self.system_prompt,
            "dp_size": self.dp_size,
            "tp_size": self.tp_size,
        }

    def prompt_ids(self, question: str) -> list[int]:
        return build_prompt_ids(self.tokenizer, question, self.prompt_template, self.system_prompt)

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

    def _seed(self, j: int, position: int, probe: bool = False) -> int | None:
        if not self.backend.seed_per_trace:
            return None
        return request_seed(self.seed, self.problem.qid, self.first_trace + j, position, probe)

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
            [be.sampling_params(m, self._seed(j, int(lengths[j]))) for j, m in zip(run, want)],
            logprobs=True,
        )
        be.stats["generate_calls"] += 1
        for j, m, out in zip(run, want, outs):
            g = parse_generation(out, m)
            self._ids[j].extend(g["ids"])
            if g["confs"] is None:
                self._has_confs = False
            else:
                self._confs[j].extend(g["confs"])
            if g["text"] is not None:
                self._texts[j].append(g["text"])
            if g["finish"] == "stop":
                self._eos[j] = True
            be.stats["generate_prompt_tokens"] += g["prompt_tokens"] or 0
            be.stats["generate_cached_tokens"] += g["cached_tokens"] or 0
            be.stats["generate_completion_tokens"] += g["completion_tokens"] or 0

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
                be.sampling_params(be.probe_max_new_tokens, self._seed(j, p, probe=True))
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
