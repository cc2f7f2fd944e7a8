"""vLLM's OpenAI-compatible ``POST /v1/completions`` with its token-id extensions
(``return_token_ids``; top log-probabilities keyed by id, so two tokens that decode alike do not
collide).  Pinned against vLLM's CPU build by ``tests/engines/server/test_vllm.py``."""

from __future__ import annotations

import logging
from typing import Any

from ...errors import MarsError
from ..endpoint import shown
from ..tokens import (
    CONF_TOP_K,
)
from .errors import ServerError
from .protocol import (
    Completion,
    MetricsReading,
    Protocol,
    Sampling,
    dig,
    read_int,
    reported_count,
    reported_label,
    reported_path,
    top_confidence,
)

log = logging.getLogger(__name__)


class VLLMProtocol(Protocol):
    """vLLM's OpenAI-compatible ``/v1/completions`` with its token-id extensions."""

    kind = "vllm"
    path = "/v1/completions"
    logprobs_mode = (
        "the server's --logprobs-mode (default raw_logprobs: log_softmax(logits)), clamped at -9999"
    )
    seeds = "per request (a generator per request)"
    owned_by = ("vllm",)
    serves_tokenizer = True
    #: vLLM counts every prompt token, and the cached ones apart (as its answers'
    #: ``cached_tokens``, vLLM 0.11 on; its prefix cache's hits before)
    metrics_reading = MetricsReading(
        generated="vllm:generation_tokens_total",
        running="vllm:num_requests_running",
        waiting="vllm:num_requests_waiting",
        cached=("vllm:prompt_tokens_cached_total", "vllm:prefix_cache_hits_total"),
        hits="vllm:prefix_cache_hits_total",
        prompt="vllm:prompt_tokens_total",
    )

    def info_paths(self) -> tuple[str, ...]:
        return ("/version",)

    def trial_hint(self, message: str) -> str:
        return ": start vLLM with --max-logprobs 20 or more" if "logprob" in message.lower() else ""

    def chat_template(self, report: dict) -> str | None:
        return "the server's"  # vLLM applies the model's template to the messages it is given

    def special_markup(self, tokenizer: Any, report: dict) -> tuple[str, set[int]]:
        """vLLM says neither its template nor its special tokens: they are read off its answers,
        the markup of a conversation its chat template writes (``<|im_start|>``,
        ``<|im_end|>``..., the end of a turn being the end of text of a chat model) and the ids
        ``add_special_tokens`` adds (a begin-of-text token); none when it cannot say (a model
        without a chat template)."""
        try:
            plain = tokenizer.encode("1", add_special_tokens=False)
            added = set(tokenizer.encode("1", add_special_tokens=True)) - set(plain)
            ids = tokenizer.apply_chat_template([{"role": "user", "content": "1"}], tokenize=True)
            rendered = tokenizer.ask(*self.detokenize(ids))
        except MarsError:
            return "", set()
        return str(rendered.get("prompt") or ""), added

    def apply_template(
        self, tokenizer: Any, messages: list[dict], add_generation_prompt: bool, tokenize: bool
    ) -> Any:
        body = {
            "model": self.model,
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
            "add_special_tokens": False,
        }
        ids = tokenizer.ask("/tokenize", body).get("tokens")
        if not isinstance(ids, list):
            raise MarsError("the server's /tokenize of the messages answered no tokens")
        if tokenize:
            return [int(i) for i in ids]
        return tokenizer.decode(ids)

    def body(
        self, ids: list[int], max_new: int, s: Sampling, seed: int | None, logprobs: bool
    ) -> dict:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(ids),
            "max_tokens": int(max_new),
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k or -1,
            "min_p": float(s.min_p or 0.0),
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "n": 1,
            "stream": False,
            "return_token_ids": True,
            "skip_special_tokens": True,
        }
        if seed is not None:
            body["seed"] = int(seed)
        if logprobs:
            body["logprobs"] = CONF_TOP_K
            body["return_tokens_as_token_ids"] = True
        return body

    def parse(self, out: Any, max_new: int, logprobs: bool) -> Completion:
        where = "vLLM /v1/completions"
        choices = out.get("choices") if isinstance(out, dict) else None
        if not isinstance(choices, list) or len(choices) != 1:
            raise ServerError(f"{where}: expected one choice in the answer")
        ch = choices[0]
        if not isinstance(ch, dict) or not isinstance(ch.get("token_ids"), list):
            raise ServerError(f"{where}: no token_ids (a vLLM without return_token_ids?)")
        ids = [read_int(t, "a token id") for t in ch["token_ids"]]
        finish = ch.get("finish_reason")
        if finish not in ("stop", "length"):
            raise ServerError(f"{where}: unexpected finish_reason {finish!r}")
        if finish == "stop" and ch.get("stop_reason") is not None:
            raise ServerError(f"{where}: stopped by {ch['stop_reason']!r}, not end of text")
        confs = None
        if logprobs:
            lp = ch.get("logprobs")
            top = lp.get("top_logprobs") if isinstance(lp, dict) else None
            if not isinstance(top, list):
                raise ServerError(f"{where}: no top_logprobs in the answer")
            bad = next((t for t in top if t is not None and not isinstance(t, dict)), None)
            if bad is not None:
                raise ServerError(
                    f"{where}: a top log-probabilities entry that is not a dict ({shown(bad, 40)})"
                )
            confs = [
                float("nan") if t is None else top_confidence(list(t.values()), where) for t in top
            ]
        usage = out.get("usage") if isinstance(out.get("usage"), dict) else {}
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        prompt = usage.get("prompt_tokens")
        c = Completion(
            ids=ids,
            confs=confs,
            finished=finish == "stop",
            text=str(ch.get("text") or ""),
            prompt_tokens=None if prompt is None else read_int(prompt, "usage.prompt_tokens"),
            cached_tokens=None if cached is None else read_int(cached, "cached_tokens"),
            completion_tokens=read_int(
                usage.get("completion_tokens", len(ids)), "usage.completion_tokens"
            ),
        )
        return self._check_length(c, max_new, where)

    def context_length(self, report):
        return reported_count(dig(report, "model", "max_model_len"))

    def version(self, report):
        return reported_label(dig(report, "/version", "version"))

    def model_path(self, report):
        return reported_path(dig(report, "model", "root"))

    def reproducible(self, report):
        return (
            "per-request seeds are honoured: a request the server runs alone repeats bit for bit "
            "(--concurrency 1) once its prompt is in the prefix cache (on the CPU build the first "
            "run, prefilled without the cache, can part from the repeats), but beside other "
            "requests its log-probabilities move (by up to "
            "0.5 nats on vLLM 0.32's CPU build) and its tokens can part from the same request run "
            "alone; bit-exact repeats in batches need VLLM_BATCH_INVARIANT=1 (GPU backends only), "
            "the same hardware and version"
        )
