"""Issue 36, paper 001 appendix D at the paper's length on three seeds: the verdicts of
results/theory/paper-001.md follow from the committed tables of mnist-conv/ (seed 1) and
mnist-conv-full-seeds/ (seeds 2, 3), and fail if the rule is loosened.

Orthogonal separability at layer 7 (fc1) means every within-class inner product > 0 and every
cross-class one <= 0. A seed at 99.76% of cross pairs is not separable: "reproduced" needs 100% on
every seed. "Perhaps five or ten" significant singular values is not met by a seed with more than ten
above 5% of s1."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from gbcli.runs.sweep import expand

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "theory"
FC1 = 7


def _layer7(folder: str) -> pd.DataFrame:
    f = pd.read_csv(RESULTS / folder / "tables" / "features.csv")
    return f[f["layer"] == FC1]


def _row(label: str) -> str:
    text = (RESULTS / "paper-001.md").read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith(f"| {label} |")]
    assert len(rows) == 1, label
    return rows[0]


def test_the_committed_points_are_the_configs_seeds_at_full_length():
    _, points = expand(ROOT / "configs" / "theory" / "mnist-conv-full-seeds.yaml")
    assert sorted(p.model.init_seed for p in points) == [2, 3]
    assert {p.training.epochs for p in points} == {50} and {p.dataset.train_size for p in points} == {10665}
    s = pd.read_csv(RESULTS / "mnist-conv-full-seeds" / "tables" / "training_summary.csv")
    assert sorted(s["model.init_seed"]) == [2, 3] and set(s["steps"]) == {4200} and set(s["val_error"]) == {0.0}


def test_no_seed_is_orthogonally_separable_at_fc1_so_the_verdict_is_mixed():
    seeds = pd.concat([_layer7("mnist-conv"), _layer7("mnist-conv-full-seeds")])
    pre = seeds[seeds["activation"] == "pre"]
    across = pre[pre["pair"] == "across"]["frac_nonpos"]
    within = pre[pre["pair"] != "across"]["frac_pos"]
    assert len(across) == 3 and (within == 1.0).all()
    assert (across < 1.0).all()               # no seed reaches full separability ...
    assert (across > 0.7).all()               # ... though every seed separates most cross pairs
    row = _row("001, app. D")
    sep = row.split("Orthogonal separability at layer 7:", 1)[1]
    assert sep.lstrip().startswith("**mixed** on three seeds")
    for frac in sorted(across):
        assert f"{100 * frac:.2f}%".rstrip("0").rstrip(".") in row or f"{100 * frac:.1f}%" in row, frac


def test_five_or_ten_singular_values_is_not_reproduced_when_a_seed_has_more():
    counts = []
    for folder in ("mnist-conv", "mnist-conv-full-seeds"):
        s = pd.read_csv(RESULTS / folder / "tables" / "training_summary.csv")
        counts += [int(c) for c in s["max_numerical_rank"]]
    assert sorted(counts) == [10, 16, 22]
    row = _row("001, app. D")
    verdict = re.search(r'"perhaps five or ten": \*\*(.+?)\*\*', row)
    assert verdict is not None
    assert verdict.group(1) == ("reproduced" if max(counts) <= 10 else "mixed")
