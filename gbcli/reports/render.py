"""Rendering a matplotlib Figure to a PNG file (Agg, atomic write): no display needed."""

from __future__ import annotations

import io
from pathlib import Path

from typing import TYPE_CHECKING

from gbcli.store.safe import atomic_write_bytes

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
