"""Tests of the Snakemake workflow (Snakefile, workflow/, mars.workflow): DAGs, real runs, reruns,
and the same through a local SLURM cluster."""
