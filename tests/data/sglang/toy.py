"""Toy tokenizer and scripted SGLang-like engine that wrote the fixtures in this folder.

NOT a recording of a live SGLang engine: no GPU with SGLang was available to this project.  The
fixtures are hand-built to the shape of ``sglang.Engine.generate`` results as the SGLang 0.5.23
source builds them (``TokenizerManager._handle_batch_output`` and ``add_logprob_to_meta_info`` in
``srt/managers/tokenizer_manager.py``; 0.5.9 differences: :func:`as_v0_5_9`):

* one ``{"text", "output_ids", "meta_info"}`` dict per request of a batched call;
* ``meta_info`` keys in the engine's order: ``id``, ``finish_reason`` (always a dict for a finished
  request: ``{"type": "stop", "matched": <eos id>}`` or ``{"type": "length", "length":
  <max_new_tokens>}``), ``prompt_tokens``, ``weight_version`` (``"default"``), ``num_retractions``;
  with ``return_logprob=True`` then ``input_token_logprobs`` (``[]``: by default SGLang starts the
  input log-probabilities after the input), ``output_token_logprobs`` — one ``[logprob, token_id,
  null]`` per generated token —, ``output_token_logprobs_length``, ``input_top_logprobs`` (``[]``)
  and ``output_top_logprobs`` — per generated token a list of ``top_logprobs_num`` such triples,
  or ``null`` for a position without any (JSON turns the engine's tuples into lists); then
  ``reasoning_tokens`` (0 without a reasoning parser), ``completion_tokens``, ``cached_tokens``,
  ``cached_tokens_details`` (``{"device": cached, "host": 0}``, ``null`` when nothing was cached)
  and ``e2e_latency``;
* log-probabilities of tokens whose probability underflowed come back clamped to the float32
  minimum, −3.4028234663852886e38 (one position of trace A has such a tail);
* the EOS token that ends a request is part of ``output_ids`` and of the log-probability lists and
  counts in ``completion_tokens``; ``text`` is detokenised without special tokens;
* ``cached_tokens`` follow a radix cache: the longest prefix of the request already in the tree,
  which holds every finished request's input and output but its last output token (whose KV was
  never computed), and never the whole input (at least its last token is prefilled) — so a probe at
  position p gets P + p − 1;
* the engine runs with deterministic inference: a request's ``sampling_seed`` picks its tokens
  (a seedless one would get 42); :data:`SERVER_INFO` is what its ``get_server_info()`` reports.

Regenerate with ``python tests/data/sglang/toy.py`` (it drives
:class:`mars.engines.sglang.SGLangBackend` against :class:`ScriptedEngine` and records every
request/response pair); the tests only replay the JSON files.
"""

from __future__ import annotations

import json
import string
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS_ID = 2
WORDS = [
    " Considering",
    " the",
    " limited",
    " time",
    " by",
    " user",
    " I",
    " have",
    " to",
    " give",
    " solution",
    " based",
    " on",
    " thinking",
    " directly",
    " now",
    "</think>",
    "<think>",
    "\\boxed{",
    "\\dfrac{",
    " Let",
    " me",
    " add",
    " So",
    " answer",
    " is",
    " Hmm",
    " maybe",
    " check",
    " again",
    " wait",
    " What",
    " Please",
    " reason",
    " step",
    " put",
    " your",
    " final",
    " within",
    " and",
    "user",
    "assistant",
    " 2",
    " 3",
    " 5",
    " 6",
    " 12",
    " so",
    " +",
    " =",
    " or",
]
VOCAB = SPECIAL + WORDS + [c for c in string.printable if c not in "\x0b\x0c\r"]
#: float32 minimum: SGLang's value for a log-probability of a probability that underflowed to 0
CLAMPED = -3.4028234663852886e38
#: the model's context length (``tokenizer_manager.context_len``) of the scripted engine
CONTEXT_LEN = 4096
#: the part of ``Engine.get_server_info()`` the adapter reads (SGLang 0.5.23 with
#: ``enable_deterministic_inference=True`` on a Hopper GPU: attention backend fa3, sampling backend
#: forced to pytorch), plus the scheduler's limits
SERVER_INFO = {
    "model_path": "toy/Toy-Reasoner",
    "enable_deterministic_inference": True,
    "attention_backend": "fa3",
    "sampling_backend": "pytorch",
    "disable_radix_cache": False,
    "page_size": 1,
    "context_length": None,
    "random_seed": 581273490,
    "weight_version": "default",
    "max_total_num_tokens": 400000,
    "max_req_input_len": CONTEXT_LEN - 7,
    "version": "0.5.23",
}


