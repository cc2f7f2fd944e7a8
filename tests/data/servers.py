"""Fake llama.cpp, vLLM, SGLang and llama-cpp-python servers for the server backend's tests
(httpx mock transports).

NOT recordings of live vLLM or SGLang servers: neither runs on this project's CPU machines.  The
answers are built to the shapes the servers' sources give them (``shared/spec/serving.md``):

* **vLLM** (0.33 line, ``vllm/entrypoints/openai/completion/serving.py``): ``/v1/models`` cards
  with ``owned_by: "vllm"``, ``root`` and ``max_model_len``; ``/version``; ``/tokenize`` →
  ``{count, max_model_len, tokens, token_strs}``; ``/v1/completions`` → one choice with
  ``text``, ``token_ids`` (``return_token_ids``), ``finish_reason`` / ``stop_reason``, legacy
  ``logprobs`` (``tokens``, ``token_logprobs``, ``text_offset``, ``top_logprobs``: a dict per
  token keyed ``"token_id:N"`` under ``return_tokens_as_token_ids``, holding the sampled token
  and the top ``logprobs`` — ``logprobs`` + 1 entries when the sampled token is not among them —,
  log-probabilities clamped at −9999), ``usage`` with ``prompt_tokens_details.cached_tokens``
  only when the server runs with ``--enable-prompt-tokens-details`` (else ``null``); more top
  log-probabilities than ``--max-logprobs`` is an HTTP 400 with vLLM's message.
* **SGLang** (0.5.23 line, ``http_server.py``, ``tokenizer_manager.py``): ``/v1/models`` with
  ``owned_by: "sglang"``; ``/get_server_info`` (server arguments + scheduler info + version),
  ``/get_model_info``; ``/tokenize``; native ``/generate`` → ``{text, output_ids, meta_info}``
  with ``finish_reason`` a dict, ``output_token_logprobs`` / ``output_top_logprobs`` as
  ``[logprob, id, null]`` triples, ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``.
* **llama.cpp** (``tools/server``, build 11434): ``/v1/models`` with ``owned_by: "llamacpp"``
  and ``meta.n_ctx``; ``/props``; ``/tokenize`` → ``{tokens}``; native ``/completion`` with
  ``tokens`` (``return_tokens``), ``stop_type``, ``tokens_predicted``, ``tokens_evaluated``,
  ``timings.cache_n`` and ``completion_probabilities`` (no entry for a token after which the text
  ends inside a multi-byte character: :attr:`FakeServer.split_chars`).
* **llama-cpp-python** (``llama_cpp/server``, 0.3.36, its source read and its answers checked
  against the real server on SmolLM2-135M): ``/v1/models`` cards ``{id, object, owned_by: "me",
  permissions: []}`` and no other report; ``/extras/tokenize`` ``{input}`` → ``{tokens}`` (special
  tokens parsed, the model's BOS first when it adds one: :attr:`FakeServer.bos`); no
  ``/tokenize``; ``/v1/completions`` takes text only — a ``prompt`` of token ids is a pydantic
  validation error that its route handler answers with HTTP **500** ``{"error": {"message": "N
  validation errors: …", "type": "internal_server_error", "param": null, "code": null}}`` —,
  tokenizes the text with the BOS it adds, and answers one choice ``{text, index, logprobs,
  finish_reason}`` (``stop`` at an end-of-generation token, which is neither in the text nor
  counted; ``length``) and ``usage`` ``{prompt_tokens, completion_tokens, total_tokens}`` (no
  cached tokens); ``logprobs`` = ``{tokens, text_offset, token_logprobs, top_logprobs}``, offsets
  counted from the start of the prompt text, each ``top_logprobs`` a dict keyed by the token's
  text holding the top ``logprobs`` and then the sampled token (tokens that decode alike share a
  key, the later, lower log-probability kept: :attr:`FakeServer.shared_keys`).  It may return
  more tokens than ``max_tokens`` (it finishes a multi-byte character first:
  :attr:`FakeServer.overshoot`), and its model may sample a split of a word that tokenizing the
  text again does not give (:attr:`FakeServer.split_words`).

The model behind them is a toy: every request's tokens are drawn from its seed (the same seed,
the same tokens), a trace ends with ``\\boxed{N}`` and EOS, a probe answers ``N}`` and EOS; each
token's top log-probabilities are drawn too and kept (:attr:`FakeServer.truth`) so tests compare
the backend's confidences with what the server sent.  Cached tokens follow a prefix cache: the
longest prefix of the request seen before (every request's input and output but its last token),
never the whole input.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import httpx
import numpy as np

_spec = importlib.util.spec_from_file_location(
    "sglang_toy", Path(__file__).resolve().parent / "sglang" / "toy.py"
)
toy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(toy)

#: the toy vocabulary plus what the tokenizer check's sample needs
VOCAB = [*toy.VOCAB, "≤", "—", "ï", "中", "文", "é"]
EOS = toy.EOS_ID
CONTEXT = 4096
WORDS = [" Let", " me", " add", " 2", " +", " 3", " =", " So", " the", " answer", " is", " wait"]


class Tokenizer(toy.ToyTokenizer):
    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def all_special_ids(self) -> list[int]:
        return sorted(self.special)


def tokenizer():
    return Tokenizer(VOCAB, EOS)


class FakeServer:
    """One fake server of ``kind``; ``handler`` answers httpx requests, ``transport()`` wraps it.

    Knobs: ``fail`` (a list of HTTP statuses to answer before the real answer, popped per
    completion request), ``delay`` (seconds before each completion answer), ``models`` (served
    names), ``max_logprobs`` (vLLM), ``cache_report`` (vLLM ``--enable-prompt-tokens-details``),
    ``split_chars`` (llama.cpp: positions whose log-probability entry is left out),
    ``extra_sampled`` (vLLM: add the sampled token outside the top 20), ``api_key``,
    ``deterministic`` (SGLang); llama-cpp-python: ``bos`` (the token id put before every text
    prompt, None: none), ``shared_keys`` (positions of a request's answer whose 2nd and 3rd top
    tokens share a key), ``split_words`` (positions sampled as one token per character),
    ``overshoot`` (tokens returned past ``max_tokens``), ``tokenize_route`` (False: no
    ``/extras/tokenize``, as other OpenAI-compatible servers); any kind: ``owned_by`` (what
    ``/v1/models`` says), ``mangle`` (``mangle(answer, request body)`` → the JSON object, or the
    bytes, a completion is answered with instead: a fault no real server produces on demand;
    JSON is written with ``NaN`` and ``Infinity`` as Python writes them).
    """

    def __init__(self, kind: str, **knobs):
        self.kind = kind
        self.tok = tokenizer()
        self.models = knobs.pop("models", ["toy/Toy-Reasoner"])
        self.fail: list[int] = list(knobs.pop("fail", []))
        self.delay = float(knobs.pop("delay", 0.0))
        self.max_logprobs = int(knobs.pop("max_logprobs", 20))
        self.cache_report = bool(knobs.pop("cache_report", True))
        self.split_chars = set(knobs.pop("split_chars", ()))
        self.extra_sampled = bool(knobs.pop("extra_sampled", False))
        self.api_key = knobs.pop("api_key", None)
        self.deterministic = bool(knobs.pop("deterministic", True))
        self.top_n = int(knobs.pop("top_n", 20))
        self.bos = knobs.pop("bos", None)
        self.shared_keys = set(knobs.pop("shared_keys", ()))
        self.split_words = set(knobs.pop("split_words", ()))
        self.overshoot = int(knobs.pop("overshoot", 0))
        self.owned_by = knobs.pop("owned_by", None)
        self.tokenize_route = bool(knobs.pop("tokenize_route", True))
        self.mangle = knobs.pop("mangle", None)
        assert not knobs, knobs
        self.requests: list[tuple[str, dict | None]] = []
        self.in_flight = self.most_in_flight = 0
        self.seen: list[tuple[int, ...]] = []
        self.truth: dict[tuple[tuple[int, ...], int], list[list[tuple[float, int]]]] = {}
        self.cached_of: dict[tuple[int, ...], int] = {}

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)

    # -- the toy model ---------------------------------------------------------------------

    def _cached(self, ids: list[int]) -> int:
        best = 0
        for s in self.seen:
            n = 0
            for a, b in zip(s, ids):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return min(best, len(ids) - 1)

    def run(self, ids: list[int], max_new: int, seed: int, logprobs: bool):
        """(tokens, finished, top entries per token, cached) of one request."""
        from mars.engines.tokens import PROBE_SUFFIX

        suffix = self.tok.encode(PROBE_SUFFIX)
        rng = np.random.default_rng([seed, len(ids)])
        answer = str(3 + len(ids) % 4)
        if ids[-len(suffix) :] == suffix:
            toks = self.tok.ids([answer, "}", "<|im_end|>"])
        else:
            toks = []
            while len(toks) < max_new:
                if rng.random() < 0.08 and len(toks) > 2:
                    toks += self.tok.ids(["\\boxed{", answer, "}", "<|im_end|>"])
                    break
                toks += self.tok.ids([WORDS[int(rng.integers(len(WORDS)))]])
        toks = toks[:max_new]
        if EOS in toks:
            toks = toks[: toks.index(EOS) + 1]
        finished = bool(toks) and toks[-1] == EOS
        tops = []
        for pos, t in enumerate(toks):
            others = rng.choice(np.setdiff1d(np.arange(len(VOCAB)), [t]), 30, replace=False)
            rest = sorted((-1.5 - float(x) for x in rng.gamma(2.0, 1.5, 30)), reverse=True)
            lp = -float(rng.gamma(0.6, 0.4))
            if self.extra_sampled and pos == 0:  # sampled although not among the top 20
                lp = rest[-1] - 5.0
            tops.append(sorted([(lp, int(t)), *zip(rest, map(int, others))], reverse=True))
        cached = self._cached(ids)
        self.seen.append(tuple(ids + toks[:-1]))
        self.truth[(tuple(ids), seed)] = tops
        self.cached_of[tuple(ids)] = cached
        return toks, finished, tops, cached

    # -- HTTP ------------------------------------------------------------------------------

    async def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else None
        self.requests.append((path, body))
        if self.api_key is not None and request.headers.get("authorization") != (
            f"Bearer {self.api_key}"
        ):
            return httpx.Response(401, json={"error": {"message": "Invalid API key"}})
        if path == "/v1/models":
            return httpx.Response(200, json=self.models_card())
        if path in self.info():
            return httpx.Response(200, json=self.info()[path])
        if path == "/extras/tokenize" and self.kind == "llama-cpp-python" and self.tokenize_route:
            bos = [] if self.bos is None else [self.bos]
            return httpx.Response(200, json={"tokens": bos + self.tok.encode(body["input"])})
        if path == "/tokenize" and self.kind != "llama-cpp-python":
            text = body.get("content", body.get("prompt"))
            ids = self.tok.encode(text)
            out = {"tokens": ids}
            if self.kind == "vllm":
                out = {
                    "count": len(ids),
                    "max_model_len": CONTEXT,
                    "tokens": ids,
                    "token_strs": None,
                }
            return httpx.Response(200, json=out)
        if path == self.completion_path():
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                await asyncio.sleep(self.delay)  # 0: others may start meanwhile
            finally:
                self.in_flight -= 1
            if self.fail:
                status = self.fail.pop(0)
                return httpx.Response(status, json={"error": {"message": f"busy ({status})"}})
            answer = self.complete(body)
            if self.mangle is None or answer.status_code != 200:
                return answer
            out = self.mangle(json.loads(answer.content), body)
            content = out if isinstance(out, (bytes, bytearray)) else json.dumps(out).encode()
            return httpx.Response(
                200, content=bytes(content), headers={"content-type": "application/json"}
            )
        return httpx.Response(404, json={"detail": "Not Found"})

    def completion_path(self) -> str:
        return {
            "llama.cpp": "/completion",
            "vllm": "/v1/completions",
            "sglang": "/generate",
            "llama-cpp-python": "/v1/completions",
        }[self.kind]

    def models_card(self) -> dict:
        if self.kind == "llama-cpp-python":
            owner = "me" if self.owned_by is None else self.owned_by
            data = [
                {"id": m, "object": "model", "owned_by": owner, "permissions": []}
                for m in self.models
            ]
            return {"object": "list", "data": data}
        owner = {"llama.cpp": "llamacpp", "vllm": "vllm", "sglang": "sglang"}[self.kind]
        owner = owner if self.owned_by is None else self.owned_by
        data = []
        for m in self.models:
            card = {"id": m, "object": "model", "created": 1764000000, "owned_by": owner}
            if self.kind == "llama.cpp":
                card["meta"] = {"n_vocab": len(VOCAB), "n_ctx": CONTEXT, "n_ctx_train": CONTEXT}
            else:
                card.update(root=m, parent=None, max_model_len=CONTEXT)
            data.append(card)
        return {"object": "list", "data": data}

    def info(self) -> dict:
        if self.kind == "llama.cpp":
            return {
                "/props": {
                    "default_generation_settings": {"n_ctx": CONTEXT, "params": {}},
                    "total_slots": 4,
                    "model_path": "/nonexistent/toy.gguf",
                    "build_info": "b11434-toy",
                }
            }
        if self.kind == "vllm":
            return {"/version": {"version": "0.33.0"}}
        if self.kind == "llama-cpp-python":
            return {}
        return {
            "/get_server_info": {
                **toy.SERVER_INFO,
                "enable_deterministic_inference": self.deterministic,
            },
            "/get_model_info": {
                "model_path": "toy/Toy-Reasoner",
                "tokenizer_path": "toy/Toy-Reasoner",
                "is_generation": True,
            },
        }

    def complete(self, body: dict) -> httpx.Response:
        if self.kind == "llama.cpp":
            return self._llama(body)
        if self.kind == "vllm":
            return self._vllm(body)
        if self.kind == "llama-cpp-python":
            return self._llama_cpp_python(body)
        return self._sglang(body)

    def _llama(self, b: dict) -> httpx.Response:
        ids, n = b["prompt"], b["n_predict"]
        toks, finished, tops, cached = self.run(ids, n, b.get("seed", -1), b.get("n_probs", 0))
        out = {
            "index": 0,
            "content": self.tok.decode(toks, skip_special_tokens=True),
            "tokens": toks,
            "id_slot": 0,
            "stop": True,
            "model": self.models[0],
            "tokens_predicted": len(toks),
            "tokens_evaluated": len(ids),
            "truncated": False,
            "stop_type": "eos" if finished else "limit",
            "stopping_word": "",
            "tokens_cached": len(ids) + len(toks) - 1,
            "timings": {"cache_n": cached, "prompt_n": len(ids) - cached, "predicted_n": len(toks)},
        }
        if b.get("n_probs"):
            k = b["n_probs"]
            out["completion_probabilities"] = [
                {
                    "id": t,
                    "token": self.tok.decode([t]),
                    "bytes": list(self.tok.decode([t]).encode()),
                    "logprob": next(lp for lp, i in top if i == t),
                    "top_logprobs": [
                        {"id": i, "token": VOCAB[i], "bytes": [], "logprob": lp}
                        for lp, i in top[: min(k, self.top_n)]
                    ],
                }
                for pos, (t, top) in enumerate(zip(toks, tops))
                if pos not in self.split_chars
            ]
        return httpx.Response(200, json=out)

    def _vllm(self, b: dict) -> httpx.Response:
        k = b.get("logprobs")
        if k is not None and k > self.max_logprobs:
            return httpx.Response(
                400,
                json={
                    "error": {
                        "message": f"Requested sample logprobs of {k}, which is greater than "
                        f"max allowed: {self.max_logprobs}",
                        "type": "BadRequestError",
                        "param": None,
                        "code": 400,
                    }
                },
            )
        ids = b["prompt"]
        if isinstance(ids, str):  # a text prompt (a passed-through request)
            ids = self.tok.encode(ids)
        toks, finished, tops, cached = self.run(ids, b["max_tokens"], b.get("seed", 0), bool(k))
        logprobs = None
        if k is not None:
            as_ids = b.get("return_tokens_as_token_ids")
            key = (lambda i: f"token_id:{i}") if as_ids else VOCAB.__getitem__
            top_dicts = []
            for t, top in zip(toks, tops):
                d = {key(t): max(next(lp for lp, i in top if i == t), -9999.0)}
                for lp, i in top[:k]:
                    d.setdefault(key(i), max(lp, -9999.0))
                top_dicts.append(d)
            logprobs = {
                "text_offset": list(range(len(toks))),
                "token_logprobs": [next(iter(d.values())) for d in top_dicts],
                "tokens": [key(t) for t in toks],
                "top_logprobs": top_dicts,
            }
        choice = {
            "index": 0,
            "text": self.tok.decode(toks, skip_special_tokens=True),
            "logprobs": logprobs,
            "finish_reason": "stop" if finished else "length",
            "stop_reason": None,
            "prompt_logprobs": None,
            "prompt_token_ids": ids if b.get("return_token_ids") else None,
            "token_ids": toks if b.get("return_token_ids") else None,
        }
        usage = {
            "prompt_tokens": len(ids),
            "total_tokens": len(ids) + len(toks),
            "completion_tokens": len(toks),
            "prompt_tokens_details": {"cached_tokens": cached} if self.cache_report else None,
        }
        return httpx.Response(
            200,
            json={
                "id": "cmpl-toy",
                "object": "text_completion",
                "created": 1764000000,
                "model": b["model"],
                "choices": [choice],
                "usage": usage,
                "system_fingerprint": None,
                "kv_transfer_params": None,
            },
        )

    def _sglang(self, b: dict) -> httpx.Response:
        sp = b["sampling_params"]
        ids = b["input_ids"]
        n = sp["max_new_tokens"]
        seed = sp.get("sampling_seed", 42) if self.deterministic else 7
        toks, finished, tops, cached = self.run(ids, n, seed, b.get("return_logprob", False))
        meta = {
            "id": "0f3c9a1e7b2d4c6e8a0f1b3d5e7a9c1e",
            "finish_reason": {"type": "stop", "matched": EOS}
            if finished
            else {"type": "length", "length": n},
            "prompt_tokens": len(ids),
            "weight_version": "default",
            "num_retractions": 0,
        }
        if b.get("return_logprob"):
            k = b.get("top_logprobs_num", 0)
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = [
                [next(lp for lp, i in top if i == t), t, None] for t, top in zip(toks, tops)
            ]
            meta["output_token_logprobs_length"] = len(toks)
            meta["input_top_logprobs"] = []
            meta["output_top_logprobs"] = [
                [[lp, i, None] for lp, i in top[: min(k, self.top_n)]] for top in tops
            ]
        meta["reasoning_tokens"] = 0
        meta["completion_tokens"] = len(toks)
        meta["cached_tokens"] = cached
        meta["cached_tokens_details"] = {"device": cached, "host": 0} if cached else None
        meta["e2e_latency"] = 0.01
        return httpx.Response(
            200,
            json={
                "text": self.tok.decode(toks, skip_special_tokens=True),
                "output_ids": toks,
                "meta_info": meta,
            },
        )

    def _llama_cpp_python(self, b: dict) -> httpx.Response:
        prompt = b.get("prompt", "")
        if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt) and prompt:
            prompt = prompt[0]
        if not isinstance(prompt, str):  # pydantic's refusal, answered by the route handler
            errors = [
                f"  {{'type': 'string_type', 'loc': ('body', 'prompt', 'str'), 'msg': 'Input "
                f"should be a valid string', 'input': {prompt!r}}}"
            ]
            message = f"{len(errors)} validation errors:\n" + "\n".join(errors)
            message += '\n\n  File "llama_cpp/server/app.py", line 264, in create_completion'
            message += "\n    POST /v1/completions"
            return httpx.Response(
                500,
                json={
                    "error": {
                        "message": message,
                        "type": "internal_server_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
        ids = ([] if self.bos is None else [self.bos]) + self.tok.encode(prompt)
        k = b.get("logprobs")
        max_new = int(b.get("max_tokens", 16))
        # past max_tokens when asked to (llama-cpp-python finishes a multi-byte character first)
        seed = int(b.get("seed") or 0)
        toks, finished, tops, _ = self.run(ids, max_new + self.overshoot, seed, bool(k))
        gen = toks[:-1] if finished else toks  # the end of generation is neither text nor counted
        pieces: list[list[int]] = []
        for pos, t in enumerate(gen):  # a word sampled as one token per character
            word = VOCAB[t]
            if pos in self.split_words and len(word) > 1:
                pieces.append(self.tok.ids(list(word)))
            else:
                pieces.append([t])
        flat = [(t, pos) for pos, piece in enumerate(pieces) for t in piece]
        limit = max_new + self.overshoot
        if len(flat) > limit or (finished and len(flat) == limit):  # its count is the limit
            flat, finished = flat[:limit], False
        text = "".join(VOCAB[t] for t, _ in flat)
        logprobs = None
        if k is not None:
            offsets, tokens, sampled, top_dicts = [], [], [], []
            at = len(prompt)
            for i, (t, pos) in enumerate(flat):
                top = tops[pos]
                # a character of a word sampled whole is not among its word's top tokens
                lp = next((lp for lp, j in top if j == t), None)
                head = top[: min(k, self.top_n)]
                keys = [VOCAB[j] for _, j in head]
                if i in self.shared_keys:  # the 3rd token decodes as the 2nd does
                    keys[2] = keys[1]
                d = {}
                for key, (v, _) in zip(keys, head):
                    d[key] = v
                if lp is not None:
                    d[VOCAB[t]] = lp
                offsets.append(at)
                tokens.append(VOCAB[t])
                sampled.append(top[0][0] if lp is None else lp)
                top_dicts.append(d)
                at += len(VOCAB[t])
            logprobs = {
                "tokens": tokens,
                "text_offset": offsets,
                "token_logprobs": sampled,
                "top_logprobs": top_dicts,
            }
        n = len(flat)
        return httpx.Response(
            200,
            json={
                "id": "cmpl-0b4c1f0e-6d38-4c71-9a53-3f9c4e5d2a10",
                "object": "text_completion",
                "created": 1764000000,
                "model": b.get("model") or self.models[0],
                "choices": [
                    {
                        "text": text,
                        "index": 0,
                        "logprobs": logprobs,
                        "finish_reason": "stop" if finished else "length",
                    }
                ],
                "usage": {
                    "prompt_tokens": len(ids),
                    "completion_tokens": n,
                    "total_tokens": len(ids) + n,
                },
            },
        )
