# report: tables and figures (mars report, drawing only) -> the HTML report
# (snakemake --report <report folder>.html)


rule report:
    """The paper's tables (md, tex, csv, html) and figures (png, pdf) from every simulation and
    analysis, into this config's report folder (REPORT: report.out, else named after the config
    file). It reads only these declared inputs: no pool, no fit, no simulation of its own.
    """
    input:
        simulations=all_simulations(),
        analyses=all_analyses(),
    output:
        report(
            directory(REPORT),
            patterns=["figures/{figure}.png", "tables/{table}.html"],
            caption="../report/result.rst",
            category=report_category,
        ),
    log:
        f"results/logs/report/{report_slug()}.log",
    benchmark:
        f"results/benchmarks/report/{report_slug()}.tsv"
    params:
        labels=report_labels,
        analyses=report_analyses,
    shell:
        "mars report {input.simulations} {params.labels} {params.analyses} --out {output}"
        " > {log} 2>&1"


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