class ToyTokenizer:
    """Greedy longest-match tokenizer over :data:`VOCAB` with a ChatML-like chat template."""

    chat_template = "chatml"

    def __init__(self, vocab=VOCAB, eos_token_id=EOS_ID):
        self.vocab = list(vocab)
        self.index = {t: i for i, t in enumerate(self.vocab)}
        self.special = set(range(len(SPECIAL)))
        self.eos_token_id = eos_token_id
        self.maxlen = max(map(len, self.vocab))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            for n in range(min(self.maxlen, len(text) - i), 0, -1):
                t = self.index.get(text[i : i + n])
                if t is not None:
                    ids.append(t)
                    i += n
                    break
            else:
                raise ValueError(f"toy tokenizer cannot encode {text[i]!r}")
        return ids

    def __call__(self, text: str | list[str], add_special_tokens: bool = False) -> dict:
        if isinstance(text, list):
            return {"input_ids": [self.encode(t) for t in text]}
        return {"input_ids": self.encode(text)}

    def __len__(self) -> int:
        """Tokens in the vocabulary, as a transformers tokenizer counts them."""
        return len(self.vocab)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.index)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(
            self.vocab[i] for i in ids if not (skip_special_tokens and i in self.special)
        )

    def apply_chat_template(
        self, messages, add_generation_prompt: bool = True, tokenize: bool = False
    ):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        if add_generation_prompt:
            text += "<|im_start|>assistant\n"
        return self.encode(text) if tokenize else text

    def ids(self, pieces: list[str]) -> list[int]:
        """Token ids of a list of vocabulary strings (exact tokens, no merging)."""
        return [self.index[p] for p in pieces]


# ---------------------------------------------------------------------------------------------
# The scripted "model": three traces of "What is 2 + 3?" and canned probe completions

T = ToyTokenizer()
SCRIPTS = {
    # ends with EOS as its 15th token (finished; probed at 8 only)
    "A": [
        " Let",
        " me",
        " add",
        ":",
        " 2",
        " +",
        " 3",
        " =",
        " 5",
        ".",
        " So",
        "\\boxed{",
        "5",
        "}",
        "<|im_end|>",
    ],
    # runs into the 24-token cap (cut), a boxed 6 in its thinking
    "B": [
        " Hmm",
        ",",
        " maybe",
        " 2",
        " +",
        " 3",
        " =",
        " 6",
        "?",
        " Let",
        " me",
        " check",
        " again",
        ".",
        " 2",
        " +",
        " 3",
        " =",
        " 6",
        ",",
        " ",
        "\\boxed{",
        "6",
        "}",
        " wait",
        " or",
    ],
    # ends with EOS as its 16th token, exactly at a checkpoint (not probed there)
    "C": [
        " What",
        " is",
        " 2",
        " +",
        " 3",
        "?",
        " 5",
        ".",
        " So",
        " the",
        " answer",
        " is",
        "\\boxed{",
        "5",
        "}",
        "<|im_end|>",
    ],
}
assert len(SCRIPTS["A"]) == 15 and len(SCRIPTS["C"]) == 16 and "<|im_end|>" not in SCRIPTS["B"]
#: probe completion per (script, position): token strings (EOS included where the probe stops)
PROBES = {
    ("A", 8): [" 5", "}", "<|im_end|>"],
    ("B", 8): [" 6", "}", "<|im_end|>"],
    ("C", 8): ["<|im_end|>"],  # nothing parseable: answer None
    ("B", 16): ["\\dfrac{", "1", "2", "}", "{", "2", "}", "}"]
    + [" and", " so", " on"] * 20,  # hits max_new_tokens
    # the probe stage's terminal probes (at each trace's end, its EOS included) ...
    ("A", 15): [" 5", "}", "<|im_end|>"],
    ("B", 24): ["6", "}", "<|im_end|>"],
    ("C", 16): ["5", "}", "<|im_end|>"],
    # ... and the same re-encoded from another vocabulary (the EOS, a special token, left out)
    ("A", 14): [" 5", "}", "<|im_end|>"],
    ("C", 15): ["5", "}", "<|im_end|>"],
}
#: The vocabulary of another toy generator: the same tokens (specials first, as they are), the
#: others in another order, so that the same text has other ids.
OTHER_VOCAB = SPECIAL + sorted(VOCAB[len(SPECIAL) :], key=lambda t: (len(t), t[::-1]))


