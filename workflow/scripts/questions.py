"""Write a dataset's problems (a bundled set or a jsonl file)
as results/questions/{dataset}.jsonl."""

import json
import sys

from mars.store.problems import load_problems

snakemake = globals()["snakemake"]  # injected by Snakemake's script directive

with open(snakemake.log[0], "w") as log:
    sys.stderr = log
    problems = load_problems(snakemake.params.source)
    with open(snakemake.output[0], "w", encoding="utf-8") as out:
        for p in problems:
            out.write(
                json.dumps({"question": p.question, "answer": p.answer}, ensure_ascii=False) + "\n"
            )
    print(f"{len(problems)} problems from {snakemake.params.source}", file=log)
