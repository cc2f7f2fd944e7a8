"""llama.cpp's ``llama-server``, native ``POST /completion``: token-id prompts, token ids and
cached-token counts back (its OpenAI route returns no token ids), and the sampler chain of vLLM
and SGLang sent explicitly so the server's own defaults (penalties, min-p 0.05) stay off."""

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


class LlamaCppProtocol(Protocol):
    """llama.cpp's ``llama-server``, native ``/completion`` (token ids and cache counts)."""

    kind = "llama.cpp"
    path = "/completion"
    logprobs_mode = "log_softmax(logits) (llama.cpp n_probs, before sampling)"
    seeds = "per request (the request's sampler RNG)"
    owned_by = ("llamacpp",)
    serves_tokenizer = True
    #: llama.cpp stops a request only when its stream closes (a non-streamed one runs to its end
    #: after its connection is gone)
    streamed = True
    #: its documented behaviour: text in a script the vocabulary splits into bytes has many
    omits_logprobs_inside_characters = True
    #: llama.cpp counts the prompt tokens it computed ("excluding cached tokens"), and the cached
    #: ones apart; it serves ``/metrics`` only when started with ``--metrics``
    metrics_reading = MetricsReading(
        generated="llamacpp:tokens_predicted_total",
        running="llamacpp:requests_processing",
        waiting="llamacpp:requests_deferred",
        cached=("llamacpp:prompt_tokens_cached_total",),
        computed="llamacpp:prompt_tokens_total",
        flag="--metrics",
    )
    #: the sampler chain of vLLM and SGLang (temperature first), nothing else
    SAMPLERS = ("temperature", "top_k", "top_p", "min_p")

    def info_paths(self) -> tuple[str, ...]:
        return ("/props",)

    def default_concurrency(self, report: dict) -> int | None:
        """The server's slots (``--parallel``): requests decoded together."""
        return reported_count(dig(report, "/props", "total_slots"))

    @staticmethod
    def merge_stream(events: list) -> dict:
        return merge_llama_stream(events)

    @staticmethod
    def streamed_tokens(events: list) -> int:
        return sum(
            len(e["tokens"])
            for e in events
            if isinstance(e, dict) and isinstance(e.get("tokens"), list)
        )

    def tokenize(self, text: str, add_special_tokens: bool = False) -> tuple[str, dict]:
        # special tokens written in the text (``</think>``) are parsed, as transformers does
        return "/tokenize", {
            "content": text,
            "add_special": bool(add_special_tokens),
            "parse_special": True,
        }

    def detokenize(self, ids: list[int]) -> tuple[str, dict]:
        return "/detokenize", {"tokens": ids}

    def text_of(self, out: dict) -> Any:
        return out.get("content")

    def chat_template(self, report: dict) -> str | None:
        return (report.get("/props") or {}).get("chat_template") or None

    def n_vocab(self, report: dict) -> Any:
        return ((report.get("model") or {}).get("meta") or {}).get("n_vocab")

    def bos_eos(self, report: dict) -> tuple[Any, Any]:
        props = report.get("/props") or {}
        return props.get("bos_token"), props.get("eos_token")

    def special_markup(self, tokenizer: Any, report: dict) -> tuple[str, set[int]]:
        # the markup the chat template writes; /tokenize adds no special token of its own
        return (report.get("/props") or {}).get("chat_template") or "", set()

    def apply_template(
        self, tokenizer: Any, messages: list[dict], add_generation_prompt: bool, tokenize: bool
    ) -> Any:
        out = tokenizer.ask("/apply-template", {"messages": messages})
        text = out.get("prompt")
        if not isinstance(text, str):
            raise MarsError("the server's /apply-template answered no prompt")
        if not add_generation_prompt:
            raise MarsError("llama.cpp's /apply-template always adds the generation prompt")
        return tokenizer.encode(text, add_special_tokens=False) if tokenize else text

    def body(
        self, ids: list[int], max_new: int, s: Sampling, seed: int | None, logprobs: bool
    ) -> dict:
        body: dict[str, Any] = {
            "prompt": list(ids),
            "n_predict": int(max_new),
            "temperature": s.temperature,
            "top_k": s.top_k,
            "top_p": s.top_p,
            "min_p": float(s.min_p or 0.0),
            "samplers": list(self.SAMPLERS),
            "cache_prompt": True,
            "return_tokens": True,
            "stream": False,
        }
        if seed is not None:
            body["seed"] = int(seed)
        if logprobs:
            body["n_probs"] = CONF_TOP_K
            body["post_sampling_probs"] = False
        return body

    def parse(self, out: Any, max_new: int, logprobs: bool) -> Completion:
        where = "llama.cpp /completion"
        if not isinstance(out, dict) or not isinstance(out.get("tokens"), list):
            raise ServerError(f"{where}: no token ids in the answer (a llama-server too old?)")
        ids = [read_int(t, "a token id") for t in out["tokens"]]
        stop = out.get("stop_type")
        if stop not in ("eos", "limit"):
            raise ServerError(f"{where}: unexpected stop_type {stop!r}")
        if out.get("truncated"):
            raise ServerError(f"{where}: the request did not fit the slot's context")
        confs = None
        if logprobs:
            probs = out.get("completion_probabilities")
            if not isinstance(probs, list):
                raise ServerError(f"{where}: no completion_probabilities in the answer")
            confs = align_llama_confs(ids, probs, where)
        timings = out.get("timings")
        cached = timings.get("cache_n") if isinstance(timings, dict) else None
        prompt = out.get("tokens_evaluated")
        c = Completion(
            ids=ids,
            confs=confs,
            finished=stop == "eos",
            text=str(out.get("content") or ""),
            prompt_tokens=None if prompt is None else read_int(prompt, "tokens_evaluated"),
            cached_tokens=None if cached is None else read_int(cached, "timings.cache_n"),
            completion_tokens=read_int(out.get("tokens_predicted", len(ids)), "tokens_predicted"),
        )
        return self._check_length(c, max_new, where)

    def context_length(self, report):
        n = dig(report, "/props", "default_generation_settings", "n_ctx")
        return reported_count(n if n is not None else dig(report, "model", "meta", "n_ctx"))

    def version(self, report):
        return reported_label(dig(report, "/props", "build_info"))

    def model_path(self, report):
        return reported_path(dig(report, "/props", "model_path"))

    def reproducible(self, report):
        return (
            "per-request seeds are honoured; llama.cpp's logits are not bit-identical across "
            "batch compositions and cache states, so a repeated run may differ"
        )


