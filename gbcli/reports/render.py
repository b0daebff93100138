"""Rendering a matplotlib Figure to a PNG file (Agg, atomic write): no display needed."""

from __future__ import annotations

import io
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from gbcli.io import atomic_write_bytes


def save_png(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Render with Agg and write atomically."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)
