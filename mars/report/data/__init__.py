"""What each table and figure of the report shows, as data frames: the numbers, the rows, the
labels and what was read to make them. Nothing here draws or formats a cell, and nothing imports
matplotlib, so every number can be computed and tested on its own.

One module per concept, mirrored by :mod:`mars.report.tables` (cells) and
:mod:`mars.report.figures` (drawing): :mod:`.results` (Tables 1–5, both cost axes),
:mod:`.stopping` (every early-stopping method against the oracle stops and the probes' cost),
:mod:`.audit` (the certified rule's risk), :mod:`.switch` (what the fit learned),
:mod:`.savings` (per-question savings and their differences), :mod:`.examples` (the
single-question figures), :mod:`.comparison` (every method on accuracy against savings and
tokens), :mod:`.twoaxis` and :mod:`.tradeoff`; :mod:`.base` holds what they share.
"""
