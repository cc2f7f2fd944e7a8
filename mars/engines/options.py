"""Every option of the engine stages (generate, probe, solve), declared once.

Each :class:`~mars.declare.Option` is one option: its type, default, range and help, the
commands that take it, and where the workflow config sets it (``config``: a model's own key, a key
of its ``sampling`` or ``engine`` map, or a key of the ``probe`` section). The command-line options
of ``mars generate``, ``mars probe``, ``mars solve`` and ``mars serve``, the workflow's config
schema (``$defs`` ``sampling``, ``engine``, ``server``: :func:`schema_defs`, written into the file
by ``python -m maint_tools.config_schema``) and the options its rules pass derive from these
declarations; a test checks the checked-in schema. Adding an engine option is one declaration
here plus its use in the engines. (The simulation settings and ``mars serve``'s own options are
declared with the same type, in :mod:`mars.method.settings` and :mod:`mars.serve.options`.)
"""

from __future__ import annotations

from typing import Any

from ..declare import Option, by_name
from ..store.grid import MIN_SPACING, Grid
from ..store.schema import CHECKPOINT_SPACING

#: the commands that run an engine (``serve``: the defaults of the questions it serves)
GENERATE, PROBE, SOLVE, SERVE = "generate", "probe", "solve", "serve"
#: where the workflow config sets an option: a model's own key (``models.<m>.<name>``), its
#: ``sampling`` or ``engine`` map, a model's or the probe section's server keys, the ``probe``
#: section (the ``sampling`` map there for sampling options), or not at all (None)
MODEL, SAMPLING, ENGINE, SERVER = "model", "sampling", "engine", "server"
#: the ``generation`` section (a model may override it with a key of its own)
GENERATION = "generation"


ALL = (GENERATE, PROBE, SOLVE)
OPTIONS: tuple[Option, ...] = (
    Option(
        "spacing",
        int,
        "probe every this many tokens (and at each trace's end)",
        (*ALL, SERVE),
        config=PROBE,
        default=CHECKPOINT_SPACING,
        low=MIN_SPACING,  # for the config schema: a Grid checks it (check)
    ),
    Option(
        "traces",
        int,
        "traces per question (the pool)",
        (GENERATE,),
        config=GENERATION,
        default=128,
        low=1,
    ),
    Option(
        "n_shards",
        int,
        "generate jobs per model x dataset (the pool's shards)",
        (GENERATE,),
        config=GENERATION,
        default=1,
        low=1,
        key="shards",
    ),
    Option(
        "seed",
        int,
        "generation seed",
        (GENERATE, SOLVE, SERVE),
        config=GENERATION,
        default=0,
        low=0,
    ),
    Option(
        "confs",
        bool,
        "store per-token confidences (DeepConf needs them)",
        (GENERATE,),
        config=GENERATION,
        default=True,
    ),
    Option(
        "skill",
        float,
        "synthetic: override the preset's skill (mean per-trace correctness)",
        (GENERATE, SOLVE),
        config=MODEL,
        low=0,
        high=1,
        low_open=True,
        high_open=True,
    ),
    Option(
        "max_tokens",
        int,
        "token cap per trace (default the backend's)",
        (GENERATE, SOLVE, SERVE),
        config=MODEL,
        low=1,
    ),
    Option(
        "temperature",
        float,
        "sampling temperature (real engines; probes default 0.6)",
        (*ALL, SERVE),
        config=SAMPLING,
        low=0,
    ),
    Option(
        "top_p",
        float,
        "nucleus sampling (real engines; probes default 0.95)",
        (*ALL, SERVE),
        config=SAMPLING,
        low=0,
        high=1,
        low_open=True,
    ),
    Option(
        "top_k",
        int,
        "top-k sampling (real engines; probes default 20)",
        (*ALL, SERVE),
        config=SAMPLING,
        low=1,
    ),
    Option(
        "decode",
        str,
        "transformers: eager (default: a growing KV cache), static (a static KV cache) or "
        "cuda-graphs (static, each step replayed as a CUDA graph; CUDA only)",
        ALL,
        config=ENGINE,
        pattern=r"^(eager|static|cuda-graphs)$",
    ),
    Option("tp_size", int, "SGLang: tensor-parallel GPUs", (GENERATE,), config=ENGINE, low=1),
    Option("dp_size", int, "SGLang: data-parallel replicas", (GENERATE,), config=ENGINE, low=1),
    Option(
        "base_url",
        str,
        "an http(s)://HOST:PORT URL of the server (--backend server; key: $MARS_API_KEY)",
        ALL,
        config=SERVER,
        pattern=r"^https?://[^\s/]+(/\S*)?$",
    ),
    Option(
        "concurrency",
        int,
        "server: requests in flight at most (default: llama.cpp's slots, else 32)",
        (*ALL, SERVE),
        config=SERVER,
        low=1,
    ),
    Option(
        "timeout",
        float,
        "server: seconds one request may take (default 600)",
        (*ALL, SERVE),
        config=SERVER,
        low=0,
        low_open=True,
    ),
    Option(
        "suffix",
        str,
        "probe suffix appended after the trace (default: the reference prober's)",
        (PROBE,),
        config=PROBE,
    ),
    Option(
        "max_new_tokens",
        int,
        "tokens a probe may generate (default 50)",
        (PROBE,),
        config=PROBE,
        low=1,
    ),
)
BY_NAME = by_name(OPTIONS)


