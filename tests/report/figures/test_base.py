"""Figures are byte-stable (fixed DPI, no dates or software in the metadata) and say in the image
what data they show when it is not real."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from mars.report import collect
from mars.report.figures import fig_ablations, fig_savings
from mars.report.figures.base import FigureOut, finish


def test_figures_are_byte_stable(tree, tmp_path):
    results, out, _ = tree
    res = collect([results])  # a fresh load, as a second `mars report` would
    for f in (fig_savings(res, tmp_path), fig_ablations(res, tmp_path)):
        for p in f.files:
            assert p.read_bytes() == (out / "figures" / p.name).read_bytes(), p.name
    png = (out / "figures" / "fig1-left-savings.png").read_bytes()
    assert b"Software" not in png and b"matplotlib" not in png.lower()
    pdf = (out / "figures" / "fig1-left-savings.pdf").read_bytes()
    assert b"CreationDate" not in pdf


def test_finish_writes_every_format_and_the_numbers(tmp_path):
    fo = FigureOut("toy", "Toy", "A toy.", data=pd.DataFrame({"x": [1.5, 2.0]}))
    fo.footer = "Synthetic data"
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    finish(fo, fig, tmp_path, ("png", "pdf"))
    assert [p.name for p in fo.files] == ["toy.png", "toy.pdf", "toy.csv"]
    assert (tmp_path / "toy.csv").read_text() == "x\n1.5\n2.0\n"
    assert any(t.get_text() == "Synthetic data" for t in fig.texts)  # the footer, in the image
