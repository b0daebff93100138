"""Issue 49, item 9, what the audit of its tests found unchecked: the figures' legends follow the
grid's own order, not an order that happens to agree with it.

- a sweep's curves.png lists its points as `tables/points.csv` does (the grid as the user wrote
  it, `training.momentum: [0.9, 0.0]`), not sorted by the axes' values nor by point id (the test of
  test_figures.py has a grid whose written order is also its sorted order: dropping the grid's
  order there went unnoticed);
- panels (a) and (b) list the hidden units in numeric order (10, 20, 50, 100; a text sort gives
  10, 100, 20, 50), read from the legend's artists.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from test_figures import _fake_sweep, _legends   # noqa: E402 (tests/ is on the path, as for forked_gb)

from gbcli.runs.figures import NAMES, make_figures, sweep_curves   # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_a_sweeps_curves_keep_the_grids_written_order_over_sorted_values(tmp_path):
    # the grid as written: momentum 0.9 first, seed 2 first; the ids sort in a third order
    grid = [("b2", 0.9, 2), ("d4", 0.9, 1), ("a1", 0.0, 2), ("c3", 0.0, 1)]
    _fake_sweep(tmp_path / "written", grid)
    fig, runs, label = sweep_curves(tmp_path / "written")
    (legend,) = _legends(fig)
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == ["momentum=0.9, seed=2", "momentum=0.9, seed=1", "momentum=0.0, seed=2", "momentum=0.0, seed=1"]
    assert list(runs) == [p for p, _, _ in grid]
    # each panel draws the points in that order too, momentum told by its line style
    styles = {t: h.get_linestyle() for t, h in zip(texts, legend.legend_handles)}
    assert styles[texts[0]] == styles[texts[1]] != styles[texts[2]] == styles[texts[3]]
    for ax in fig.axes:
        drawn = [line.get_label() for line in ax.get_lines() if line.get_label() in texts]
        assert drawn in ([], texts), drawn


def test_panels_a_and_b_list_the_hidden_units_in_numeric_order():
    from gbcli.reports.tables import read_tables

    errors, incons = read_tables(ROOT / "results" / "paper" / "fig2")
    units = sorted(int(h) for h in errors["hidden_units"].unique())
    assert [str(h) for h in units] != sorted(str(h) for h in units)   # a text sort would show here
    figs = make_figures(errors, incons)
    for stem in (NAMES["a"], NAMES["b"]):
        (legend,) = _legends(figs[stem])
        shown = [t.get_text() for t in legend.get_texts() if t.get_text().startswith("hidden_units=")]
        assert shown == [f"hidden_units={h}" for h in units], shown


def test_a_reader_gone_before_the_first_write_is_no_error(tmp_path):
    """Issue 49, item 10 (`gb runs --format csv | head -1` exited 1 with no message): a listing small
    enough to sit in stdout's buffer meets the closed pipe only at gb's last flush, past click's own
    handling (test_views covers a reader that goes after the first line): exit 0, nothing said."""
    import os
    import subprocess
    import sys

    (tmp_path / "runs").mkdir()
    for fmt in ("csv", "json"):
        read, write = os.pipe()
        os.close(read)   # the reader is gone before gb writes anything
        try:
            p = subprocess.run([str(Path(sys.executable).with_name("gb")), "runs", "--format", fmt], cwd=tmp_path,
                               stdout=write, stderr=subprocess.PIPE, text=True, timeout=300)
        finally:
            os.close(write)
        assert (p.returncode, p.stderr) == (0, ""), (fmt, p.returncode, p.stderr)
