"""Hugging Face transformers backend: real generation and KV-cache-reusing probes on CPU or CUDA.

``TransformersBackend(model_path)`` loads a local model directory (or hub id already in the local
cache), or a single GGUF file (``model_path="…/model.gguf"`` or ``gguf_file=``; transformers
de-quantises it to float tensors), and implements :class:`~mars.engines.base.Backend` with its own
sampling loop:

* **Batched traces, one KV cache.**  The question's prompt is prefilled once; its cache is repeated
  for up to ``batch_size`` traces (a *chunk*) that then decode together.  All traces of a chunk hold
  the same number of tokens while running, so there is no padding and no attention mask; a trace
  that ends (EOS, token cap, :meth:`stop`) is dropped from the chunk's cache at once.
* **Decoding** (``decode``): ``"eager"`` (a ``DynamicCache`` that grows, rows dropped as traces
  end), ``"static"`` (a static cache of fixed shapes) or ``"cuda-graphs"`` (static, each step
  replayed as a captured CUDA graph): :mod:`mars.engines.static_decode`; probes decode the same
  way.
* **Per-trace randomness.**  Every trace owns a ``torch.Generator`` seeded from
  ``(seed, qid, trace_idx)`` (:func:`derive_seed`); a token is drawn by inverse-CDF sampling with
  one uniform of that generator, so a trace does not depend on which other traces share its chunk's
  random stream (only, through floating-point rounding, on the chunk's composition, which is itself
  a function of ``(first_trace, n_traces, batch_size)``; shards and resumed runs use the same).
* **Sampling** as SGLang/vLLM: logits / temperature → top-k → top-p (nucleus) → sample;
  ``temperature=0`` is greedy.
* **Confidence** of each generated token = −mean of the top-20 log-probabilities (spec §3.1),
  rounded to 3 decimals, stored float16.  ``logprobs="scaled"`` (default) takes them from
  ``log_softmax(logits / temperature)`` — what SGLang returns by default — and ``"raw"`` from
  ``log_softmax(logits)`` (SGLang with ``SGLANG_RETURN_ORIGINAL_LOGPROB=1``, vLLM's default).
* **Probes reuse the trace's KV cache.**  At a checkpoint every probed trace's cache (prompt + its
  ``p`` tokens) is copied and only the probe suffix (:data:`PROBE_SUFFIX`, spec §11) is prefilled,
  then ≤ ``probe_max_new_tokens`` tokens are sampled with the same sampling settings and a generator
  seeded from ``(seed, qid, trace_idx, p)``; the trace itself is not touched.
  ``probe_kv_reuse=False`` re-prefills prompt + trace + suffix from scratch instead (for benchmarks,
  or a model whose cache cannot be copied).  Probe cost: ``prompt_tokens = P + p + S``,
  ``cached_tokens = P + p`` (0 when re-prefilling), ``generated_tokens`` = sampled tokens (EOS
  included).
* **The probe stage** (``mars probe``, :meth:`TransformersBackend.reprobe`): stored traces are
  probed without regenerating them.  Each trace's stored ids run through the model once (chunks of
  ``batch_size`` traces fed through one KV cache, at most :data:`PREFILL_TOKENS` per forward pass,
  up to each probe position in turn) and every probe branches off a copy of that cache exactly as
  an inline probe does (same suffix prefill, sampling and seed ``(seed, qid, trace_idx, p)``), so
  probing a ``--probe none`` pool at the generation's spacing gives the inline probes.  A probe
  model of another vocabulary gets each prefix decoded with the generator's tokenizer and
  re-encoded (:class:`~mars.engines.tokens.GeneratorTokens`), one trace at a time.
* **Context length**: before a question's first forward pass, prompt + ``max_tokens`` + probe
  suffix + probe tokens must fit :meth:`TransformersBackend.context_budget` (the model's
  ``max_position_embeddings``), else a one-line :class:`MarsError` names the question and numbers.
* A generated EOS token counts as a token of the trace (it has a confidence), as in SGLang's
  ``completion_tokens``.  The final answer is the last ``\\boxed{…}`` of the decoded text
  (:func:`mars.method.answers.extract_boxed`), normalised once
  (:func:`mars.method.answers.normalize_answer`), for
  every trace (finished, cut at the cap, or stopped).

Torch and transformers are imported lazily: importing this module is cheap and the constants and
helpers (:data:`PROBE_SUFFIX`, :func:`derive_seed`, :func:`build_prompt_ids`) are shared with the
SGLang backend.
"""

