"""Calibration of the synthetic backend (:mod:`mars.engines.synthetic`) against real traces.

Maintainer tooling, not part of the runtime: no pipeline stage imports it. It lives in the package
(rather than a loose script) because its statistics are tested and it rewrites the bundled presets
in ``mars/data/presets`` and ``research/synthetic/results/calibration.md``::

    python -m maint_tools.synthetic --real ../shared/data/parallel-probe-qwen3-8b/aime24.json \\
        [--fit]

Modules: :mod:`.views` (traces of a question on a probe grid, from real JSON, a pool or a
backend), :mod:`.stats` (running share, agreement curves, switches, SC accuracy, stopping
statistics), :mod:`.fitting` (the preset fits), :mod:`.docs` (figures and the docs section),
:mod:`.common` (constants and the paper's reference numbers).
"""
