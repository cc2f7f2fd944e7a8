"""SGLang's native ``POST /generate`` (``input_ids``, ``sampling_seed``, ``top_logprobs_num``),
read by the in-process engine's own parser (:func:`mars.engines.sglang.parse_generation`), so the
two SGLang paths agree on what an answer means."""

from __future__ import annotations

import logging
from typing import Any

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
    one_line,
    reported_count,
    reported_label,
    reported_path,
    top_confidence,
)

log = logging.getLogger(__name__)


class SGLangProtocol(Protocol):
    """SGLang's native ``/generate`` (token ids, seeds, ``meta_info.cached_tokens``)."""

    kind = "sglang"
    path = "/generate"
    logprobs_mode = (
        "log_softmax(logits / temperature) (SGLang's default; log_softmax(logits) if the "
        "server runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1)"
    )
    seeds = "sampling_seed per request (honoured under --enable-deterministic-inference)"
    owned_by = ("sglang",)
    #: SGLang's documented names (``--enable-metrics``), not pinned by a test here
    metrics_reading = MetricsReading(
        generated="sglang:generation_tokens_total",
        running="sglang:num_running_reqs",
        waiting="sglang:num_queue_reqs",
        cached=("sglang:cached_tokens_total",),
        prompt="sglang:prompt_tokens_total",
        flag="--enable-metrics",
    )

    def info_paths(self) -> tuple[str, ...]:
        return ("/get_server_info", "/get_model_info")

    def body(
        self, ids: list[int], max_new: int, s: Sampling, seed: int | None, logprobs: bool
    ) -> dict:
        sp: dict[str, Any] = {
            "max_new_tokens": int(max_new),
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k or -1,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
        }
        if s.min_p:
            sp["min_p"] = float(s.min_p)
        if seed is not None:
            sp["sampling_seed"] = int(seed)
        body: dict[str, Any] = {"input_ids": list(ids), "sampling_params": sp, "stream": False}
        if logprobs:
            body.update(return_logprob=True, top_logprobs_num=CONF_TOP_K, logprob_start_len=-1)
        return body

    def parse(self, out: Any, max_new: int, logprobs: bool) -> Completion:
        from ..sglang import EngineOutputError, parse_generation

        where = "SGLang /generate"
        meta = out.get("meta_info") if isinstance(out, dict) else None
        top = meta.get("output_top_logprobs") if isinstance(meta, dict) else None
        confs = None
        if logprobs:  # read first: parse_generation reads them without asking what they are
            if not isinstance(top, list):
                raise ServerError(f"{where}: no top log-probabilities for every token")
            for e in top:
                for x in [e] if e and not isinstance(e, list) else e or []:
                    if not isinstance(x, list) or not x:
                        raise ServerError(
                            f"{where}: a top log-probability entry that is not a list "
                            f"({shown(x, 40)})"
                        )
            confs = [
                float("nan") if not e else top_confidence([x[0] for x in e], where) for e in top
            ]
        try:
            g = parse_generation(out, max_new)
        except EngineOutputError as exc:
            raise ServerError(f"{where}: {one_line(exc)}") from None
        except (TypeError, ValueError, KeyError, IndexError, OverflowError) as exc:
            raise ServerError(f"{where}: a malformed answer ({one_line(exc, 80)})") from None
        if confs is not None and len(confs) != len(g["ids"]):
            raise ServerError(f"{where}: no top log-probabilities for every token")
        text = g["text"]
        c = Completion(
            ids=g["ids"],
            confs=confs,
            finished=g["finish"] == "stop",
            text="" if text is None else str(text),
            prompt_tokens=g["prompt_tokens"],
            cached_tokens=g["cached_tokens"],
            completion_tokens=g["completion_tokens"],
        )
        return self._check_length(c, max_new, where)

    def context_length(self, report):
        n = reported_count(dig(report, "model", "max_model_len"))
        return n or reported_count(dig(report, "/get_server_info", "context_length"))

    def version(self, report):
        return reported_label(dig(report, "/get_server_info", "version"))

    def model_path(self, report):
        tok = reported_path(dig(report, "/get_model_info", "tokenizer_path"))
        return tok or reported_path(dig(report, "/get_model_info", "model_path"))

    def reproducible(self, report):
        det = dig(report, "/get_server_info", "enable_deterministic_inference")
        if det is True:
            return "yes: the server runs with deterministic inference (seeds honoured)"
        return (
            "no: the server does not report --enable-deterministic-inference, so SGLang ignores "
            "the seeds"
        )
