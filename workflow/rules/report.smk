# tables / figures (mars report) -> the HTML report (snakemake --report <report folder>.html)


rule tables_figures:
    """The paper's tables (md, tex, csv, html) and figures (png, pdf) from every simulation,
    into this config's report folder (REPORT: report.out, else named after the config file).
    """
    input:
        all_simulations(),
    output:
        report(
            directory(REPORT),
            patterns=["figures/{figure}.png", "tables/{table}.html"],
            caption="../report/result.rst",
            category=report_category,
        ),
    log:
        f"results/logs/tables_figures/{report_slug()}.log",
    benchmark:
        f"results/benchmarks/tables_figures/{report_slug()}.tsv"
    params:
        labels=report_labels,
    shell:
        "mars report {input} {params.labels} --out {output} > {log} 2>&1"


rule run_config:
    """The configuration this run used (config files, --config values, the schema's defaults),
    shown under Configuration in `snakemake --report`."""
    output:
        report(
            run_config_path(),
            caption="../report/config.rst",
            category="Configuration",
        ),
    log:
        f"results/logs/run_config/{report_slug()}.log",
    params:
        text=run_config_text(),
    script:
        "../scripts/run_config.py"
