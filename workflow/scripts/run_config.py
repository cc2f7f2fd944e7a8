"""Write the configuration this run used beside its report (shown under Configuration in
`snakemake --report`). A script rather than a `run:` block: Snakemake records a run block's
runtime as a few negative milliseconds, which empties the report's runtime chart (log axis)."""

from pathlib import Path

snakemake = globals()["snakemake"]  # injected by Snakemake's script directive

Path(snakemake.output[0]).write_text(snakemake.params.text)
Path(snakemake.log[0]).write_text(f"wrote {snakemake.output[0]}\n")
