"""Constants of the calibration: the real data's cap, seeds, and the paper's reference numbers."""

from __future__ import annotations

#: Real traces at least this long count as cut at the cap (the longest is 41,470 tokens).
REAL_CAP = 41000


FIT_SEEDS = (0, 1, 2, 3)


EVAL_SEEDS = (2025, 2026, 2027, 2028)


REAL_TRACES = 128


#: The paper's full-budget SC accuracy (%) and SC baseline mean tokens per question (512 traces)
#: (Tables 1, 4-6). Mean tokens per trace = tokens / 512.
PAPER = {
    "deepseek-r1-0528-qwen3-8b": {
        "brumo": (93.2, 11_795_919),
        "aime": (83.3, 13_210_697),
        "hmmt": (70.0, 14_882_765),
    },
    "qwen3-32b": {"brumo": (90.9, 7_138_843), "aime": (80.1, 7_739_219), "hmmt": (62.8, 8_943_718)},
    "qwen3-next-80b-a3b-thinking": {
        "brumo": (96.7, 11_116_671),
        "aime": (86.9, 11_757_443),
        "hmmt": (86.9, 15_432_157),
    },
}


DATASET_FILES = {"aime": "aime_2025", "hmmt": "hmmt_feb_2025", "brumo": "brumo_2025"}
