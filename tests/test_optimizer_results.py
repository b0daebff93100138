"""results/optimizers/README.md is read from the matrices scripts/optimizer_matrix.py wrote: every
optimizer row of its tables is a row of a `matrix-*/matrix.md`, and every cell of those is the mean,
minimum and maximum over seeds of the cells in the same folder's cells.csv (a number typed into the
README, or a matrix edited by hand, fails)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

RESULTS = Path(__file__).resolve().parents[1] / "results" / "optimizers"
MATRICES = sorted(RESULTS.glob("matrix-*/matrix.md"))
ROW = re.compile(r"^\| (sgd|sign|steepest-l1|steepest-l2|mirror|adam)[^|]* \| .*\d")


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if ROW.match(line) and re.search(r"\d\.\d{3} \(", line)]


def test_every_number_of_the_readme_is_a_row_of_a_matrix():
    written = {line for m in MATRICES for line in _rows(m.read_text())}
    readme = _rows((RESULTS / "README.md").read_text())
    assert len(readme) >= 20 and MATRICES
    assert [line for line in readme if line not in written] == []


@pytest.mark.parametrize("matrix", MATRICES, ids=lambda p: p.parent.name)
def test_every_cell_of_a_matrix_is_its_seeds_mean_min_and_max(matrix):
    cells = pd.read_csv(matrix.parent / "cells.csv").dropna(subset=["program"])
    header = next(line for line in matrix.read_text().splitlines() if line.startswith("| optimizer | svm"))
    programs = [c.strip().split(" ")[0] for c in header.strip("|").split("|")[1:]]
    checked = 0
    for line in _rows(matrix.read_text()):
        label, *values = [c.strip() for c in line.strip("|").split("|")]
        for program, value in zip(programs, values):
            c = cells[(cells.label == label) & (cells.program == program)]
            m = re.fullmatch(r"\*?(-?[\d.]+) \((-?[\d.]+)-(-?[\d.]+)\) / ([\d.]+)", value)
            assert m and not c.empty, (label, program, value)
            got = [float(g) for g in m.groups()]
            want = [c.margin_ratio.mean(), c.margin_ratio.min(), c.margin_ratio.max(), c.inconsistency.mean()]
            assert got == pytest.approx(want, abs=5.1e-4), (label, program)
            assert value.startswith("*") == bool(c.predicted.any())
            checked += 1
    assert checked >= 2 * len(programs)   # at least two optimizers, every program's cell read
