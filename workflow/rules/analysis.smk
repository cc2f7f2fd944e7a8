# fit (per-question arrays) -> simulate (every method of a setting in one job)


rule fit:
    """Precompute the per-question arrays of a pool (answer groups, confidences)."""
    input:
        pool=pool_path,
    output:
        directory("results/fit/{model}/{dataset}"),
    log:
        "results/logs/fit/{model}/{dataset}.log",
    benchmark:
        "results/benchmarks/fit/{model}/{dataset}.tsv"
    params:
        window=config["fit"]["window"],
    shell:
        "mars fit {input.pool} --out {output} --window {params.window} --quiet > {log} 2>&1"


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
        " --cache {input.fit} --workers {threads} > {log} 2>&1"
