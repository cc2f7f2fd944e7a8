"""The risk audit table says its verdicts and names both runs it read."""

from __future__ import annotations

import shlex

from mars.report import collect
from mars.report.data.audit import AUDIT_COLUMNS
from mars.report.tables import table_risk

from ..trees import MODEL, MODEL2


def test_the_verdicts_are_shown(tree):
    results, out, _ = tree
    md = (out / "tables" / "table-risk-audit.md").read_text()
    assert "violated" in md and "holds" in md and "no guarantee" in md
    t = table_risk(collect([results]), "mars report")
    assert list(t.data.columns) == AUDIT_COLUMNS
    shown = [r[0].value for r in t.rows if r[0].value]
    assert shown == [MODEL, MODEL2] or shown == [MODEL2, MODEL]  # each model named once
    # the commands name the audited methods and the full-budget votes they were compared with
    read = {m for c in t.commands[1:] for m in shlex.split(c)[4].split(",")}
    assert read == set(t.data.method) | set(t.data.reference)