class ScriptedEngine:
    """Answers ``generate`` like SGLang would for the scripts above (see the module docstring)."""

    def __init__(self, prompt_ids: list[int], suffix_ids: list[int], first_tokens: dict[int, str]):
        self.prompt = list(prompt_ids)
        self.suffix = list(suffix_ids)
        self.first_tokens = first_tokens  # sampling_seed of a trace -> script name
        self.seen: list[tuple[int, ...]] = []
        self.exchanges: list[dict] = []
        self.calls = 0
        self.rng = np.random.default_rng(12345)

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

    def _script_of(self, cont: list[int], seed: int) -> str:
        if not cont:
            return self.first_tokens[seed]
        for name, toks in SCRIPTS.items():
            if T.ids(toks[:1]) == cont[:1]:
                return name
        raise KeyError("unknown trace prefix")

    def _top(self, chosen: int, lp: float, underflow: int = 0) -> list[list]:
        """20 [logprob, id, null] entries, descending; the chosen token's mass exp(lp), the other 19
        share 90 % of the rest (the tail of the vocabulary holds the remaining 10 %); the last
        ``underflow`` entries underflowed (clamped log-probability)."""
        others = [
            int(i)
            for i in self.rng.choice(
                np.setdiff1d(np.arange(len(VOCAB)), [chosen]), 19, replace=False
            )
        ]
        rest = (1.0 - float(np.exp(lp))) * 0.9 * self.rng.dirichlet(np.full(19, 0.3))
        entries = [[round(lp, 6), chosen, None]] + [
            [round(float(np.log(max(q, 1e-30))), 6), i, None] for q, i in zip(rest, others)
        ]
        entries = sorted(entries, key=lambda e: -e[0])
        for e in entries[len(entries) - underflow :]:
            e[0] = CLAMPED
        return entries

    def generate(
        self, input_ids, sampling_params, return_logprob=False, top_logprobs_num=None, **kw
    ):
        assert not kw, kw
        self.calls += 1
        outs = []
        for ids, sp in zip(input_ids, sampling_params):
            ids = list(ids)
            assert ids[: len(self.prompt)] == self.prompt
            rest = ids[len(self.prompt) :]
            probe = len(rest) >= len(self.suffix) and rest[-len(self.suffix) :] == self.suffix
            if probe:
                cont = rest[: -len(self.suffix)]
                name = self._script_of(cont, -1)
                toks = PROBES[(name, len(cont))]
            else:
                cont = rest
                name = self._script_of(cont, sp.get("sampling_seed", 42))
                toks = SCRIPTS[name][len(cont) :]
            out_ids = T.ids(toks)[: sp["max_new_tokens"]]
            if EOS_ID in out_ids:
                out_ids = out_ids[: out_ids.index(EOS_ID) + 1]
                finish = {"type": "stop", "matched": EOS_ID}
            else:
                assert len(out_ids) == sp["max_new_tokens"], "script too short"
                finish = {"type": "length", "length": sp["max_new_tokens"]}
            cached = self._cached(ids)
            meta = {
                "id": f"{self.calls:02d}{len(outs):02d}" + "5f3c9a1e7b2d4c6e8a0f1b3d5e7a9c1e"[4:],
                "finish_reason": finish,
                "prompt_tokens": len(ids),
                "weight_version": "default",
                "num_retractions": 0,
            }
            if return_logprob:
                lps = [-float(x) for x in self.rng.gamma(0.6, 0.4, len(out_ids))]
                # the "5" after "\boxed{" in trace A: a peaked distribution whose tail underflowed
                under = [
                    3 if name == "A" and not probe and len(cont) + i == 12 else 0
                    for i in range(len(out_ids))
                ]
                meta["input_token_logprobs"] = []
                meta["output_token_logprobs"] = [
                    [round(lp, 6), t, None] for lp, t in zip(lps, out_ids)
                ]
                meta["output_token_logprobs_length"] = len(out_ids)
                meta["input_top_logprobs"] = []
                meta["output_top_logprobs"] = [
                    self._top(t, lp, u)[:top_logprobs_num] for lp, t, u in zip(lps, out_ids, under)
                ]
            meta["reasoning_tokens"] = 0
            meta["completion_tokens"] = len(out_ids)
            meta["cached_tokens"] = cached
            meta["cached_tokens_details"] = {"device": cached, "host": 0} if cached else None
            meta["e2e_latency"] = round(0.05 + 0.004 * len(out_ids) + 0.0001 * len(ids), 4)
            outs.append(
                {
                    "text": T.decode(out_ids, skip_special_tokens=True),
                    "output_ids": out_ids,
                    "meta_info": meta,
                }
            )
            self.exchanges.append(
                {
                    "request": {
                        "input_ids": ids,
                        "sampling_params": sp,
                        "return_logprob": return_logprob,
                        "top_logprobs_num": top_logprobs_num,
                    },
                    "response": outs[-1],
                }
            )
        for ids, out in zip(input_ids, outs):
            self.seen.append(tuple(list(ids) + out["output_ids"][:-1]))
        return outs

    def get_server_info(self) -> dict:
        return dict(SERVER_INFO)


