# Configuration checks and the helpers the rules use: every path and every command-line option
# a rule needs is computed here, so the rule files only wire inputs to outputs.

import json
import re
import shlex
import sys
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError

try:
    from mars import workflow as mars_workflow
    from mars.errors import MarsError
    from mars.store.problems import bundled_problem_sets
    from mars.method.settings import SETTINGS as MARS_SETTINGS
    from mars.method.settings import SPECS as MARS_SPECS
    from mars.engines import options as mars_engine_options
except ImportError as exc:
    raise WorkflowError(
        f"the workflow needs the mars package in snakemake's environment ({exc}); "
        "run `pip install -e '.[workflow]'` in the checkout"
    )

SCHEMA = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
BUNDLED_PROBLEMS = bundled_problem_sets()


def _refuse(exc):
    """A config that cannot run: one line naming the key, exit code 2, before any job."""
    files = workflow.overwrite_configfiles or [
        Path(workflow.basedir) / "config" / "config.yaml"
    ]
    shown = ", ".join(mars_workflow.display_path(f) for f in files)
    print(f"error: workflow config ({shown}): {exc}", file=sys.stderr)
    raise SystemExit(2)


try:
    mars_workflow.check_config(config, SCHEMA)  # and fills in the schema's defaults
except MarsError as exc:
    _refuse(exc)

DATASETS = config["datasets"]
MODELS = config["models"]
GEN = config["generation"]
PROBE = config["probe"]
SIM = config["simulation"]
SETTINGS = SIM["settings"]
# the simulation settings a config's `simulation` section may set: declared once, in mars.method.settings
SIM_KEYS = tuple(s.name for s in MARS_SETTINGS if s.section == "simulation") + (
    "questions",
)
# the setting whose runs fill the report's main tables, and that each pool's analysis reads
MAIN_SETTING = mars_workflow.main_setting(config)
# this config's report folder (report.out, else named after the config file)
REPORT = mars_workflow.report_dir(config, workflow.overwrite_configfiles)


def model_datasets(model):
    return mars_workflow.model_datasets(config, model)


def gen_value(model, key):
    return mars_workflow.gen_value(config, model, key)


GENERATED = [(m, d) for m in MODELS for d in model_datasets(m)]
IMPORTED = {(i["model"], i["dataset"]): i for i in config["imports"]}
POOLS = GENERATED + list(IMPORTED)  # mars.workflow.check_values: no pair is both


def setting_params(setting):
    return mars_workflow.setting_params(config, setting)


methods_spec = mars_workflow.methods_spec


wildcard_constraints:
    model=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    setting=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    shard=r"\d+",


# ---------------------------------------------------------------------------------------------
# paths


def shard_manifest(model, dataset, shard):
    """A finished shard is marked by its pool.json (written last by `mars generate`)."""
    return f"results/traces/{model}/{dataset}/shard{shard}/pool.json"


def probed_manifest(model, dataset, shard):
    """A probed shard, marked by its pool.json (written last by `mars probe`)."""
    return f"results/probes/{model}/{dataset}/shard{shard}/pool.json"


def pool_dir(model, dataset):
    """The pool of a model x dataset: consolidated, imported, or a user's pool directory."""
    imp = IMPORTED.get((model, dataset))
    if imp is not None:
        if imp["format"] == "pool":
            return imp["path"]
        return f"results/imported/{model}/{dataset}"
    return f"results/pools/{model}/{dataset}"


def pool_path(wildcards):
    return pool_dir(wildcards.model, wildcards.dataset)


def dataset_source(wildcards):
    """A dataset's problems as configured: a bundled set name or a jsonl path."""
    return DATASETS[wildcards.dataset]


def questions_source(wildcards):
    """The problems file a dataset is read from (nothing for a bundled set)."""
    source = DATASETS[wildcards.dataset]
    return [] if source in BUNDLED_PROBLEMS else [source]


def shard_inputs(wildcards):
    """The probed shards of a model x dataset (consolidate reruns when probing does)."""
    n = gen_value(wildcards.model, "shards")
    return [probed_manifest(wildcards.model, wildcards.dataset, s) for s in range(n)]


def shard_dirs(wildcards, input):
    return " ".join(shlex.quote(str(Path(f).parent)) for f in input)


def import_source(wildcards):
    return IMPORTED[(wildcards.model, wildcards.dataset)]["path"]


def import_format(wildcards):
    return IMPORTED[(wildcards.model, wildcards.dataset)]["format"]


def import_args(wildcards):
    return mars_workflow.import_args(IMPORTED[(wildcards.model, wildcards.dataset)])


def calibration_path(model, dataset):
    """A pool's calibration (rule calibrate), read by its calibrated settings' simulations."""
    return f"results/calibrate/{model}/{dataset}.json"


def calibration_inputs(wildcards):
    """The pools a pool's calibration is fitted on: the same model's pools of the other datasets
    (out of sample), the pool itself when the model has no other
    (mars.workflow.calibration_pools)."""
    pairs = mars_workflow.calibration_pools(config, wildcards.model, wildcards.dataset)
    return [pool_dir(m, d) for m, d in pairs]


