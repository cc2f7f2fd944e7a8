# fit (per-question arrays and switch models) -> simulate (every method of a setting in one job)


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


rule simulate:
    """Bootstrap-simulate every method of a setting on a pool (one directory per method)."""
    input:
        pool=pool_path,
        fit="results/fit/{model}/{dataset}",
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
    shell:
        "mars simulate {input.pool} --method {params.methods} --out {output} {params.args}"
        " --fit {input.fit} --workers {threads} > {log} 2>&1"
