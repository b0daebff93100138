"""The claims table of paper 000 (issue 27): the claims are data (results/paper/claims.yaml) evaluated
by gbcli.claims; `scripts/paper_summary.py --claims` runs on the committed tables, gives every claim a
verdict from the allowed set and a command, and its verdict rule follows the numbers (a changed table
flips a verdict)."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gbcli import claims

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "paper_summary.py"
TABLES = ROOT / "results" / "paper"
CLAIMS = TABLES / "claims.yaml"
VERDICTS = {"reproduced", "not reproduced", "contradicted"}


@pytest.fixture(scope="module")
def ps():
    spec = importlib.util.spec_from_file_location("paper_summary_claims", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def _rows(markdown: str) -> list[list[str]]:
    lines = [l for l in markdown.splitlines() if l.startswith("| ") and not l.startswith("| id ")]
    return [[c.strip() for c in l.strip().strip("|").split(" | ")] for l in lines if not l.startswith("|---")]


def _copy_tables(dst: Path) -> Path:
    for grid in ("fig2", "fig3", "shallow"):
        (dst / grid / "tables").mkdir(parents=True)
        for name in ("errors.csv", "inconsistency.csv"):
            shutil.copy(TABLES / grid / "tables" / name, dst / grid / "tables" / name)
    return dst


def test_claims_table_on_committed_tables(ps):
    r = _run("--claims")
    assert r.returncode == 0, r.stderr
    rows = _rows(r.stdout)
    ids = [c["id"] for c in claims.load(CLAIMS)["claims"]]
    assert len(ids) == len(set(ids)) and len(ids) >= 25
    assert [row[0] for row in rows] == ids
    for row in rows:
        assert len(row) == 8, row[0]
        assert row[5].strip("*") in VERDICTS, row
        assert row[7] == f"`python scripts/paper_summary.py --claim {row[0]}`"
        if row[5].strip("*") != "reproduced":   # every failure says what rules out our setup
            assert row[6] not in ("", "-", "none yet"), row[0]


@pytest.mark.slow
def test_one_claim_in_detail():
    r = _run("--claim", "F2b-gt10")
    assert r.returncode == 0, r.stderr
    assert "verdict: " in r.stdout and "control:" in r.stdout
    assert _run("--claim", "no-such-claim").returncode != 0


def test_verdict_rule():
    assert claims.Condition("x", -0.2, -0.3, -0.1).verdict == "reproduced"
    assert claims.Condition("x", 0.2, 0.1, 0.3).verdict == "contradicted"
    assert claims.Condition("x", 0.0, -0.1, 0.1).verdict == "not reproduced"
    assert claims.Condition("x", float("nan"), float("nan"), float("nan")).verdict == "not reproduced"
    c = claims.mean_condition("equal", np.zeros(5), equal=True)
    assert c.verdict == "reproduced"
    conds = [claims.Condition("a", -1, -2, -0.5), claims.Condition("b", 1, 0.5, 2)]
    assert claims.combine(conds) == "contradicted"
    assert claims.combine(conds[:1]) == "reproduced"


@pytest.mark.slow
def test_verdict_flips_with_a_changed_table(ps, tmp_path):
    """F2b-chance (svm-gln below 2p(1-p)) is reproduced on the committed tables; with 2p(1-p) set to 0
    in a copy of the fig2 table it must be contradicted, and the other claims are untouched."""
    before = {r["id"]: r["verdict"] for r in ps.evaluate_claims(TABLES)}
    assert before["F2b-chance"] == "reproduced"
    base = _copy_tables(tmp_path / "paper")
    path = base / "fig2" / "tables" / "inconsistency.csv"
    i = pd.read_csv(path)
    i.loc[i.predictor_a == "svm-gln", "expected_if_uncorrelated"] = 0.0
    i.to_csv(path, index=False)
    r = _run("--claims", "--tables", str(base))
    assert r.returncode == 0, r.stderr
    after = {row[0]: row[5].strip("*") for row in _rows(r.stdout)}
    assert after["F2b-chance"] == "contradicted"
    assert {k: v for k, v in after.items() if k != "F2b-chance"} == {k: v for k, v in before.items() if k != "F2b-chance"}


def test_best_configuration_claim_follows_the_errors(ps, tmp_path):
    """F2c-deep-shallow (best svm-l2 below best svm-shallow): make every svm-shallow error tiny."""
    base = _copy_tables(tmp_path / "paper")
    path = base / "shallow" / "tables" / "errors.csv"
    e = pd.read_csv(path)
    e.loc[e.predictor == "svm-shallow", "val_error"] = 0.01
    e.to_csv(path, index=False)
    after = {r["id"]: r["verdict"] for r in ps.evaluate_claims(base)}
    assert after["F2c-deep-shallow"] == "contradicted"


def test_missing_tables_refused(tmp_path):
    r = _run("--claims", "--tables", str(tmp_path))
    assert r.returncode != 0


def _quantities(spec: dict):
    """Every (claim id, quantity spec) of the claims file: conditions, controls and published numbers."""
    for c in spec["claims"]:
        for q in c["conditions"] + c.get("control_conditions", []):
            yield c["id"], q
        if isinstance(c.get("published"), dict):
            yield c["id"], c["published"]


def test_claims_file_is_data():
    """Every claim has a statement, a rule, conditions naming registered quantities and the command
    that regenerates it; every subset and table a condition names exists."""
    spec = yaml.safe_load(CLAIMS.read_text())
    assert spec == claims.load(CLAIMS)
    ids = [c["id"] for c in spec["claims"]]
    assert len(ids) == len(set(ids)) and len(ids) >= 25
    for c in spec["claims"]:
        for key in ("statement", "where", "evaluated_as", "rule", "conditions", "command"):
            assert c.get(key), (c["id"], key)
        assert c["rule"] in claims.RULES, c["id"]
        assert c["command"] == f"python scripts/paper_summary.py --claim {c['id']}"
        assert bool(c.get("control_conditions")) <= bool(c.get("control")), c["id"]   # a control is explained
    tables = set(spec["tables"]) | set(spec.get("optional_tables", {}))
    for cid, q in _quantities(spec):
        assert q["quantity"] in claims.QUANTITIES, (cid, q["quantity"])
        assert "label" in q or q["quantity"] == "published_cells", cid
        rows = [v for k, v in q.items() if k == "rows" or k.endswith("_rows")]
        for r in (x for v in rows for x in (v if isinstance(v, list) else [v])):
            r = {"subset": r} if isinstance(r, str) else r
            assert "subset" in r or "from" in r, cid
            if "subset" in r:
                assert r["subset"] in spec["subsets"], (cid, r)
            assert (r.get("from") or spec["subsets"][r["subset"]]["from"]) in tables, (cid, r)


def test_claims_module_reads_only_tables():
    """gbcli.claims depends on numpy, pandas and yaml only (no runs, training, experiments or registry)."""
    tree = ast.parse((ROOT / "gbcli" / "claims.py").read_text())
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert mods <= {"__future__", "operator", "zlib", "pathlib", "numpy", "pandas", "yaml"}, mods


def test_rows_and_per_condition():
    """The row filters (value, list, comparison, min, a subset overridden, a concatenation, a missing
    optional table) and one condition per value of a column."""
    t = pd.DataFrame({"predictor": ["a", "b"] * 4, "hidden_units": [10, 10, 20, 20, 50, 50, 100, 100],
                      "point": ["p1", "p1", "p2", "p2", "p3", "p3", "p4", "p4"], "val_error": [.1, .2, .1, .3, .2, .2, .1, .4],
                      "momentum": 0.0})
    tables, subsets = {"g/errors": t, "opt/errors": None}, {"S": {"from": "g/errors", "hidden_units": ">= 20"}}
    sel = lambda spec: claims.select(tables, subsets, spec)
    assert len(sel("S")) == 6 and len(sel({"subset": "S", "hidden_units": 10})) == 2
    assert sel({"from": "g/errors", "hidden_units": "min", "predictor": ["b"]}).val_error.tolist() == [.2]
    assert len(sel(["S", {"from": "g/errors", "hidden_units": "< 20"}])) == 8
    assert sel(["S", {"from": "opt/errors"}]) is None
    spec = {"subsets": subsets}
    conds = claims.conditions([{"quantity": "paired", "label": "H={hidden_units}", "per": "hidden_units", "rows": "S",
                                "a": "a", "b": "b"}], tables, spec)
    assert [(c.label, round(c.est, 6)) for c in conds] == [("H=20", -0.2), ("H=50", 0.0), ("H=100", -0.3)]
    assert claims.conditions([{"quantity": "paired", "label": "x", "rows": {"from": "opt/errors"}, "a": "a", "b": "b"}],
                             tables, spec) == []