def calibration_fits(wildcards):
    """The fits of those pools (bootstrap protocol): `mars calibrate --fit` reads their arrays
    instead of grouping the same answers again."""
    if mars_workflow.calibration_protocol(config) != "bootstrap":
        return []
    pairs = mars_workflow.calibration_pools(config, wildcards.model, wildcards.dataset)
    return [f"results/fit/{m}/{d}" for m, d in pairs]


def simulate_calibration(wildcards):
    """The calibration a setting's simulation reads: its pool's, for a calibrated setting."""
    if mars_workflow.calibrated(config, wildcards.setting):
        return calibration_path(wildcards.model, wildcards.dataset)
    return []


def simulate_input_args(wildcards, input):
    """`mars simulate` options naming its inputs beside the pool: the fit, the calibration."""
    args = [f"--fit {input.fit}" if input.fit else ""]
    args.append(f"--calibration {input.calibration}" if input.calibration else "")
    return " ".join(a for a in args if a)


def simulate_fit(wildcards):
    """The fit a setting's simulation reads: none under a protocol that builds its own arrays."""
    if mars_workflow.uses_fit(config, wildcards.setting):
        return f"results/fit/{wildcards.model}/{wildcards.dataset}"
    return []


# ---------------------------------------------------------------------------------------------
# command-line options (only what changes a stage's result goes into `params`)


def _flags(options):
    out = []
    for key, value in options.items():
        flag = f"--{key.replace('_', '-')}"
        if value is True:
            out.append(flag)
        elif value is not False:
            out.append(f"{flag} {shlex.quote(str(value))}")
    return out


engine_flags = mars_engine_options.flags


def generation_flags(model, *keys):
    """Flags of the generation keys (mars/engines/options.py): the model's value, else the
    generation section's."""
    return engine_flags({k: gen_value(model, k) for k in keys}, "generation")


def generate_args(wildcards):
    """`mars generate` options of one model x dataset (the shard index comes from the path)."""
    m = wildcards.model
    spec = MODELS[m]
    # the declared engine options a model sets (mars/engines/options.py): its own keys (skill,
    # max_tokens), its sampling and engine maps; in the order the rule has always passed them
    own = lambda key: engine_flags({key: spec.get(key)}, "model")
    args = [f"--backend {spec['backend']}"]
    if spec["backend"] == "synthetic":
        args += [f"--preset {shlex.quote(spec['preset'])}", *own("skill")]
    elif spec.get("model") is not None:  # a server's only model may go unnamed
        args.append(f"--model {shlex.quote(spec['model'])}")
    args += [
        *generation_flags(m, "traces", "shards", "seed"),
        "--probe none",  # probing is its own stage (rule probe)
        *own("max_tokens"),
    ]
    if GEN["questions"]:
        args.append(f"--questions {shlex.quote(GEN['questions'])}")
    args += generation_flags(m, "confs")
    args += engine_flags(spec.get("sampling", {}), "sampling")
    args += engine_flags(spec.get("engine", {}), "engine")
    return " ".join(args)


def probe_args(wildcards):
    """`mars probe` options: the grid, and the probe engine, model, suffix and sampling (default:
    the generator's model with the reference prober's suffix and sampling)."""
    # the declared probe options (mars/engines/options.py: spacing, suffix, max_new_tokens) and
    # sampling, in the order the rule has always passed them
    own = lambda key: engine_flags({key: PROBE.get(key)}, "probe")
    args = own("spacing")
    if PROBE.get("backend") is not None:
        args.append(f"--backend {PROBE['backend']}")
    if PROBE.get("model") is not None:
        args.append(f"--probe-model {shlex.quote(PROBE['model'])}")
    args += own("suffix") + own("max_new_tokens")
    return " ".join(args + engine_flags(PROBE.get("sampling", {}), "sampling"))


class Unrecorded:
    """A param that reaches the command but not Snakemake's rerun check (which records only
    params of built-in types)."""

    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"Unrecorded({self.text!r})"


def with_server(stage, args):
    """A rule's options and, after them, those of the server its job talks to (`--base-url`,
    `--concurrency`, `--timeout`), unrecorded: where a server runs and how hard to push it do not
    change the traces, so a server started again on another node and port reruns nothing. The
    options without them are the rule's `provenance` param, which Snakemake records."""

    def command(wildcards):
        server = mars_workflow.server_of(config, wildcards.model, stage)
        flags = mars_workflow.server_flags(server)
        return Unrecorded(" ".join(a for a in (args(wildcards), flags) if a))

    return command


def simulate_methods(wildcards):
    return methods_spec(setting_params(wildcards.setting)["methods"])


def fit_warmups():
    """Every warmup size the settings simulate with: the fit job fits a switch model for each."""
    settings = set(SETTINGS) | set(mars_workflow.tradeoff_settings(config))
    return sorted({setting_params(s)["warmup"] for s in settings})


def finals_arg():
    """`--finals` where the config asks for other final answers than the traces' own: the fit
    and every simulation vote on the same ones, and the default's commands name none."""
    finals = config["fit"].get("finals", MARS_SPECS["finals"].default)
    return "" if finals == MARS_SPECS["finals"].default else f"--finals {finals}"