def check(values: dict[str, Any]) -> None:
    """Refuse a value outside its declared range, in one line naming the option."""
    for name, value in values.items():
        if name == "spacing" and value is not None:  # the grid checks its own spacing
            Grid.checked(value)
        else:
            BY_NAME[name].check(value)


def options_of(command: str, config: str | None = "any") -> list[Option]:
    """The options ``command`` takes (of one config place, if given)."""
    return [o for o in OPTIONS if command in o.commands and (config == "any" or o.config == config)]


def flags(values: dict[str, Any], config: str) -> list[str]:
    """``--flag value`` of the declared options of one config place that ``values`` sets (a
    config's ``sampling`` map, a model's keys, the ``probe`` section); unknown keys are the
    schema's to refuse."""
    import shlex

    out = []
    for o in OPTIONS:
        value = values.get(o.config_key)
        if o.config != config or value is None:
            continue
        if o.type is bool:
            if value != o.default:
                out.append(o.flag if value else f"--no-{o.flag[2:]}")
        else:
            out.append(f"{o.flag} {shlex.quote(str(value))}")
    return out


def schema_defs() -> dict[str, dict]:
    """The workflow config schema's ``$defs`` for the option maps, ``sampling``, ``engine`` and
    ``server``, and for the ``generation`` and ``probe`` sections' declared keys with their
    defaults (``generation_params``, ``probe_params``)."""

    def group(config: str, description: str, closed: bool = True) -> dict:
        out: dict[str, Any] = {"description": description, "type": "object"}
        out["properties"] = {o.name: o.schema() for o in OPTIONS if o.config == config}
        if closed:
            out["additionalProperties"] = False
        return out

    generation = {
        o.config_key: {**o.schema(), "default": o.default}
        for o in OPTIONS
        if o.config == GENERATION
    }

    def with_default(o: Option) -> dict:
        prop = o.schema()
        if o.default is None:  # unset: the engine's or the generator's own
            prop["type"] = [prop["type"], "null"]
        return {**prop, "default": o.default}

    return {
        "probe_params": {
            "description": "the probe stage's own options (mars.engines.options)",
            "type": "object",
            "properties": {o.config_key: with_default(o) for o in OPTIONS if o.config == PROBE},
        },
        "generation_params": {
            "description": "generation settings shared by every model (mars.engines.options)",
            "type": "object",
            "properties": generation,
        },
        "sampling": group(SAMPLING, "sampling options of the engine (mars.engines.options)"),
        "engine": group(ENGINE, "engine options, e.g. SGLang's parallelism (mars.engines.options)"),
        "server": group(
            SERVER,
            "how to reach an inference server (`--backend server`): where it runs and how hard to "
            "push it, none of which changes the traces, so changing them reruns nothing",
            closed=False,  # combined with a model's or the probe section's own keys
        ),
    }
