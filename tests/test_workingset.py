"""The certified working-set method (gbcli.programs.workingset) against the full interior-point
method, on digits designs, with the size threshold lowered so that small programs take the
working-set path and need several rounds."""

import numpy as np
import pytest

from gbcli.programs import certificate, decision, solve_dual, workingset
from test_dual import digits_design


@pytest.fixture
def small_working_sets(monkeypatch):
    monkeypatch.setattr(workingset, "WORKING_SET_ABOVE", 50)
    monkeypatch.setattr(workingset, "START", 60)
    monkeypatch.setattr(workingset, "ADD", 40)


def full_solve(design, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(workingset, "WORKING_SET_ABOVE", 10 ** 9)
        return solve_dual(design)


@pytest.mark.parametrize("objective,kind,units,count", [
    ("svm-gln", "gln", 3, 2), ("svm-l2", "gln", 3, 2), ("svm-shallow", "shallow", 1, 8), ("svm-rc", "frelu", 6, 2)])
def test_working_set_equals_the_full_dual(objective, kind, units, count, small_working_sets, monkeypatch):
    design = digits_design(objective, kind, units, count, 500, 1)
    full = full_solve(design, monkeypatch)
    ws = solve_dual(design)
    assert full.status == "optimal" and ws.status == "optimal", ws.message
    rounds = int(ws.message.split("working set: ")[1].split(" rounds")[0])
    assert rounds >= 3                                   # it really grew a working set
    assert np.count_nonzero(ws.lam) < len(design.y_train)
    cert = certificate(design, ws)                        # all N margins, the padded multipliers' bound
    assert cert["certified"] and cert["min_margin"] >= 1 - 1e-6 and 0 <= cert["rel_gap"] <= 1e-6
    assert ws.value == pytest.approx(full.value, rel=1e-6)
    agree = np.mean(np.sign(decision(ws.zeta, design.x_val, design.e_val))
                    == np.sign(decision(full.zeta, design.x_val, design.e_val)))
    assert agree >= 0.999


def test_infeasible_on_the_working_set_is_certified_for_the_whole(small_working_sets, monkeypatch):
    # svm-lc on random ReLU gates of digits: not separable (the full solver says so too)
    design = digits_design("svm-lc", "relu", 5, 2, 500, 1)
    assert full_solve(design, monkeypatch).status == "infeasible"
    sol = solve_dual(design)
    assert sol.status == "infeasible" and sol.zeta is None and "working set" in sol.message
    assert len(sol.lam) == len(design.y_train) and np.count_nonzero(sol.lam) < len(design.y_train)
    cert = certificate(design, sol)
    assert cert["certified"] and cert["relative_margin_bound"] <= 1e-9
