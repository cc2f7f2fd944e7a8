"""The Snakemake workflow's configuration, checked when the Snakefile is parsed, before any job.

Every problem is one line naming the key (``simulation.budget``, ``imports[0].path``): Snakemake's
own schema check prints the whole schema for a typo, and a missing input file would otherwise
surface as Snakemake's ``MissingInputException`` after the DAG is built, or not at all when the
outputs that need it already exist. ``workflow/rules/common.smk`` calls :func:`check_config`:
:func:`check_schema` on the configuration as given, Snakemake's validation to fill in the
schema's defaults, then :func:`check_values`. :func:`report_dir` and
:func:`report_html_command` say where a config's report goes and how to get its HTML version,
as a command that works as printed.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
from collections.abc import Iterable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from .engines.endpoint import redact
from .errors import MarsError

#: the report folder of the embedded default (config/config.yaml sets it explicitly)
DEFAULT_REPORT = "results/report"


class ConfigError(MarsError):
    """A workflow configuration that cannot run: one line naming the key."""


# ---------------------------------------------------------------------------------------------
# the schema: unknown keys, types and ranges, one line each


def _key(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "(top level)"


def _resolve(node: dict, root: dict) -> dict:
    ref = node.get("$ref")
    while ref is not None:
        node = root
        for part in ref.lstrip("#/").split("/"):
            node = node[part]
        ref = node.get("$ref")
    return node


def _known_keys(node: dict, root: dict) -> list[str]:
    """The keys a schema object allows: its properties and those of what it includes."""
    node = _resolve(node, root)
    keys = list(node.get("properties", {}))
    for sub in node.get("allOf", []):
        keys += [k for k in _known_keys(sub, root) if k not in keys]
    return keys


_UNKNOWN = ("additionalProperties", "unevaluatedProperties")
_UNEXPECTED = re.compile(r"\('(.+?)' (?:was|were) unexpected\)")
_NESTED_TEXT = (
    " (a value inside braces given to --config stays text: set nested keys in an overlay file,"
    " --configfile BASE.yaml OVERLAY.yaml; config/README.md)"
)


def _unexpected(error, schema: dict) -> str | None:
    """The key an unknown-key error is about, unless the schema knows it (then the key was only
    left unevaluated because its value failed)."""
    m = _UNEXPECTED.search(error.message)
    known = _known_keys(error.schema, schema)
    bad = [k for k in (m.group(1).split("', '") if m else []) if k not in known]
    return bad[0] if bad else None


def _entry_key_of(bad: str, node: dict, root: dict) -> str | None:
    """The map below ``node`` each of whose entries takes the key ``bad``, if any (``settings``
    for ``calibration`` under ``simulation``: a setting's key, not the section's)."""
    node = _resolve(node, root)
    props = dict(node.get("properties", {}))
    for sub in node.get("allOf", []):
        props.update(_resolve(sub, root).get("properties", {}))
    for name, sub in props.items():
        entry = _resolve(sub, root).get("additionalProperties")
        if isinstance(entry, dict) and bad in _known_keys(entry, root):
            return name
    return None


def _message(error, schema: dict) -> str:
    """One line for a jsonschema error of ``schema``: the key, then the problem."""
    where = _key(error.absolute_path)
    if error.validator in _UNKNOWN:
        bad = _unexpected(error, schema) or "?"
        known = _known_keys(error.schema, schema)
        near = difflib.get_close_matches(bad, known, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        key = bad if where == "(top level)" else f"{where}.{bad}"
        home = _entry_key_of(bad, error.schema, schema)
        if home is not None:
            above = "" if where == "(top level)" else f"{where}."
            hint = f"a key of each entry of {above}{home}: write {above}{home}.<name>.{bad}; "
        if "." in bad and where == "(top level)":
            hint = f"keys do not nest with dots: write {bad.split('.')[0]}: {{...}}; "
        return f"{key}: unknown key ({hint}known: {', '.join(known)})"
    text = error.message
    if (
        error.validator == "type"
        and isinstance(error.instance, str)
        and re.fullmatch(r"\s*-?\d+(\.\d*)?\s*|\s*(true|false)\s*", error.instance)
    ):
        text += _NESTED_TEXT
    elif error.validator == "pattern" and error.schema.get("description"):
        text = f"{error.instance!r} is not {error.schema['description']}"
    return redact(f"{where}: {text}")  # a URL's credentials are not shown


def check_schema(config: dict, schema: dict) -> None:
    """Refuse a configuration the schema does not allow, in one line naming the key."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    _check_finite(config)
    errors = list(Draft202012Validator(schema).iter_errors(config))
    if not errors:
        return
    unknown = [e for e in errors if e.validator in _UNKNOWN and _unexpected(e, schema)]
    error = min(unknown, key=lambda e: list(map(str, e.absolute_path))) if unknown else None
    if error is None:
        error = best_match(e for e in errors if e.validator not in _UNKNOWN)
        while error.context:  # oneOf / anyOf: the branch that came closest
            error = best_match(error.context)
    raise ConfigError(_message(error, schema))


