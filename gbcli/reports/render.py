"""Rendering a matplotlib Figure to a PNG file (Agg, atomic write): no display needed."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gbcli.fs.safe import atomic_write_bytes

if TYPE_CHECKING:   # matplotlib loads when a figure is drawn, not with every command (0.2 s of CPU)
    from matplotlib.figure import Figure


def save_png(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Render with Agg and write atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


def spans_decades(values, decades: float) -> bool:
    """Whether finite values are all positive and span more than `decades` decades (a log axis's rule)."""
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    return bool(len(v)) and v.min() > 0 and v.max() / v.min() > 10 ** decades


def readable_log_ticks(axis) -> None:
    """Ticks of a log axis a reader can take in: under three decades, plain values at 1, 2, 5 x 10^k (not
    matplotlib's '6x10^-1' that run into each other); over more, decades only; minor ticks unlabelled."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    lo, hi = sorted(axis.get_view_interval())
    if not (lo > 0 and np.isfinite(hi)):
        return
    if np.log10(hi / lo) < 3:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=8))
        axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    else:
        axis.set_major_locator(LogLocator(base=10, numticks=8))
    axis.set_minor_formatter(NullFormatter())