def fit_args(wildcards):
    """`mars fit` options of a pool: the window, the final answers, the warmup sizes (the grid is
    the one the pool records)."""
    warmups = ",".join(map(str, fit_warmups()))
    args = [
        f"--window {config['fit']['window']}",
        finals_arg(),
        f"--warmup {warmups}",
    ]
    return " ".join(a for a in args if a)


def calibrate_args(wildcards):
    """`mars calibrate` options: the calibrated settings' protocol (the answer groups the
    calibration reads) and the final answers, where they are not the defaults."""
    default = MARS_SPECS["protocol"].default
    protocol = mars_workflow.calibration_protocol(config) or default
    args = ["" if protocol == default else f"--protocol {protocol}", finals_arg()]
    return " ".join(a for a in args if a)


def simulate_args(wildcards):
    """`mars simulate` options of one setting: the defaults overridden by the setting (the grid
    is the one the pool records)."""
    p = setting_params(wildcards.setting)
    opts = {k: p[k] for k in SIM_KEYS if p.get(k) is not None}
    args = _flags(opts) + [
        f"--window {config['fit']['window']}",
        finals_arg(),
    ]
    return " ".join(a for a in args if a)


# ---------------------------------------------------------------------------------------------
# resources of generate and probe jobs (what their engine needs: real engines a GPU, a job that
# talks to a server none; mars.workflow.job_resource)


def job_resource(stage, key):
    def resource(wildcards):
        return mars_workflow.job_resource(config, wildcards.model, stage, key)

    return resource


# ---------------------------------------------------------------------------------------------
# targets


def all_questions():
    return sorted({f"results/questions/{d}.jsonl" for _, d in GENERATED})


def all_traces():
    return [
        shard_manifest(m, d, s)
        for m, d in GENERATED
        for s in range(gen_value(m, "shards"))
    ]


def all_probes():
    return [
        probed_manifest(m, d, s)
        for m, d in GENERATED
        for s in range(gen_value(m, "shards"))
    ]


def all_pools():
    return [f"results/pools/{m}/{d}" for m, d in GENERATED] + [
        f"results/imported/{m}/{d}"
        for (m, d), i in IMPORTED.items()
        if i["format"] != "pool"
    ]


def all_fits():
    """The fits the settings read (none when every setting runs a protocol of its own)."""
    if not any(mars_workflow.uses_fit(config, s) for s in SETTINGS):
        return []
    return [f"results/fit/{m}/{d}" for m, d in POOLS]


def all_calibrations():
    """Every pool's calibration, when a setting reads one (calibration: true)."""
    if not mars_workflow.calibrated_settings(config):
        return []
    return [calibration_path(m, d) for m, d in POOLS]


def all_simulations():
    """Every pool x setting (with the tradeoff section's settings for the pools it lists)."""
    return [
        f"results/simulate/{m}/{d}/{s}"
        for m, d in POOLS
        for s in mars_workflow.pair_settings(config, m, d)
    ]


def all_analyses():
    """The analysis of every pool's main setting (none when it runs another protocol)."""
    if not mars_workflow.analysed(config):
        return []
    return [f"results/analysis/{m}/{d}" for m, d in POOLS]


def main_simulation(wildcards):
    return f"results/simulate/{wildcards.model}/{wildcards.dataset}/{MAIN_SETTING}"


def analysis_label(wildcards):
    return f"{wildcards.model}/{wildcards.dataset}/{MAIN_SETTING}"


def analysis_args(wildcards):
    """`mars analyze` options of a pool (the example question, the q-calibration size)."""
    return mars_workflow.example_args(config, wildcards.model, wildcards.dataset)


def report_labels(wildcards):
    """`mars report` labels (model/dataset/setting) of the simulations, in input order."""
    return " ".join(
        f"--label {p.removeprefix('results/simulate/')}" for p in all_simulations()
    )


def report_analyses(wildcards, input):
    return " ".join(f"--analysis {shlex.quote(a)}" for a in input.analyses)


def report_slug():
    """The report folder as a file name (logs and benchmarks of its job)."""
    name = REPORT.removeprefix("results/")
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", name)


def report_category(wildcards):
    """The HTML report's category of a file of the report folder."""
    return "Figures" if "figure" in wildcards.keys() else "Tables"


def run_config_path():
    """The configuration this run used, next to its report (shown in `snakemake --report`)."""
    return f"{REPORT}.config.yaml"


def run_config_text():
    """The configuration as the run sees it: config files, --config values, schema defaults."""
    return yaml.safe_dump(json.loads(json.dumps(config)), sort_keys=False)


def final_outputs():
    """Every pool, fit, calibration and simulation, and (report.enabled) the report: with the
    intermediates listed too, one lost while the report stands (Snakemake deletes the outputs of
    a job it interrupts, e.g. Ctrl-C during `-R simulate`) is missing for `all`, so the next
    plain run makes it, and the report, again."""
    outputs = all_pools() + all_fits() + all_calibrations() + all_simulations()
    if config["report"]["enabled"]:
        outputs += all_analyses()
        outputs += [REPORT, run_config_path()]
    return outputs