def _check_finite(node, path: tuple = ()) -> None:
    """Refuse a NaN or infinite number anywhere (YAML's ``.nan``, ``.inf``): a schema's minimum
    and maximum never reject NaN, and every job given one would fail."""
    if isinstance(node, float) and not math.isfinite(node):
        raise ConfigError(f"{_key(path)}: {node} is not a finite number")
    if isinstance(node, dict):
        for k, v in node.items():
            _check_finite(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _check_finite(v, (*path, i))


# ---------------------------------------------------------------------------------------------
# what the schema cannot say: files, presets, methods, question lists, references between keys


def gen_value(config: dict, model: str, key: str):
    """A generation setting of a model: its own value, else the generation section's."""
    return config["models"][model].get(key, config["generation"].get(key))


def model_datasets(config: dict, model: str) -> list[str]:
    """The datasets a model generates: its own list, else generation.datasets, else all."""
    spec = config["models"][model]
    if spec.get("datasets") is not None:
        return list(spec["datasets"])
    if config["generation"]["datasets"] is not None:
        return list(config["generation"]["datasets"])
    return list(config["datasets"])


def setting_params(config: dict, setting: str) -> dict:
    """The simulation defaults overridden by one setting's own values (a trade-off setting's:
    :func:`tradeoff_settings`). A calibrated setting (``calibration: true``) runs without a
    warmup: its warmup is 0 unless it sets one (which :func:`check_values` refuses)."""
    sim = config["simulation"]
    own = sim["settings"].get(setting)
    if own is None:
        own = tradeoff_settings(config)[setting]
    params = {**{k: v for k, v in sim.items() if k != "settings"}, **own}
    if own.get("calibration") and "warmup" not in own:
        params["warmup"] = 0
    return params


def calibrated(config: dict, setting: str) -> bool:
    """Whether a setting's simulations read their pool's calibration (``mars calibrate``, the
    workflow's calibrate stage) instead of a warmup per question."""
    return bool(setting_params(config, setting).get("calibration"))


def calibrated_settings(config: dict) -> list[str]:
    """The configured settings that read a calibration (the trade-off settings never do)."""
    return [s for s in config["simulation"]["settings"] if calibrated(config, s)]


def calibration_protocol(config: dict) -> str | None:
    """The protocol the pools' calibrations are fitted under: the calibrated settings' (one, by
    :func:`check_values`); None when no setting reads a calibration."""
    settings = calibrated_settings(config)
    if not settings:
        return None
    return setting_params(config, settings[0]).get("protocol") or "bootstrap"


def pools(config: dict) -> list[tuple[str, str]]:
    """Every pool of a config as (model, dataset): the generated ones, then the imported ones."""
    generated = [(m, d) for m in config["models"] for d in model_datasets(config, m)]
    return generated + [(i["model"], i["dataset"]) for i in config["imports"]]


def calibration_pools(config: dict, model: str, dataset: str) -> list[tuple[str, str]]:
    """The pools a pool's calibration is fitted on, out of sample: the same model's pools of the
    other datasets; the pool itself when the model has no other (the simulation then records the
    calibration as in sample)."""
    others = [(m, d) for m, d in pools(config) if m == model and d != dataset]
    return others or [(model, dataset)]


#: the settings the ``tradeoff`` section makes are named this, then 1, 2, ... (reserved)
TRADEOFF_PREFIX = "tradeoff-"


def tradeoff_settings(config: dict) -> dict[str, dict]:
    """The ``tradeoff`` section as simulation settings: ``tradeoff-<i>`` holds point ``i`` of every
    declared sweep (:func:`mars.method.registry.sweep_settings`) at the section's budget,
    iterations and questions (by default the simulation's)."""
    from .method.registry import sweep_settings

    section = config.get("tradeoff") or {}
    if not section.get("pools"):
        return {}
    base = {k: section[k] for k in ("budget", "iterations", "questions") if section.get(k)}
    return {
        f"{TRADEOFF_PREFIX}{i}": {**base, **knobs, "methods": methods}
        for i, (knobs, methods) in enumerate(sweep_settings(), 1)
    }


def pair_settings(config: dict, model: str, dataset: str) -> list[str]:
    """The settings a pool is simulated with: every configured one, and the trade-off settings
    for a pool the ``tradeoff`` section lists."""
    settings = list(config["simulation"]["settings"])
    if f"{model}/{dataset}" in (config.get("tradeoff") or {}).get("pools", []):
        settings += list(tradeoff_settings(config))
    return settings


def main_setting(config: dict) -> str:
    """The setting whose runs fill the report's main tables (and that the analysis reads):
    ``default`` if configured, else the first."""
    settings = list(config["simulation"]["settings"])
    return "default" if "default" in settings else settings[0]


def analysed(config: dict) -> bool:
    """Whether the main setting gets an analysis (``mars analyze``): it reads the bootstrap
    protocol's samples and the fit stage's switch models."""
    return uses_fit(config, main_setting(config))


def example_args(config: dict, model: str, dataset: str) -> str:
    """`mars analyze` options of a pool: report.example's question when it names this pool, and
    the q-calibration size."""
    report = config["report"]
    args = [f"--q-questions {report['q_questions']}"]
    spec = report.get("example")
    if spec:
        pair, _, rest = spec.partition(":")
        if pair == f"{model}/{dataset}":
            args.append(f"--example {rest}")
    return " ".join(args)


def import_args(imp: dict) -> str:
    """`mars import` options of an import (its grid, for Parallel-Probe matrices)."""
    return f"--spacing {imp['spacing']}" if "spacing" in imp else ""


def uses_fit(config: dict, setting: str) -> bool:
    """Whether a setting's simulations read the fit stage's arrays and switch models (the
    bootstrap protocol; another protocol builds its own, mars.method.protocol)."""
    return setting_params(config, setting).get("protocol") in (None, "bootstrap")


def methods_spec(methods) -> str:
    return methods if isinstance(methods, str) else ",".join(methods)


# ---------------------------------------------------------------------------------------------
# models served by an inference server (backend: server)

#: the keys of a server (schema ``$defs.server``), options of ``mars generate`` and ``mars probe``
#: (the server backend's other options, e.g. the server's kind or the tokenizer, come from
#: ``MARS_BACKEND_OPTIONS`` in the environment the jobs run in)
SERVER_KEYS = ("base_url", "concurrency", "timeout")

#: what a job asks for unless the config says (models.<m>.resources, probe.resources): a job that
#: talks to a server runs the tokenizer and HTTP requests only, no model of its own
DEFAULT_RESOURCES = {
    "synthetic": {"gpu": 0, "mem_mb": 4000, "runtime": 60},
    "server": {"gpu": 0, "mem_mb": 8000, "runtime": 720},
    "transformers": {"gpu": 1, "mem_mb": 64000, "runtime": 720},
    "sglang": {"gpu": 1, "mem_mb": 64000, "runtime": 720},
}


def probe_engine(config: dict, model: str) -> str:
    """The engine that probes a model's traces: ``probe.backend``, else the generator's."""
    return config["probe"].get("backend") or config["models"][model]["backend"]


def server_of(config: dict, model: str, stage: str) -> dict | None:
    """The server a ``generate`` or ``probe`` job of ``model`` talks to (its :data:`SERVER_KEYS`
    that are set), or None when the job runs its engine itself. Probing goes to the model's own
    server unless the probe section names another (``probe.base_url`` and the rest)."""
    spec = config["models"][model]
    own = {k: spec[k] for k in SERVER_KEYS if spec.get(k) is not None}
    if stage == "generate":
        return own if spec["backend"] == "server" else None
    if probe_engine(config, model) != "server":
        return None
    probe = {k: config["probe"][k] for k in SERVER_KEYS if config["probe"].get(k) is not None}
    return {**(own if spec["backend"] == "server" else {}), **probe}


#: The environment variable a job finds a server URL's credentials in: this prefix and a digest
#: of the URL (:func:`server_flags`).
CREDENTIALS_ENV = "MARS_SERVER_CREDENTIALS_"


def server_flags(server: dict | None, env: MutableMapping[str, str] | None = None) -> str:
    """The command-line options of a server (nothing without one).

    Credentials in its URL (``http://user:pass@host``) stay off the command line, which
    Snakemake shows and logs: they go into an environment variable the jobs inherit (``env``,
    default this process's: the Snakefile's, which runs again in every cluster job), and the
    command line names it (``--base-url "http://$MARS_SERVER_CREDENTIALS_…@host:port"``, the
    job's shell fills it in)."""
    if not server:
        return ""
    env = os.environ if env is None else env
    flags = []
    for k in SERVER_KEYS:
        if k in server:
            value = str(server[k])
            arg = _url_arg(value, env) if k == "base_url" else shlex.quote(value)
            flags.append(f"--{k.replace('_', '-')} {arg}")
    return " ".join(flags)


def _url_arg(url: str, env: MutableMapping[str, str]) -> str:
    """A server URL as a shell word, its credentials (if any) left in ``env``."""
    import hashlib
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    if not at:
        return shlex.quote(url)
    var = CREDENTIALS_ENV + hashlib.sha256(url.encode()).hexdigest()[:12].upper()
    env[var] = userinfo
    rest = url[len(parts.scheme) + 3 + len(userinfo) + 1 :]

    def quoted(text: str) -> str:  # inside double quotes: \, $, ` and " escaped
        return re.sub(r'([\\$`"])', r"\\\1", text)

    return f'"{parts.scheme}://${var}@{quoted(rest)}"'


def job_resource(config: dict, model: str, stage: str, key: str):
    """A ``generate`` or ``probe`` job's resource (``gpu``, ``gpu_model``, ``mem_mb``,
    ``runtime``): the config's, else what the job's engine needs (:data:`DEFAULT_RESOURCES`).
    A probe job takes ``probe.resources``, else the generating model's resources when the same
    engine probes, else the probe engine's defaults."""
    spec = config["models"][model]
    engine = spec["backend"]
    own = spec.get("resources") or {}
    if stage == "probe":
        res = config["probe"].get("resources") or {}
        if key in res:
            return res[key]
        if probe_engine(config, model) != engine:
            engine, own = probe_engine(config, model), {}
    if key in own:
        return own[key]
    return "" if key == "gpu_model" else DEFAULT_RESOURCES[engine][key]


def _check_servers(config: dict) -> None:
    """Server keys only where a server is used, and a URL for every job that talks to one (the
    command line's check of ``--base-url``, in its words)."""
    from .engines.endpoint import check_base_url

    models, probe = config["models"], config["probe"]

    def check_url(key: str, url: str) -> None:
        try:
            check_base_url(url, key)
        except MarsError as exc:
            raise ConfigError(str(exc)) from None

    for m, spec in models.items():
        for k in SERVER_KEYS:
            if spec.get(k) is not None and spec["backend"] != "server":
                raise ConfigError(
                    f"models.{m}.{k}: only for a model served by a server (backend: server), "
                    f"not {spec['backend']}"
                )
        if spec.get("base_url") is not None:
            check_url(f"models.{m}.base_url", spec["base_url"])
    if probe.get("base_url") is not None:
        check_url("probe.base_url", probe["base_url"])
    probed = [m for m in models if server_of(config, m, "probe") is not None]
    set_here = [k for k in SERVER_KEYS if probe.get(k) is not None]
    if set_here and not probed:
        raise ConfigError(
            f"probe.{set_here[0]}: only for probing through a server (probe.backend: server, "
            "or a model of backend server)"
        )
    for m in probed:
        if "base_url" not in (server_of(config, m, "probe") or {}):
            raise ConfigError(
                f"probe.base_url: probe.backend server needs the server's URL to probe the "
                f"traces of models.{m} ({models[m]['backend']})"
            )


def _check_calibrated(config: dict) -> None:
    """A calibrated setting (``calibration: true``) runs without a warmup, so with
    self-consistency's methods only (DeepConf's filter reads its own warmup traces), and every
    calibrated setting reads its pool's one calibration, so they share one protocol."""
    from .method.registry import parse_methods

    sim = config["simulation"]
    first: tuple[str, str] | None = None
    for s in calibrated_settings(config):
        key = f"simulation.settings.{s}"
        own = sim["settings"][s]
        if own.get("warmup"):
            raise ConfigError(
                f"{key}.warmup: a calibrated setting (calibration: true) reads its pool's "
                f"calibration instead of a warmup: leave warmup out (0), not {own['warmup']}"
            )
        spec = methods_spec(setting_params(config, s)["methods"])
        deepconf = [m.name for m in parse_methods(spec) if not m.filter.keeps_all]
        if deepconf:
            where = "" if "methods" in own else f" (simulation.methods {spec!r})"
            raise ConfigError(
                f"{key}.methods{where}: {deepconf[0]} is a DeepConf method, whose filter reads "
                "its own warmup traces; a calibrated setting (calibration: true) has none: list "
                "self-consistency's methods, e.g. [sc, sc-mars2, sc-mars2-launch]"
            )
        protocol = setting_params(config, s).get("protocol") or "bootstrap"
        if first is None:
            first = (s, protocol)
        elif protocol != first[1]:
            raise ConfigError(
                f"{key}.protocol: {protocol}, but the calibrated setting {first[0]} runs under "
                f"{first[1]}: the calibrated settings read each pool's one calibration "
                "(results/calibrate/), fitted under one protocol"
            )


def _questions(key: str, spec) -> list[int] | None:
    """A question list of the config (None: every question), refused in one line naming it."""
    from .store.problems import parse_question_spec

    try:
        return parse_question_spec(spec, name=key)
    except MarsError as exc:
        raise ConfigError(str(exc)) from None


def _check_selections(config: dict) -> None:
    """Question lists: well formed; generation's within each generated dataset; a setting's
    within what was generated (imported pools are checked by their simulate job)."""
    from .store.problems import select_problems

    gen_key = "generation.questions"
    generated = _questions(gen_key, config["generation"]["questions"])
    datasets = {d for m in config["models"] for d in model_datasets(config, m)}
    known: dict[str, set[int]] = {}
    for d in sorted(datasets):
        try:
            _, qids = select_problems(config["datasets"][d], generated)
        except MarsError as exc:
            where = gen_key if generated is not None else f"datasets.{d}"
            raise ConfigError(f"{where} (dataset {d}): {exc}") from None
        known[d] = set(qids)
    sim = config["simulation"]
    for key, spec in (
        [("simulation.questions", sim.get("questions"))]
        + [
            (f"simulation.settings.{s}.questions", o.get("questions"))
            for s, o in sim["settings"].items()
        ]
        + [("tradeoff.questions", (config.get("tradeoff") or {}).get("questions"))]
    ):
        asked = _questions(key, spec)
        for d, have in known.items():
            missing = sorted(set(asked or ()) - have)
            if missing:
                gen = config["generation"]["questions"]
                made = f"{gen_key} {gen!r}" if gen is not None else "every question"
                raise ConfigError(
                    f"{key} {spec!r}: question {missing[0]} is not in the pools generated for "
                    f"{d} ({made}: {len(have)} questions)"
                )


def _check_inputs(config: dict, problem_sets: Sequence[str], presets: Sequence[str]) -> None:
    """Every input file a key names exists (paths relative to the working directory)."""
    here = f"relative to the working directory {Path.cwd()}"
    for name, source in config["datasets"].items():
        if source not in problem_sets and not Path(source).is_file():
            raise ConfigError(
                f"datasets.{name}: {source!r} is neither a bundled problem set "
                f"({', '.join(problem_sets)}) nor an existing jsonl file ({here})"
            )
    for m, spec in config["models"].items():
        preset = spec.get("preset")
        if spec["backend"] == "synthetic" and preset not in presets and not Path(preset).is_file():
            raise ConfigError(
                f"models.{m}.preset: unknown synthetic preset {preset!r} "
                f"(bundled: {', '.join(presets)}; or a preset JSON file)"
            )
    for i, imp in enumerate(config["imports"]):
        path = Path(imp["path"])
        want_dir = imp["format"] == "pool"
        if not (path.is_dir() if want_dir else path.is_file()):
            what = "pool directory" if want_dir else f"{imp['format']} file"
            state = "does not exist" if not path.exists() else f"is not a {what}"
            raise ConfigError(f"imports[{i}].path: {imp['path']} {state} ({here})")


def check_values(
    config: dict, problem_sets: Sequence[str] = (), presets: Sequence[str] = ()
) -> None:
    """Refuse what the schema cannot see, in one line naming the key: missing input files, an
    unknown preset or method, a bad question list, a dataset used but not defined, more shards
    than traces, an import that is also generated, nothing to do, server keys of a model that
    is not served, a server job without a URL, a calibrated setting with a warmup, a DeepConf
    method or another protocol than the other calibrated settings'."""
    from .method.registry import parse_methods

    datasets, models, gen = config["datasets"], config["models"], config["generation"]
    used = list(gen["datasets"] or []) + [
        d for spec in models.values() for d in spec.get("datasets") or []
    ]
    for d in used:
        if d not in datasets:
            raise ConfigError(
                f"dataset {d!r} is used by a model but not defined under datasets "
                f"(defined: {', '.join(datasets) or 'none'})"
            )
    for m in models:
        if gen_value(config, m, "shards") > gen_value(config, m, "traces"):
            raise ConfigError(f"models.{m}: more shards than traces per question")
    generated = {(m, d) for m in models for d in model_datasets(config, m)}
    seen = set()
    for i, imp in enumerate(config["imports"]):
        pair = (imp["model"], imp["dataset"])
        if pair in seen:
            raise ConfigError(f"imports[{i}]: {imp['model']}/{imp['dataset']} is listed twice")
        seen.add(pair)
        if pair in generated:
            raise ConfigError(
                f"imports[{i}]: {imp['model']}/{imp['dataset']} is also generated by "
                f"models.{imp['model']}"
            )
        if "spacing" in imp and imp["format"] != "parallel-probe":
            raise ConfigError(
                f"imports[{i}].spacing: only for parallel-probe matrices ({imp['format']} "
                "keeps its grid)"
            )
    if not generated and not seen:
        raise ConfigError("nothing to do: no models (with datasets) and no imports")
    for s in config["simulation"]["settings"]:
        try:
            parse_methods(methods_spec(setting_params(config, s)["methods"]))
        except MarsError as exc:
            raise ConfigError(f"simulation.settings.{s}.methods: {exc}") from None
    _check_calibrated(config)
    for s in config["simulation"]["settings"]:
        if s.startswith(TRADEOFF_PREFIX):
            raise ConfigError(
                f"simulation.settings.{s}: names starting with {TRADEOFF_PREFIX!r} are the "
                "tradeoff section's; choose another"
            )
    pools = {f"{m}/{d}" for m, d in generated | seen}
    for i, pair in enumerate((config.get("tradeoff") or {}).get("pools", [])):
        if pair not in pools:
            raise ConfigError(
                f"tradeoff.pools[{i}]: {pair} is no pool of this config "
                f"(pools: {', '.join(sorted(pools))})"
            )
    example = config["report"].get("example")
    if example and example.partition(":")[0] not in pools:
        raise ConfigError(f"report.example {example!r}: names no pool of this config")
    if example and not analysed(config):
        raise ConfigError(
            f"report.example {example!r}: the main setting {main_setting(config)!r} runs no "
            "bootstrap simulation to analyse"
        )
    _check_servers(config)
    _check_inputs(config, problem_sets, presets)
    _check_selections(config)


def check_config(config: dict, schema_path: str | Path) -> None:
    """Check a workflow config and fill in the schema's defaults (in place): the schema first,
    then what it cannot see. One line naming the key (:class:`ConfigError`) for any problem."""
    from .errors import need_extra

    need_extra(("snakemake", "yaml", "jsonschema"), "workflow", "the workflow")
    import yaml
    from snakemake.utils import validate

    from .engines.factory import bundled_presets
    from .store.problems import bundled_problem_sets

    check_schema(config, yaml.safe_load(Path(schema_path).read_text()))
    validate(config, str(schema_path))  # fills in the defaults (it passes: checked above)
    check_values(config, bundled_problem_sets(), bundled_presets())


# ---------------------------------------------------------------------------------------------
# where the report goes, and the command that renders its HTML version


def report_dir(config: dict, configfiles: Sequence[str | Path]) -> str:
    """This config's report folder: ``report.out``, else ``results/report-<config file name>``
    (the first ``--configfile``), else the embedded default's ``results/report``; so running
    another config never replaces or hides a config's report."""
    out = config["report"].get("out")
    if out:
        return str(out).rstrip("/")
    if not configfiles:
        return DEFAULT_REPORT
    stem = re.sub(r"[^A-Za-z0-9_.+-]+", "-", Path(configfiles[0]).stem).strip("-.") or "config"
    return f"{DEFAULT_REPORT}-{stem}"


def _absolute(path: str | Path) -> Path:
    return Path(os.path.abspath(path))  # symlinks kept: a venv's python links elsewhere


def display_path(path: str | Path, cwd: str | Path | None = None) -> str:
    """``path`` relative to ``cwd`` (default: the working directory) when it lies below it,
    else absolute: short, and working from ``cwd``."""
    path, cwd = _absolute(path), _absolute(cwd if cwd is not None else Path.cwd())
    if not path.is_relative_to(cwd):
        return str(path)
    rel = str(path.relative_to(cwd))
    return rel if "/" in rel else f"./{rel}"


def report_html_command(
    python: str | Path,
    report: str,
    configfiles: Sequence[str | Path] = (),
    config_args: Sequence[str] = (),
    snakefile: str | Path | None = None,
    workdir: str | Path | None = None,
) -> str:
    """``snakemake --report <report>.html`` with what selects this run (config files, --config
    values; the Snakefile and working directory when the Snakefile is elsewhere), quoted for a
    POSIX shell. It works as printed without an activated environment: Snakemake is named by
    its path beside ``python`` (relative when under the working directory)."""
    cwd = _absolute(workdir if workdir is not None else Path.cwd())
    main = None if snakefile is None else _absolute(snakefile)
    far = main is not None and main.parent != cwd

    def shown(path: str | Path) -> str:
        return str(_absolute(path)) if far else display_path(path, cwd)

    script = Path(python).parent / "snakemake"
    args = [shown(script)] if script.is_file() else [str(python), "-m", "snakemake"]
    if main is not None and far:
        args += ["--snakefile", str(main), "--directory", str(cwd)]
    args += ["--report", shown(cwd / f"{report}.html")]
    if configfiles:
        args += ["--configfile", *(shown(f) for f in configfiles)]
    if config_args:
        args += ["--config", *config_args]
    return shlex.join(args)
