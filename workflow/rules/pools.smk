# The second entry: pools a user already has (published parquet, Parallel-Probe matrices, ...).


rule import_pool:
    """Convert a published MARS parquet/pickle or a Parallel-Probe matrix into a pool directory."""
    input:
        import_source,
    output:
        directory("results/imported/{model}/{dataset}"),
    log:
        "results/logs/import_pool/{model}/{dataset}.log",
    benchmark:
        "results/benchmarks/import_pool/{model}/{dataset}.tsv"
    params:
        fmt=import_format,
        args=import_args,
    shell:
        "mars import {params.fmt} {input} {output} {params.args} > {log} 2>&1"
