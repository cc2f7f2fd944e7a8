"""Reproducibility through SGLang (mars/engines/sglang.py): its deterministic inference (issue 13,
item 16), checked when the backend starts its engine; traces depend on the seed, the question and
the trace only."""

from __future__ import annotations

import sys
import types

import numpy as np

from engines.sglang_replay import (
    PROBLEM,
    SESSION,
    ReplayEngine,
    _one_line_error,
    make_backend,
    toy,
)
from mars.engines.base import Problem
from mars.engines.generate import run_batch
from mars.engines.sglang import (
    SGLangBackend,
)
from mars.store.grid import Grid

# -- reproducibility: SGLang's deterministic inference (issue 13, item 16) ------------------------


def test_injected_engine_settings_that_break_seeds_or_probes_are_refused():
    def engine(**info):
        return ReplayEngine(SESSION["exchanges"], server_info=info)

    # seeds sent to an engine without deterministic inference would be ignored
    e = engine(enable_deterministic_inference=False)
    _one_line_error(lambda: make_backend(e), "ignores sampling_seed", "seed_per_trace=False")
    # no seeds to a deterministic engine: every request would get seed 42 (identical traces)
    e2 = engine()
    _one_line_error(lambda: make_backend(e2, seed_per_trace=False), "seed 42", "identical")
    # min_p asserts in SGLang's seeded sampler
    e3 = engine()
    _one_line_error(lambda: make_backend(e3, min_p=0.05), "min_p=0.05", "does not implement")
    # an attention backend with which SGLang silently turns the radix cache off
    e4 = engine(attention_backend="flashinfer", disable_radix_cache=True)
    _one_line_error(lambda: make_backend(e4), "attention_backend='flashinfer'", "fa3, fa4, triton")
    # ... or the radix cache off for any other reason under deterministic inference
    e5 = engine(disable_radix_cache=True)
    _one_line_error(lambda: make_backend(e5), "radix cache is off")
    # refused before any request; an injected engine is not stopped by the backend
    assert all(not x.calls and not x.shut for x in (e, e2, e3, e4, e5))
    # the consistent settings pass: no seeds, no deterministic inference (the reference's way)
    ok = engine(enable_deterministic_inference=False, attention_backend="flashinfer")
    assert make_backend(ok, seed_per_trace=False, min_p=0.05).deterministic is False


class FakeSGLang:
    """Stands in for the ``sglang`` module: records how the backend starts its Engine and reports
    the settings as SGLang resolves them (under deterministic inference, an unset attention backend
    becomes the GPU's default — fa3 on Hopper, flashinfer on Blackwell — and one outside fa3, fa4,
    triton turns the radix cache off)."""

    def __init__(self, gpu_default: str = "fa3", refuse: str | None = None):
        self.started: list = []
        self.gpu_default = gpu_default
        self.refuse = refuse
        fake = self

        class Engine:
            def __init__(self, **kw):
                if fake.refuse:
                    raise ValueError(fake.refuse + "\nmore lines of the engine's message")
                fake.started.append(self)
                self.kw = kw
                self.shut = False
                det = bool(kw.get("enable_deterministic_inference"))
                ab = kw.get("attention_backend") or (fake.gpu_default if det else None)
                self.info = {
                    "version": "0.5.23",
                    "enable_deterministic_inference": det,
                    "attention_backend": ab,
                    "sampling_backend": "pytorch" if det else "flashinfer",
                    "disable_radix_cache": bool(kw.get("disable_radix_cache"))
                    or (det and ab not in ("fa3", "fa4", "triton")),
                    "max_total_num_tokens": 400000,
                }
                self.tokenizer_manager = types.SimpleNamespace(context_len=4096)

            def get_server_info(self):
                return dict(self.info)

            def generate(self, **kw):
                raise AssertionError("no request expected")

            def shutdown(self):
                self.shut = True

        self.Engine = Engine


def _own(monkeypatch, fake: FakeSGLang, **kw) -> SGLangBackend:
    monkeypatch.setitem(sys.modules, "sglang", fake)
    return SGLangBackend("org/model", tokenizer=toy.ToyTokenizer(), **kw)