from __future__ import annotations

import copy
import inspect
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import MarsError
from ...store.problems import Problem
from ..base import Backend, GeneratorInfo, ProbeResult, StoredTrace
from ..models import _split_model_path, _torch, load_model, save_model
from ..static_decode import (
    DecoderPool,
    StaticDecoder,
    check_device,
    check_static,
    probe_decoder,
)
from ..tokens import (
    CONF_TOP_K,
    DEFAULT_PROMPT_TEMPLATE,
    PROBE_MAX_NEW_TOKENS,
    PROBE_SUFFIX,
    TokenProbing,
    build_prompt_ids,
    check_context,
    derive_seed,
    encode_suffix,
    local_path,
    parse_probe,
    window_conf,
)
from .batch import TransformersTraceBatch
from .sampling import UniformStream, sample_tokens

#: Most tokens (rows × columns) one teacher-forcing forward pass of the probe stage feeds.
PREFILL_TOKENS = 4096


def _eos_ids(tokenizer, model=None) -> set[int]:
    ids: set[int] = set()
    for src in (
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
        getattr(tokenizer, "eos_token_id", None),
    ):
        if src is None:
            continue
        ids.update(int(i) for i in (src if isinstance(src, (list, tuple, set)) else [src]))
    if not ids:
        raise MarsError("the tokenizer/model defines no EOS token")
    return ids


# ---------------------------------------------------------------------------------------------
# Backend


