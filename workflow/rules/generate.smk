# questions -> generate -> probe -> consolidate


rule questions:
    """Pin a dataset's problems (bundled set or jsonl) as results/questions/{dataset}.jsonl."""
    input:
        questions_source,
    output:
        protected("results/questions/{dataset}.jsonl"),
    log:
        "results/logs/questions/{dataset}.log",
    benchmark:
        "results/benchmarks/questions/{dataset}.tsv"
    params:
        source=dataset_source,
    script:
        "../scripts/questions.py"


rule generate:
    """Generate one shard of a model x dataset pool (traces and their token ids; no probes).

    The shard directory is resumable: a job that dies leaves its finished questions behind and
    the next run picks up from there. Its pool.json (written last) marks it complete and is
    write-protected, so Snakemake never regenerates finished traces.
    """
    input:
        problems=ancient("results/questions/{dataset}.jsonl"),
    output:
        protected("results/traces/{model}/{dataset}/shard{shard}/pool.json"),
    log:
        "results/logs/generate/{model}/{dataset}/shard{shard}.log",
    benchmark:
        "results/benchmarks/generate/{model}/{dataset}/shard{shard}.tsv"
    retries: 1
    resources:
        gpu=job_resource("generate", "gpu"),
        gpu_model=job_resource("generate", "gpu_model"),
        mem_mb=job_resource("generate", "mem_mb"),
        runtime=job_resource("generate", "runtime"),
    params:
        out=subpath(output[0], parent=True),
        args=with_server("generate", generate_args),
        provenance=generate_args,
    shell:
        "mars generate --problems {input.problems} --out {params.out}"
        " --shard {wildcards.shard} {params.args} > {log} 2>&1"


rule probe:
    """Probe one generated shard at every checkpoint of the probe grid and at each trace's end.

    Changing the probe settings (config section `probe`) reruns this and what follows, never
    generation. The probed shard resumes like a generated one; `--replace` lets a rerun with new
    settings start the folder over.
    """
    input:
        traces="results/traces/{model}/{dataset}/shard{shard}/pool.json",
    output:
        "results/probes/{model}/{dataset}/shard{shard}/pool.json",
    log:
        "results/logs/probe/{model}/{dataset}/shard{shard}.log",
    benchmark:
        "results/benchmarks/probe/{model}/{dataset}/shard{shard}.tsv"
    retries: 1
    resources:
        gpu=job_resource("probe", "gpu"),
        gpu_model=job_resource("probe", "gpu_model"),
        mem_mb=job_resource("probe", "mem_mb"),
        runtime=job_resource("probe", "runtime"),
    params:
        traces=subpath(input.traces, parent=True),
        out=subpath(output[0], parent=True),
        args=with_server("probe", probe_args),
        provenance=probe_args,
    shell:
        "mars probe {params.traces} --out {params.out} {params.args} --replace -q > {log} 2>&1"


rule consolidate:
    """Merge the probed shards of a model x dataset into one pool directory."""
    input:
        shard_inputs,
    output:
        directory("results/pools/{model}/{dataset}"),
    log:
        "results/logs/consolidate/{model}/{dataset}.log",
    benchmark:
        "results/benchmarks/consolidate/{model}/{dataset}.tsv"
    params:
        shards=shard_dirs,
    shell:
        "mars consolidate {params.shards} --out {output} > {log} 2>&1"