def test_the_backend_starts_its_engine_deterministic_and_checks_it(monkeypatch):
    fake = FakeSGLang()
    be = _own(monkeypatch, fake, tp_size=2)
    (eng,) = fake.started
    assert eng.kw == {
        "model_path": "org/model",
        "dp_size": 1,
        "tp_size": 2,
        "enable_deterministic_inference": True,
    }
    assert be.describe()["engine"]["enable_deterministic_inference"] is True
    assert be.describe()["engine"]["attention_backend"] == "fa3"
    be.shutdown()
    assert eng.shut
    # without per-trace seeds: the engine's own randomness, and min_p is allowed
    be = _own(monkeypatch, fake, seed_per_trace=False, min_p=0.05)
    assert fake.started[-1].kw["enable_deterministic_inference"] is False
    assert be.describe()["sampling"]["sampling_seed"] is None
    # refused before the engine starts (minutes saved): nothing more is started
    n = len(fake.started)
    for kw, match in [
        ({"min_p": 0.1}, "min_p=0.1"),
        ({"engine_kwargs": {"attention_backend": "flashinfer"}}, "radix cache off"),
        ({"engine_kwargs": {"enable_deterministic_inference": False}}, "ignores sampling_seed"),
        (
            {"seed_per_trace": False, "engine_kwargs": {"enable_deterministic_inference": True}},
            "seed 42",
        ),
    ]:
        _one_line_error(lambda kw=kw: _own(monkeypatch, fake, **kw), match)
    assert len(fake.started) == n
    # on Blackwell SGLang's deterministic default is flashinfer, which drops the radix cache:
    # refused once the engine says so, and the engine is stopped again
    blackwell = FakeSGLang(gpu_default="flashinfer")
    _one_line_error(lambda: _own(monkeypatch, blackwell), "attention_backend='flashinfer'")
    assert blackwell.started[0].shut
    be = _own(monkeypatch, blackwell, engine_kwargs={"attention_backend": "triton"})
    assert be.describe()["engine"]["attention_backend"] == "triton"
    # the engine's own refusal of a setting: one line
    _one_line_error(
        lambda: _own(monkeypatch, FakeSGLang(refuse="bad tp_size")),
        "SGLang refused the engine settings: bad tp_size",
    )


class SeededEngine:
    """SGLang's sampling under deterministic inference, in miniature: the token at sequence
    position ``i`` is drawn from a hash of (``sampling_seed``, ``i − 1``) — whatever request it
    belongs to — and a request without a seed gets 42.  Results have the real ``meta_info``
    shape."""

    VOCAB = 40

    def __init__(self):
        self.requests = 0

    def _draw(self, seed: int, pos: int) -> tuple[int, list[list]]:
        rng = np.random.default_rng([seed, pos])
        lps = np.sort(np.log(rng.dirichlet(np.full(20, 0.5))))[::-1]
        tok = 2 if pos > 84 and rng.random() < 0.1 else int(rng.integers(3, self.VOCAB))
        return tok, [[float(lp), int(t), None] for lp, t in zip(lps, range(3, 23))]

    def generate(self, input_ids, sampling_params, return_logprob=False, top_logprobs_num=None):
        outs = []
        for ids, sp in zip(input_ids, sampling_params):
            self.requests += 1
            seed = sp.get("sampling_seed", 42)
            out, tops = [], []
            for k in range(sp["max_new_tokens"]):
                tok, top = self._draw(seed, len(ids) + k - 1)
                out.append(tok)
                tops.append(top)
                if tok == 2:
                    break
            finish = (
                {"type": "stop", "matched": 2}
                if out[-1] == 2
                else {"type": "length", "length": sp["max_new_tokens"]}
            )
            meta = {
                "id": f"r{self.requests}",
                "finish_reason": finish,
                "prompt_tokens": len(ids),
                "weight_version": "default",
                "num_retractions": 0,
            }
            if return_logprob:
                meta["input_token_logprobs"] = []
                meta["output_token_logprobs"] = [(t[0][0], o, None) for t, o in zip(tops, out)]
                meta["output_token_logprobs_length"] = len(out)
                meta["input_top_logprobs"] = []
                meta["output_top_logprobs"] = [[tuple(e) for e in t] for t in tops]
            meta.update(reasoning_tokens=0, completion_tokens=len(out), cached_tokens=0)
            meta.update(cached_tokens_details=None, e2e_latency=0.01)
            outs.append({"text": None, "output_ids": out, "meta_info": meta})
        return outs

    def get_server_info(self):
        return {**SESSION["server_info"]}


def test_traces_depend_on_seed_question_and_trace_only_not_on_the_checkpoint_grid():
    """One seed per trace: the same trace whatever the spacing, the shard or the batch; distinct
    traces within a question."""

    def traces(spacing, n, first=0, seed=3, problem=PROBLEM):
        be = make_backend(SeededEngine(), max_tokens=64)
        batch = be.start(problem, n, seed, first)
        run_batch(batch, Grid(spacing), max_tokens=64)
        return {first + j: (batch.token_ids(j), batch.result(j).confs) for j in range(n)}

    base = traces(8, 4)
    for other in (traces(5, 4), traces(16, 2, first=2), traces(64, 1, first=1)):
        for t, (ids, confs) in other.items():
            assert ids == base[t][0] and np.array_equal(confs, base[t][1])
    ids = [base[t][0] for t in range(4)]
    assert len({tuple(x) for x in ids}) == 4  # no two traces alike
    assert any(x[-1] == 2 for x in ids) and any(len(x) == 64 for x in ids)
    # another seed or another question: other traces
    assert traces(8, 1, seed=4)[0][0] != ids[0]
    q1 = Problem(qid=1, question=PROBLEM.question, answer="5", dataset="toy")
    assert traces(8, 1, problem=q1)[0][0] != ids[0]
    # what the refused setting would do: SGLang's default seed 42 for every request
    seedless = SeededEngine()
    same = seedless.generate([[1, 2, 3]] * 3, [{"max_new_tokens": 8}] * 3)
    assert same[0]["output_ids"] == same[1]["output_ids"] == same[2]["output_ids"]
