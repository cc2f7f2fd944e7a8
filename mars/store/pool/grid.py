"""The probe grid a pool's probes lie on, inferred from their positions (the published format
records no spacing)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...errors import first_line
from .question import PoolError

__all__ = ["MIN_INFERRED_SPACING", "grid_spacing", "positions_gcd", "probe_spacing"]

#: an inferred probe spacing below this many tokens is no grid (positions that share no spacing)
MIN_INFERRED_SPACING = 16


def probe_spacing(pf: pq.ParquetFile, source: str) -> int | None:
    """The spacing the probes of a published parquet lie on (:func:`grid_spacing` of its probes),
    read from the positions alone (a few MB at paper scale)."""
    try:
        col = pf.read(columns=["probes.list.element.position"], use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        raise PoolError(f"{source}: probe positions unreadable ({first_line(exc)})") from None
    g = 0
    for chunk in col.column("probes").chunks:
        g = positions_gcd(chunk, g)
    return grid_spacing(g)


def positions_gcd(probes: pa.Array | pa.ChunkedArray, g: int = 0) -> int:
    """The greatest common divisor of ``g`` and the positions of a ``list<struct<position>>``
    probe column, each trace's largest left out (the terminal probe at its length lies
    anywhere)."""
    for chunk in probes.chunks if isinstance(probes, pa.ChunkedArray) else [probes]:
        counts = pc.fill_null(pc.list_value_length(chunk), 0).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(chunk)
        if not len(flat):
            continue
        pos = pc.fill_null(flat.field("position"), 0).to_numpy(zero_copy_only=False)
        starts = np.cumsum(counts)[counts > 0] - counts[counts > 0]
        largest = np.repeat(np.maximum.reduceat(pos, starts), counts[counts > 0])
        pos = pos[(pos < largest) & (pos > 0)]
        if len(pos):
            g = int(np.gcd(g, np.gcd.reduce(pos)))
    return g


def grid_spacing(g: int) -> int | None:
    """The grid a pool's probes lie on, from :func:`positions_gcd`: None when no trace has two
    probes or the positions share no spacing of :data:`MIN_INFERRED_SPACING` tokens or more (then
    the grid is the default, and a probe missing from it is an error naming the trace)."""
    return g if g >= MIN_INFERRED_SPACING else None
