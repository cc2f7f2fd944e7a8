# tables / figures (mars report) -> the HTML report (snakemake --report report.html)


rule tables_figures:
    """The paper's tables (md, tex, csv) and figures (png, pdf) from every simulation."""
    input:
        all_simulations(),
    output:
        report(
            directory("results/report"),
            patterns=["figures/{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
        ),
    log:
        "results/logs/tables_figures.log",
    benchmark:
        "results/benchmarks/tables_figures.tsv"
    params:
        labels=report_labels,
    shell:
        "mars report {input} {params.labels} --out {output} > {log} 2>&1"
