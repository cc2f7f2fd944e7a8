# fit (per-question arrays and switch models) -> simulate (every method of a setting in one job)
# -> analyze (what the report draws beyond simulation summaries); calibrate (a calibration per
# pool, learned on the model's other pools) -> simulate, for the settings that read one


rule fit:
    """Fit every question of a pool: its arrays and its switch model q for each warmup size."""
    input:
        pool=pool_path,
    output:
        directory("results/fit/{model}/{dataset}"),
    log:
        "results/logs/fit/{model}/{dataset}.log",
    benchmark:
        "results/benchmarks/fit/{model}/{dataset}.tsv"
    threads: SIM["workers"]
    params:
        args=fit_args,
    shell:
        "mars fit {input.pool} --out {output} {params.args} --workers {threads}"
        " --quiet > {log} 2>&1"


rule calibrate:
    """A pool's calibration (what MARS2 reads instead of a warmup per question), learned out of
    sample: on the same model's pools of the other datasets (the pool itself when the model has
    no other; its simulations then say in sample), their arrays read from their fits. Only when
    a setting reads one (calibration: true)."""
    input:
        pools=calibration_inputs,
        fits=calibration_fits,
    output:
        "results/calibrate/{model}/{dataset}.json",
    log:
        "results/logs/calibrate/{model}/{dataset}.log",
    benchmark:
        "results/benchmarks/calibrate/{model}/{dataset}.tsv"
    params:
        args=calibrate_args,
        fits=lambda wc, input: " ".join(f"--fit {f}" for f in input.fits),
    shell:
        "mars calibrate {input.pools} --out {output} {params.args} {params.fits} > {log} 2>&1"


rule simulate:
    """Bootstrap-simulate every method of a setting on a pool (one directory per method); a
    calibrated setting reads its pool's calibration instead of a warmup."""
    input:
        pool=pool_path,
        fit=simulate_fit,
        calibration=simulate_calibration,
    output:
        directory("results/simulate/{model}/{dataset}/{setting}"),
    log:
        "results/logs/simulate/{model}/{dataset}/{setting}.log",
    benchmark:
        "results/benchmarks/simulate/{model}/{dataset}/{setting}.tsv"
    threads: SIM["workers"]
    params:
        methods=simulate_methods,
        args=simulate_args,
        # the inputs beside the pool: --fit, and --calibration for a calibrated setting (one
        # param, so that the command reads as before and no earlier simulation reruns)
        fit=simulate_input_args,
    shell:
        "mars simulate {input.pool} --method {params.methods} --out {output} {params.args}"
        " {params.fit} --workers {threads} > {log} 2>&1"


rule analyze:
    """The example and consensus-failure trajectories, the q calibration and the switch models of
    a pool's main setting: everything the report draws that is not a simulation summary.
    """
    input:
        pool=pool_path,
        fit="results/fit/{model}/{dataset}",
        simulation=main_simulation,
    output:
        directory("results/analysis/{model}/{dataset}"),
    log:
        "results/logs/analyze/{model}/{dataset}.log",
    benchmark:
        "results/benchmarks/analyze/{model}/{dataset}.tsv"
    params:
        label=analysis_label,
        args=analysis_args,
    shell:
        "mars analyze {input.pool} {input.simulation} --fit {input.fit} --label {params.label}"
        " {params.args} --out {output} --quiet > {log} 2>&1"
