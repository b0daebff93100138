"""Issue 27's control configs: every point of each parses and validates, and a tiny version of the
synthetic ones runs end to end through `gb sweep` (a few steps, one point)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from gbcli.runs.sweep import expand

REPO = Path(__file__).resolve().parents[1]
GB = Path(sys.executable).parent / "gb"
CONTROLS = {  # config -> number of points
    "leaky-teacher-controls": 7,
    "leaky-mnist-pairs-long": 3,
    "alignment-constant-step": 2,
    "alignment-constant-step-gln": 2,
    "orthogonal-residual-small-init": 2,
}


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_control_config_expands_to_valid_points(name):
    _, points = expand(REPO / "configs" / "theory" / f"{name}.yaml")
    assert len(points) == CONTROLS[name]


def test_constant_step_controls_use_the_constant_rule():
    for name in ("alignment-constant-step", "alignment-constant-step-gln"):
        _, points = expand(REPO / "configs" / "theory" / f"{name}.yaml")
        assert {p.training.step_rule for p in points} == {"constant"}
        assert all("grad-alignment" in p.training.track for p in points)


@pytest.mark.parametrize("name, overrides, column", [
    ("leaky-teacher-controls",
     ["training.epochs=2", 'zip={"model.hidden_units": [40], "model.output_weight": [0.5], "training.lr": [0.1]}'],
     "outside_linear"),
    ("alignment-constant-step", ["training.epochs=3", "grid={}", 'zip={"training.lr": [0.02]}'], "grad_alignment"),
])
@pytest.mark.slow
def test_tiny_control_runs(name, overrides, column, tmp_path):
    args = [str(GB), "sweep", str(REPO / "configs" / "theory" / f"{name}.yaml"), "--out", str(tmp_path / "s"),
            "--jobs", "1", "-q"]
    for o in overrides:
        args += ["--set", o]
    subprocess.run(args, check=True, cwd=tmp_path, env=dict(os.environ), capture_output=True)
    summary = pd.read_csv(tmp_path / "s" / "tables" / "training_summary.csv")
    assert len(summary) == 1 and summary[column].notna().all()
