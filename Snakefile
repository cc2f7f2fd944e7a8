# MARS: every stage a cached artifact, locally and on SLURM (docs/workflow.md).
#
#   questions -> generate -> probe -> consolidate -> fit -> simulate -> analyze -> report
#                              imports (the second entry) --^
#   the pools -> calibrate -> simulate (the settings with calibration: true; the model's other
#                              datasets' pools calibrate each pool)
#
# Run `snakemake --cores N` here. Every rule calls one `mars` subcommand with explicit paths;
# the helpers computing those paths and options live in workflow/rules/common.smk, the
# configuration schema in workflow/schemas/, the profiles in profiles/.

import os
import sys

from snakemake.utils import min_version

min_version("9.19")


# The embedded default (synthetic backend, bundled problem sets, every method). A config file
# given with --configfile replaces it instead of being merged into it; --config key=value
# overrides single keys of whichever file is used.
if not workflow.overwrite_configfiles:

    configfile: os.path.join(workflow.basedir, "config", "config.yaml")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/generate.smk"
include: "workflow/rules/pools.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/report.smk"


localrules:
    all,
    all_questions,
    all_traces,
    all_probes,
    all_pools,
    all_fits,
    all_calibrations,
    all_simulations,
    all_analyses,
    questions,
    run_config,


rule all:
    """Everything: pools, fits, simulations and (report.enabled) the tables and figures."""
    default_target: True
    input:
        final_outputs(),


rule all_questions:
    """Every dataset's problems (results/questions/)."""
    input:
        all_questions(),


rule all_traces:
    """Every generated shard: generation only."""
    input:
        all_traces(),


rule all_probes:
    """Every probed shard: generation and probing."""
    input:
        all_probes(),


rule all_pools:
    """Every pool: consolidated shards and imported pools."""
    input:
        all_pools(),


rule all_fits:
    """Every pool's per-question arrays."""
    input:
        all_fits(),


rule all_calibrations:
    """Every pool's calibration (when a setting reads one), learned on the model's other pools."""
    input:
        all_calibrations(),


rule all_simulations:
    """Every model x dataset x setting simulation."""
    input:
        all_simulations(),


rule all_analyses:
    """Every pool's analysis (what the report draws beyond simulation summaries)."""
    input:
        all_analyses(),


onsuccess:
    if config["report"]["enabled"]:
        html = mars_workflow.report_html_command(
            sys.executable,
            REPORT,
            workflow.overwrite_configfiles,
            workflow.config_settings.config_args or (),
            snakefile=workflow.main_snakefile,
        )
        print(
            f"\nDone. Tables: {REPORT}/tables/, figures: {REPORT}/figures/, index: "
            f"{REPORT}/report.md, configuration: {run_config_path()}\nHTML report: {html}\n"
        )