def align_llama_confs(ids: list[int], probs: list, where: str) -> list[float]:
    """Confidences of ``ids`` from llama.cpp's ``completion_probabilities``.

    llama.cpp sends no entry for a token after which the text ends inside a multi-byte
    character; the entry of the token that completes it follows.  Entries are matched to
    tokens by id from the end, each to the latest token of its id not yet matched: the entry of
    a character belongs to the last token of its run.  Unmatched tokens get NaN.
    """
    confs = [float("nan")] * len(ids)
    k = len(probs) - 1
    for j in range(len(ids) - 1, -1, -1):
        if k < 0:
            break
        entry = probs[k]
        if not isinstance(entry, dict) or not isinstance(entry.get("top_logprobs"), list):
            raise ServerError(f"{where}: a completion_probabilities entry without top_logprobs")
        if read_int(entry.get("id"), "a token id") != ids[j]:
            continue
        tops = entry["top_logprobs"]
        for e in tops:
            if not isinstance(e, dict) or "logprob" not in e:
                raise ServerError(
                    f"{where}: a top log-probability entry that is not an object with a logprob "
                    f"({shown(e, 40)})"
                )
        confs[j] = top_confidence([e["logprob"] for e in tops], where)
        k -= 1
    if k >= 0:
        raise ServerError(f"{where}: log-probabilities of tokens it did not generate")
    return confs


def merge_llama_stream(events: list) -> dict:
    """The answer llama.cpp's ``/completion`` gives unstreamed, from the events of its stream: the
    last event (``stop``: its end, counts and timings) with every event's text, token ids and
    log-probabilities joined."""
    if not events or not isinstance(events[-1], dict) or not events[-1].get("stop"):
        raise ServerError("llama.cpp /completion: the stream ended before its last event")
    if not all(isinstance(e, dict) for e in events):
        raise ServerError("llama.cpp /completion: a streamed event that is not an object")
    out = dict(events[-1])
    out["content"] = "".join(str(e.get("content") or "") for e in events)
    out["tokens"] = [t for e in events for t in (e.get("tokens") or ())]
    if any("completion_probabilities" in e for e in events):
        out["completion_probabilities"] = [
            p for e in events for p in (e.get("completion_probabilities") or ())
        ]
    return out
