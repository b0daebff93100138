"""The quadratic programs' active-set method (issue 26: the default solve ahead of libsvm).

Its answers are checked against the interior-point method's on the same designs (every quadratic
norm the dual covers), by our certificate, and its fall-backs (a step budget it cannot meet, a
kernel of lower rank than the support set, an inseparable program) end in the interior-point
method's answer, never in an uncertified one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gbcli.programs import active_set
from gbcli.programs.certify import certificate
from gbcli.programs.ipm import interior_point
from gbcli.programs.solvers.dual import kernel_problem, solve_dual
from test_dual import crafted, digits_design

QUADRATIC = [("svm-l2", "gln", 3, 2, 150, 1), ("svm-l2", "gln", 2, 4, 300, 5), ("svm-l2", "gln", 10, 2, 700, 2),
             ("svm-shallow", "shallow", 1, 8, 150, 1), ("svm-hl", "relu", 300, 2, 120, 1),
             ("svm-gates", "relu", 300, 2, 120, 2)]


@pytest.mark.parametrize("objective,kind,units,count,train,seed", QUADRATIC)
def test_the_active_set_answer_is_the_interior_point_optimum_certified_tighter(
        objective, kind, units, count, train, seed, monkeypatch):
    design = digits_design(objective, kind, units, count, train, seed)
    fast = solve_dual(design)
    slow = solve_dual(design, use_active_set=False)
    assert fast.message.startswith("active set:") and not slow.message.startswith("active set:")
    assert fast.status == slow.status == "optimal"
    cert_fast, cert_slow = certificate(design, fast), certificate(design, slow)
    assert cert_fast["certified"] and cert_slow["certified"]
    assert cert_fast["rel_gap"] < 1e-11 < cert_slow["rel_gap"] or cert_fast["rel_gap"] < 1e-3 * cert_slow["rel_gap"]
    assert fast.value == pytest.approx(slow.value, rel=1e-8)
    # the same predictor: the validation decisions agree to the interior-point method's accuracy
    xv, ev = design.x_val, design.e_val
    from gbcli.programs.design import decision
    assert np.array_equal(np.sign(decision(fast.zeta, xv, ev)), np.sign(decision(slow.zeta, xv, ev)))
    # the KKT point: multipliers >= 0, the support's margins 1 and every other margin >= 1
    grp = kernel_problem(design)
    lam = torch.as_tensor(fast.lam)
    m = (grp.ky @ lam).numpy() * float(lam.sum())   # lam'Q lam = 1: the margins of a = lam 1'lam
    assert (fast.lam >= 0).all() and np.abs(m[fast.lam > 0] - 1).max() < 1e-9 and m.min() > 1 - 1e-9


def test_a_step_budget_it_cannot_meet_falls_back_to_the_interior_point_method(monkeypatch):
    design = digits_design("svm-l2", "gln", 3, 2, 300, 1)
    grp = kernel_problem(design)
    monkeypatch.setattr(active_set, "MAX_STEPS", 1)
    assert active_set.active_set(grp, 1e-8) is None
    sol = solve_dual(design)
    assert sol.status == "optimal" and not sol.message.startswith("active set:")
    assert certificate(design, sol)["certified"]
    monkeypatch.setattr(active_set, "MAX_STEPS", 30)
    assert active_set.active_set(grp, 1e-8) is not None


def test_a_kernel_of_lower_rank_than_the_support_falls_back():
    """A linear kernel of rank 2 on 40 points: Q_FF is singular for any guess of more than 2
    points, so the method gives up at once and the interior-point method answers."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2))
    y = np.where(x[:, 0] + 0.3 * x[:, 1] > 0, 1.0, -1.0)
    x[:, 0] += 0.5 * y                       # separable with a margin
    xy = torch.as_tensor(x * y[:, None])
    from gbcli.programs.ipm import Kernel
    grp = Kernel(xy @ xy.T)
    assert active_set.active_set(grp, 1e-8) is None
    status, _, lam, s, _, _ = interior_point(Kernel(xy @ xy.T), True, 1e-8)
    assert status == "optimal"


@pytest.mark.parametrize("norm,conflict", [("sq", False), ("l2", True)])
def test_an_inseparable_quadratic_program_is_still_certified_infeasible(norm, conflict):
    """test_dual's crafted inseparable designs of the quadratic norms: the method cannot reach a
    fixed point with margins >= 1, and the interior-point method's ray certifies infeasibility."""
    design = crafted(norm, conflict)
    assert active_set.active_set(kernel_problem(design), 1e-8) is None
    sol = solve_dual(design)
    assert sol.status == "infeasible" and certificate(design, sol)["certified"]


def test_a_working_sets_rounds_start_from_the_previous_support():
    """In a working set every round after the first starts the method from the previous round's
    support and violators (`guess`), and the answer equals the plain one."""
    design = digits_design("svm-l2", "gln", 3, 2, 600, 2)
    plain = solve_dual(design, working_set=False)
    ws = solve_dual(design, working_set=True)
    assert "active set:" in ws.message and "working set:" in ws.message
    assert ws.value == pytest.approx(plain.value, rel=1e-9)
    assert certificate(design, ws)["certified"]
