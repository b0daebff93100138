"""tests/forked_gb.py, which the CLI suites run gb with, gives what a fresh `python -c` process gives:
the same exit code, stdout and stderr, files written with the same modes, the same refusals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import forked_gb

pytestmark = pytest.mark.slow   # real gb processes, end to end
GB = (sys.executable, "-c", "from gbcli.cli import main; main()")
CFG = {"name": "twin", "dataset": {"name": "digits", "train_size": 60, "val_size": 100},
       "model": {"kind": "gln", "hidden_units": 2}, "training": {"epochs": 2, "checkpoint_seconds": 0}}
CASES = {
    "config-show": ["config", "show", "cfg.yaml"],
    "train": ["train-gd", "cfg.yaml", "-q", "--out", "run"],
    "bad-key": ["train-gd", "cfg.yaml", "--set", "model.hiden_units=3"],
    "missing-run": ["compare", "no-such-run"],
    "no-args": [],
}


def _tree(root: Path) -> dict:
    """Every path under `root` with its type and permission bits (the contents hold times)."""
    return {str(p.relative_to(root)): p.lstat().st_mode for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("case", CASES)
def test_a_forked_gb_is_a_fresh_gb(case, tmp_path):
    env = {**os.environ, "COLUMNS": "70", "OMP_NUM_THREADS": "1", "GB_DATA_DIR": str(tmp_path / "data")}
    outcomes, trees = [], []
    for how in ("fresh", "forked"):
        work = tmp_path / how
        work.mkdir()
        (work / "cfg.yaml").write_text(yaml.safe_dump(CFG))
        if how == "fresh":
            def umask027():
                os.umask(0o027)
            p = subprocess.run([*GB, *CASES[case]], cwd=work, env=env, capture_output=True, text=True, timeout=300,
                               preexec_fn=umask027)
        else:
            p = forked_gb.run(CASES[case], work, env, timeout=300, umask=0o027)
        outcomes.append((p.returncode, p.stderr, p.stdout.replace(str(work), "WORK")))
        trees.append(_tree(work))
    fresh, forked = outcomes
    assert forked[0] == fresh[0], (fresh, forked)
    assert forked[1] == fresh[1]
    if case != "train":   # a training prints its time
        assert forked[2] == fresh[2]
    assert trees[1] == trees[0], "other files or modes (the umask)"
    if case == "train":
        assert (tmp_path / "forked" / "run" / "gd" / "model.pt").stat().st_mode & 0o777 == 0o640