class TransformersBackend(TokenProbing, Backend):
    """A causal LM of transformers behind the generation interface (see the module docstring).

    Args:
        model_path: model directory, hub id (offline: must be cached), or a ``.gguf`` file.
        gguf_file: GGUF file name inside ``model_path`` (alternative to passing the file path).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``…; default CUDA when available.
        dtype: torch dtype or its name; default float32 on CPU, bfloat16 on CUDA.
        temperature, top_p, top_k: sampling (``top_k=0`` or ``None``: off;
            ``temperature=0``: greedy).
        max_tokens: token cap of a trace.
        batch_size: traces decoded together in one forward pass (a question's traces are split into
            chunks of this size; each chunk holds its own KV cache).
        probe_max_new_tokens: new tokens of a probe (spec: 50).
        logprobs: ``"scaled"`` (log-softmax of logits / temperature, SGLang's default) or ``"raw"``.
        probe_kv_reuse: probes continue from a copy of the trace's KV cache (True) or re-prefill.
        probe_suffix: text appended after the trace to ask for its answer (default: the
            reference prober's :data:`PROBE_SUFFIX`).
        generator_tokenizer: the probe stage only: the tokenizer (or its path) of the model that
            generated the traces being probed, when the pool's recorded model path cannot be
            loaded here (default: loaded from the pool's manifest when needed).
        prompt_template, system_prompt: the chat prompt (user message ``prompt_template``).
        decode: ``"eager"`` (a growing ``DynamicCache``, one forward pass per step), ``"static"``
            (a static KV cache) or ``"cuda-graphs"`` (static, each step replayed as a CUDA graph;
            CUDA only): :mod:`mars.engines.static_decode`.
        model, tokenizer: an already loaded model and tokenizer (``model_path`` is then only a
            name).
        name: the model name recorded in the pool (default: ``model_path`` as given).
    """

    name = "transformers"

    def __init__(
        self,
        model_path: str | os.PathLike | None = None,
        gguf_file: str | None = None,
        *,
        device: str | None = None,
        dtype: Any = None,
        temperature: float = 0.6,
        top_p: float = 0.95,
        top_k: int | None = 20,
        max_tokens: int = 32768,
        batch_size: int = 16,
        probe_max_new_tokens: int = PROBE_MAX_NEW_TOKENS,
        logprobs: str = "scaled",
        probe_kv_reuse: bool = True,
        probe_suffix: str = PROBE_SUFFIX,
        generator_tokenizer=None,
        prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
        system_prompt: str | None = None,
        decode: str = "eager",
        model=None,
        tokenizer=None,
        name: str | None = None,
        trust_remote_code: bool = False,
    ):
        torch = _torch()
        if temperature < 0 or not 0 < top_p <= 1 or (top_k is not None and top_k < 0):
            raise MarsError(
                f"bad sampling settings: temperature={temperature}, top_p={top_p}, top_k={top_k}"
            )
        if max_tokens <= 0 or batch_size <= 0 or probe_max_new_tokens <= 0:
            raise MarsError("max_tokens, batch_size and probe_max_new_tokens must be positive")
        if logprobs not in ("scaled", "raw"):
            raise MarsError(f"logprobs must be 'scaled' or 'raw', got {logprobs!r}")
        if "{question}" not in prompt_template:
            raise MarsError("prompt_template must contain '{question}'")
        if not probe_suffix:
            raise MarsError("the probe suffix must not be empty")
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = str(device)
        check_device(decode, self.device)  # before the model loads
        if model is None or tokenizer is None:
            if model_path is None:
                raise MarsError("give model_path, or both model and tokenizer")
            model, tokenizer = load_model(
                model_path,
                gguf_file,
                device=self.device,
                dtype=dtype,
                trust_remote_code=trust_remote_code,
            )
        self.hf_model, self.tokenizer = model, tokenizer
        path, gguf = (
            _split_model_path(model_path, gguf_file)
            if model_path is not None
            else (None, gguf_file)
        )
        self.model_path = path
        self.gguf_file = gguf
        #: where the model was loaded from (absolute when local): what the pool records
        self.source_path = local_path(model_path)
        self.model = str(
            name
            or (
                os.fspath(model_path)
                if model_path is not None
                else getattr(model.config, "_name_or_path", "") or type(model).__name__
            )
        )
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.top_k = int(top_k or 0)
        self.max_tokens = int(max_tokens)
        self.batch_size = int(batch_size)
        self.probe_max_new_tokens = int(probe_max_new_tokens)
        self.logprobs = logprobs
        self.probe_kv_reuse = bool(probe_kv_reuse)
        self.prompt_template = prompt_template
        self.system_prompt = system_prompt
        self.eos_ids = _eos_ids(tokenizer, model)
        self.probe_suffix = str(probe_suffix)
        self.suffix_ids = encode_suffix(tokenizer, self.probe_suffix)
        self.generator_tokenizer = generator_tokenizer
        params = inspect.signature(model.forward).parameters
        self._keep_kw = (
            "logits_to_keep"
            if "logits_to_keep" in params
            else ("num_logits_to_keep" if "num_logits_to_keep" in params else None)
        )
        self.decode = decode
        if decode != "eager":
            check_static(model, decode)
        #: cumulative counters (tokens decoded, forward passes, probe tokens, wall time per phase)
        self.stats = {
            "trace_tokens": 0,
            "probe_tokens": 0,
            "prefill_tokens": 0,
            "reprobe_trace_tokens": 0,
            "forward_calls": 0,
            "generate_s": 0.0,
            "probe_s": 0.0,
        }
        #: static decoders kept between uses (``decode`` static or cuda-graphs)
        self._pool = DecoderPool(
            model, graphs=decode == "cuda-graphs", keep_kw=self._keep_kw, stats=self.stats
        )

    # -- interface -------------------------------------------------------------------------------

    def start(
        self, problem: Problem, n_traces: int, seed: int, first_trace: int = 0
    ) -> TransformersTraceBatch:
        self.check_start(n_traces, seed, first_trace)
        return TransformersTraceBatch(self, problem, n_traces, seed, first_trace)

    def describe(self) -> dict:
        """Provenance for a pool manifest (everything that changes the generated traces)."""
        torch = _torch()
        dtype = next(self.hf_model.parameters()).dtype
        return {
            "backend": self.name,
            "model": self.model,
            "model_path": self.source_path,
            "gguf_file": self.gguf_file,
            "tokenizer_vocab": self.vocab_digest(),
            "device": self.device.split(":")[0],
            "dtype": str(dtype).replace("torch.", ""),
            "sampling": {
                "temperature": self.temperature,
                "top_p": self.top_p,
                "top_k": self.top_k,
                "method": "per-trace torch.Generator(seed, qid, trace_idx), inverse CDF",
            },
            "logprobs": (
                "log_softmax(logits / temperature)"
                if self.logprobs == "scaled" and self.temperature > 0
                else "log_softmax(logits)"
            ),
            "conf": f"-mean(top-{CONF_TOP_K} logprobs), 3 decimals, float16",
            "batch_size": self.batch_size,
            "probe_max_new_tokens": self.probe_max_new_tokens,
            "probe_suffix": self.probe_suffix,
            "probe_kv_reuse": self.probe_kv_reuse,
            "prompt_template": self.prompt_template,
            "system_prompt": self.system_prompt,
            "torch": torch.__version__.split("+")[0],
            # recorded only when not the default, so that eager pools keep their parameters
            **({"decode": self.decode} if self.decode != "eager" else {}),
        }

    def describe_probe(self) -> dict:
        """Provenance of the probe stage: :meth:`describe` and how the probed traces' tokens
        reached this model (``probe_input``: "token ids as generated" or "re-encoded from
        <generator>")."""
        info = self.describe()
        info["sampling"]["method"] = (
            "per-probe torch.Generator(seed, qid, trace_idx, position), inverse CDF"
        )
        return {**info, "probe_input": self.probe_input()}

    def model_source(self) -> tuple[str | None, str | None]:
        return self.source_path, self.gguf_file

    def prompt_ids(self, question: str) -> list[int]:
        return build_prompt_ids(self.tokenizer, question, self.prompt_template, self.system_prompt)

    def token_id_limit(self) -> int:
        """The rows of the model's embedding table (often more than the tokenizer's tokens)."""
        return max(len(self.tokenizer), int(self.hf_model.get_input_embeddings().num_embeddings))

    def context_budget(self) -> tuple[int, str] | None:
        """Most tokens one sequence may hold: the model's ``max_position_embeddings`` (positions it
        was built for; learned position tables end there), else the tokenizer's
        ``model_max_length`` when set to a real value (transformers' "unset" is ~1e30)."""
        cfg = self.hf_model.config
        text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        n = getattr(text_cfg, "max_position_embeddings", None)
        if isinstance(n, int) and n > 0:
            return n, f"the model's max_position_embeddings {n}"
        n = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(n, int) and 0 < n < 10**8:
            return n, f"the tokenizer's model_max_length {n}"
        return None

    def check_context(self, problem: Problem) -> None:
        """One-line :class:`MarsError` if a question's longest request cannot fit the model
        (``start`` checks this before any forward pass; callers may check all questions first)."""
        check_context(self, problem)

    def save_pretrained(self, out_dir: str | os.PathLike) -> Path:
        """Write the loaded model (e.g. de-quantised from GGUF) as a plain model directory."""
        return save_model(self.hf_model, self.tokenizer, out_dir)

    # -- model calls (shared by batches) -----------------------------------------------------------

    def _forward(self, ids, cache=None, last_only: bool = True):
        """Logits of the last position [B, V] (float32) and the updated cache."""
        kw = {self._keep_kw: 1} if (last_only and self._keep_kw) else {}
        out = self.hf_model(input_ids=ids, past_key_values=cache, use_cache=True, **kw)
        self.stats["forward_calls"] += 1
        return out.logits[:, -1, :].float(), out.past_key_values

    def _sample(self, logits, uniforms: np.ndarray):
        return sample_tokens(
            logits, uniforms, self.temperature, self.top_k, self.top_p, self.logprobs
        )

    # -- probes (inline, and the probe stage) ------------------------------------------------------

    def _probe_tokens(
        self, n: int, seeds: list[int], device, cache=None, rows=None, full=None
    ) -> list[list[int]]:
        """Sample the probes of ``n`` rows and return each row's tokens (EOS included).

        From ``cache`` (a ``DynamicCache``, or the :class:`StaticDecoder` of a chunk: each row's
        prompt + prefix; left as it is), its rows ``rows`` (default all), after prefilling the
        probe suffix; or from scratch on ``full`` (prompt + prefix + suffix per row).  Row ``i``
        draws its tokens with a generator seeded ``seeds[i]``; a row stops at EOS or after
        ``probe_max_new_tokens`` tokens.  Decoded eagerly, or (``decode`` static, cuda-graphs) in
        a static cache of the pool, row ``i`` in slot ``i``, a row that ended fed dummies.
        """
        torch = _torch()
        sel = None if rows is None else torch.as_tensor(np.asarray(rows, np.int64), device=device)
        suffix = torch.tensor(self.suffix_ids, device=device).expand(n, -1)
        ids = suffix if cache is not None else torch.tensor(full, device=device)
        self.stats["prefill_tokens"] += int(ids.numel())
        dec: StaticDecoder | None = None
        if self.decode != "eager":
            dec = probe_decoder(self._pool, n, cache, sel, ids.shape[1], self.probe_max_new_tokens)
            logits = dec.feed(ids)
        elif cache is not None:
            cache = copy.deepcopy(cache)
            if sel is not None:
                cache.batch_select_indices(sel)
            logits, cache = self._forward(ids, cache)
        else:
            logits, cache = self._forward(ids)
        streams = [UniformStream(s) for s in seeds]
        out: list[list[int]] = [[] for _ in range(n)]
        alive = np.arange(n)
        try:
            for step in range(self.probe_max_new_tokens):
                u = np.array([streams[i].next() for i in alive.tolist()])
                tok, _ = self._sample(logits, u)
                keep = np.ones(alive.size, bool)
                for a, i in enumerate(alive.tolist()):
                    out[i].append(int(tok[a]))
                    if int(tok[a]) in self.eos_ids:
                        keep[a] = False
                self.stats["probe_tokens"] += int(alive.size)
                if step == self.probe_max_new_tokens - 1 or not keep.any():
                    break
                if dec is not None:
                    alive, tok = alive[keep], tok[keep]
                    feed = np.zeros(dec.rows, np.int64)
                    feed[alive] = tok
                    live = torch.as_tensor(alive, device=device)
                    logits = dec.step(feed).index_select(0, live)
                    continue
                if not keep.all():
                    cache.batch_select_indices(torch.as_tensor(np.flatnonzero(keep), device=device))
                    alive, tok = alive[keep], tok[keep]
                logits, cache = self._forward(
                    torch.as_tensor(tok, device=device).unsqueeze(-1), cache
                )
        finally:
            if dec is not None:
                self._pool.give(dec)
        del cache
        return out

    def _probe_result(
        self, out: list[int], conf: float | None, prompt_tokens: int, cached: int
    ) -> ProbeResult:
        gen = [t for t in out if t not in self.eos_ids]
        text = self.tokenizer.decode(gen, skip_special_tokens=True)
        return ProbeResult(
            answer=parse_probe(text),
            raw_text="\\boxed{" + text,
            conf=conf,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached,
            generated_tokens=len(out),
        )

    def _feed(self, cache, ids: np.ndarray):
        """Teacher-force ``ids`` [rows, n] through ``cache`` (in passes of at most
        :data:`PREFILL_TOKENS` tokens); returns the extended cache."""
        torch = _torch()
        rows, n = ids.shape
        step = max(1, PREFILL_TOKENS // max(rows, 1))
        for lo in range(0, n, step):
            piece = torch.as_tensor(
                np.ascontiguousarray(ids[:, lo : lo + step]), device=self.device
            )
            _, cache = self._forward(piece, cache)
            self.stats["prefill_tokens"] += int(piece.numel())
            self.stats["reprobe_trace_tokens"] += int(piece.numel())
        return cache

    def reprobe(
        self,
        problem: Problem,
        traces: Sequence[StoredTrace],
        positions: Sequence[np.ndarray],
        generator: GeneratorInfo,
    ) -> list[list[ProbeResult]]:
        """Probe stored traces (the probe stage), each trace's forward pass run once.

        The question's prompt (the probe model's chat template) is prefilled once.  With the
        generator's vocabulary, traces go in chunks of ``batch_size``: their stored ids are fed
        through one KV cache up to each probe position in turn (every trace of a chunk holds the
        same number of tokens; a trace leaves the chunk after its last probe), and at a position
        the traces probed there branch off a copy of the cache: only the suffix is prefilled,
        then ≤ ``probe_max_new_tokens`` tokens are sampled as inline probes are (seed
        ``(seed, qid, trace_idx, position)``, the generation's seed).  With another vocabulary a
        trace goes alone: its prefix at each position is the generator's text re-encoded, the
        cache cut back to where the new prefix departs from the previous one.
        ``probe_kv_reuse=False`` re-prefills prompt + prefix + suffix for every probe instead.
        """
        import time

        torch = _torch()
        gen, prompt, plan = self.probe_plan(problem, traces, positions, generator.manifest)
        seed = int(generator.manifest.get("seed", 0))
        out: list[list[Any]] = [[None] * len(p) for p in positions]
        todo = [i for i, p in enumerate(positions) if len(p)]
        if not todo:
            return out
        t0 = time.perf_counter()
        with torch.inference_mode():
            base = None
            if self.probe_kv_reuse:
                _, base = self._forward(torch.tensor([prompt], device=self.device))
                self.stats["prefill_tokens"] += len(prompt)
            if gen.same_ids:
                for lo in range(0, len(todo), self.batch_size):
                    rows = todo[lo : lo + self.batch_size]
                    self._reprobe_chunk(problem, seed, prompt, base, rows, traces, positions, out)
            else:
                for i in todo:
                    self._reprobe_alone(
                        problem, seed, prompt, base, traces[i], positions[i], plan[i], out[i]
                    )
        self.stats["probe_s"] += time.perf_counter() - t0
        return out

    def _reprobe_chunk(self, problem, seed, prompt, base, rows, traces, positions, out) -> None:
        """Probe the traces ``rows`` (generator ids as they are) along one shared KV cache."""
        torch = _torch()
        kv = base is not None
        ids = [np.asarray(traces[i].token_ids, np.int64) for i in rows]
        pos = [np.asarray(positions[i], np.int64).tolist() for i in rows]
        nxt = [0] * len(rows)
        cache: Any = None
        if kv:
            cache = copy.deepcopy(base)
            if len(rows) > 1:
                cache.batch_repeat_interleave(len(rows))
        alive = list(range(len(rows)))  # cache rows, in this order
        cur = 0
        for e in sorted({p for ps in pos for p in ps}):
            if kv and e > cur:
                cache = self._feed(cache, np.stack([ids[a][cur:e] for a in alive]))
            cur = e
            here = [a for a in alive if nxt[a] < len(pos[a]) and pos[a][nxt[a]] == e]
            if here:
                seeds = [derive_seed(seed, problem.qid, traces[rows[a]].trace_idx, e) for a in here]
                if kv:
                    sel = [alive.index(a) for a in here] if len(here) < len(alive) else None
                    toks = self._probe_tokens(len(here), seeds, self.device, cache=cache, rows=sel)
                else:
                    full = [prompt + ids[a][:e].tolist() + self.suffix_ids for a in here]
                    toks = self._probe_tokens(len(here), seeds, self.device, full=full)
                for a, t in zip(here, toks):
                    confs = traces[rows[a]].confs
                    out[rows[a]][nxt[a]] = self._probe_result(
                        t,
                        None if confs is None else window_conf(confs, e),
                        len(prompt) + e + len(self.suffix_ids),
                        len(prompt) + e if kv else 0,
                    )
                    nxt[a] += 1
            keep = [a for a in alive if pos[a][-1] != e]
            if len(keep) < len(alive):
                if kv and keep:
                    sel = [alive.index(a) for a in keep]
                    cache.batch_select_indices(torch.as_tensor(sel, device=self.device))
                alive = keep
            if not alive:
                break

    def _reprobe_alone(self, problem, seed, prompt, base, trace, positions, prefixes, out) -> None:
        """Probe one trace whose prefixes are re-encoded (each may depart from the previous one
        near its end: the cache is cut back to their common part)."""
        kv = base is not None
        cache: Any = copy.deepcopy(base) if kv else None
        fed = np.zeros(0, np.int64)
        for k, (e, seq) in enumerate(zip(np.asarray(positions).tolist(), prefixes)):
            s = [derive_seed(seed, problem.qid, trace.trace_idx, e)]
            if kv:
                m = min(len(fed), len(seq))
                diff = np.flatnonzero(fed[:m] != seq[:m])
                n = int(diff[0]) if diff.size else m
                if n < len(fed):
                    cache.crop(len(prompt) + n)
                if len(seq) > n:
                    cache = self._feed(cache, np.asarray(seq[n:], np.int64)[None, :])
                fed = np.asarray(seq, np.int64)
                toks = self._probe_tokens(1, s, self.device, cache=cache)
            else:
                full = [prompt + np.asarray(seq).tolist() + self.suffix_ids]
                toks = self._probe_tokens(1, s, self.device, full=full)
            out[k] = self._probe_result(
                toks[0],
                None if trace.confs is None else window_conf(trace.confs, e),
                len(prompt) + len(seq) + len(self.suffix_ids),
                len(prompt) + len(seq) if kv else 0,
            )