def as_v0_5_9(response: dict, input_ids: list[int]) -> dict:
    """The same result as SGLang 0.5.9 shapes it: the retraction count is ``total_retractions``;
    there is no ``reasoning_tokens`` nor ``output_token_logprobs_length``; input log-probabilities
    start at the last input token (``input_token_logprobs = [[null, last id, null]]``,
    ``input_top_logprobs = [null]``); ``cached_tokens_details`` is null without hierarchical
    cache.  (``scheduler.py`` sets ``logprob_start_len = len(input) − 1`` in 0.5.9, ``len(input)``
    in 0.5.23.)"""
    meta = dict(response["meta_info"])
    out: dict = {}
    for k, v in meta.items():
        if k == "num_retractions":
            out["total_retractions"] = v
        elif k in ("reasoning_tokens", "output_token_logprobs_length"):
            continue
        elif k == "input_token_logprobs":
            out[k] = [[None, input_ids[-1], None]]
        elif k == "input_top_logprobs":
            out[k] = [None]
        elif k == "cached_tokens_details":
            out[k] = None
        else:
            out[k] = v
    return {**response, "meta_info": out}


def dumps(obj, level: int = 0, width: int = 110) -> str:
    """JSON with short containers (and lists of scalars) on one line, the rest indented."""
    flat = json.dumps(obj, ensure_ascii=False)
    scalars = isinstance(obj, list) and all(not isinstance(x, (list, dict)) for x in obj)
    rows = isinstance(obj, list) and all(
        isinstance(x, list) and not any(isinstance(y, (list, dict)) for y in x) for x in obj
    )
    if (
        len(flat) + level <= width
        or scalars
        or (rows and len(flat) <= 8 * width)
        or not isinstance(obj, (list, dict))
        or not obj
    ):
        return flat
    pad = " " * (level + 1)
    if isinstance(obj, list):
        items = [pad + dumps(x, level + 1, width) for x in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * level + "]"
    items = [pad + json.dumps(k) + ": " + dumps(v, level + 1, width) for k, v in obj.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * level + "}"


def main() -> int:
    sys.path.insert(0, str(HERE.parents[2]))
    from mars.engines.base import Problem
    from mars.engines.generate import run_batch
    from mars.engines.sglang import SGLangBackend, trace_seed
    from mars.store.grid import Grid

    problem = Problem(qid=0, question="What is 2 + 3?", answer="5", dataset="toy")
    seed, n, spacing, max_tokens = 7, 3, 8, 24
    tok = ToyTokenizer()
    # the prompt and suffix ids come from the adapter itself; the engine only checks them
    be = SGLangBackend("toy/Toy-Reasoner", engine=object(), tokenizer=tok, max_tokens=max_tokens)
    firsts = {trace_seed(seed, problem.qid, j): name for j, name in enumerate("ABC")}
    engine = ScriptedEngine(be.prompt_ids(problem.question), be.suffix_ids, firsts)
    be.engine = engine
    be.engine_info = {**SERVER_INFO, "context_len": CONTEXT_LEN}
    records = run_batch(be.start(problem, n, seed), Grid(spacing), max_tokens=max_tokens)
    doc = {
        "about": "Hand-built SGLang Engine.generate exchanges (shape of SGLang 0.5.23 meta_info, "
        "read in its source), NOT recorded from a live engine; written by "
        "tests/data/sglang/toy.py, replayed by tests/engines/test_sglang.py.",
        "problem": {
            "qid": problem.qid,
            "question": problem.question,
            "answer": problem.answer,
            "dataset": problem.dataset,
        },
        "model": be.model,
        "seed": seed,
        "n_traces": n,
        "spacing": spacing,
        "max_tokens": max_tokens,
        "eos_token_id": EOS_ID,
        "context_len": CONTEXT_LEN,
        "server_info": SERVER_INFO,
        "vocab": VOCAB,
        "exchanges": engine.exchanges,
        "expected": [
            {
                "length": r.result.length,
                "finished": r.result.finished,
                "final_answer": r.result.final_answer,
                "probes": [
                    [p, pr.answer, pr.cached_tokens, pr.generated_tokens] for p, pr in r.probes
                ],
            }
            for r in records
        ],
    }
    path = HERE / "session_toy_q0.json"
    path.write_text(dumps(doc) + "\n")
    print(f"{path}: {len(engine.exchanges)} exchanges in {engine.calls} calls")
    for r in doc["expected"]:
        print(r)
    record_probe_stage(problem, seed, n, spacing, max_tokens, firsts)
    return 0


def record_probe_stage(problem, seed: int, n: int, spacing: int, max_tokens: int, firsts) -> None:
    """``probe_toy_q0.json``: the probe stage on the same scripts.  Generation without probes
    (``generate_pool(probe="none")``: one request per trace, to the cap), then ``probe_pool`` at
    the same spacing on a fresh engine (tier by tier: every trace's probe at 8, then the second
    probes, then the third), then the same probes of the traces stored in another vocabulary
    (:data:`OTHER_VOCAB`), re-encoded into this one."""
    import tempfile

    import pyarrow.parquet as pq

    from mars.engines.base import GeneratorInfo
    from mars.engines.sglang import SGLangBackend
    from mars.generate import generate_pool
    from mars.generate.probe import probe_pool, stored_traces
    from mars.store import schema
    from mars.store.grid import Grid

    def backend(**kw) -> tuple[SGLangBackend, ScriptedEngine]:
        be = SGLangBackend(
            "toy/Toy-Reasoner",
            engine=object(),
            tokenizer=ToyTokenizer(),
            max_tokens=max_tokens,
            **kw,
        )
        engine = ScriptedEngine(be.prompt_ids(problem.question), be.suffix_ids, firsts)
        be.engine = engine
        be.engine_info = {**SERVER_INFO, "context_len": CONTEXT_LEN}
        return be, engine

    with tempfile.TemporaryDirectory() as tmp:
        gen_be, gen_engine = backend()
        pool = generate_pool(gen_be, [problem], n, seed, f"{tmp}/gen", probe="none")
        probe_be, probe_engine = backend()
        probed = probe_pool(pool, f"{tmp}/probed", probe_be, spacing=spacing)
        rows = pq.read_table(probed / schema.trace_file_name(problem.qid)).to_pylist()
        traces = stored_traces(pq.read_table(pool / schema.trace_file_name(problem.qid)))
    other = ToyTokenizer(OTHER_VOCAB)
    for t in traces:
        t.token_ids = np.array(other.ids([T.vocab[i] for i in t.token_ids]), np.int32)
    re_be, re_engine = backend(generator_tokenizer=other)
    positions = [Grid(spacing).probe_positions(t.length) for t in traces]
    manifest = {"backend": "sglang", "model": "toy/Other-Reasoner", "seed": seed}
    reprobed = re_be.reprobe(problem, traces, positions, GeneratorInfo(manifest))
    doc = {
        "about": "Hand-built SGLang Engine.generate exchanges of the probe stage (see "
        "session_toy_q0.json), NOT recorded from a live engine; written by "
        "tests/data/sglang/toy.py, replayed by tests/engines/test_sglang_probe.py.",
        "spacing": spacing,
        "other_vocab": OTHER_VOCAB,
        "other_manifest": manifest,
        "generation": gen_engine.exchanges,
        "probing": probe_engine.exchanges,
        "reencoded": re_engine.exchanges,
        "expected": [
            [[p["position"], p["answer"], p["cached_tokens"]] for p in r["probes"]] for r in rows
        ],
        "expected_reencoded": [
            [[int(d), r.answer, r.cached_tokens] for d, r in zip(ps, rs)]
            for ps, rs in zip(positions, reprobed)
        ],
    }
    path = HERE / "probe_toy_q0.json"
    path.write_text(dumps(doc) + "\n")
    print(f"{path}: {len(probe_engine.exchanges)} probes in {probe_engine.calls} calls")
    for r in doc["expected"]:
        print(r)


if __name__ == "__main__":
    sys.exit(main())
