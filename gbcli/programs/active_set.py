"""A primal-dual active-set method for the quadratic programs' dual.

A quadratic norm has one group with its gates folded into the kernel, Q = Ky (N x N, positive
semidefinite), and its program min ||zeta||^2 s.t. y_n f(x_n) >= 1 has the dual of a hard-margin
SVM without a bias:

    min 1/2 a'Qa - 1'a   s.t.   a >= 0,

whose optimum is the a >= 0 with (Qa)_n = 1 where a_n > 0 and (Qa)_n >= 1 elsewhere. Given a guess
F of the points with a_n > 0 (the support set), one Cholesky of Q_FF gives a_F = Q_FF^-1 1 with
every margin of F exactly 1; then the points of F whose multiplier came out negative leave, the
points outside F whose margin is below 1 join, and the step repeats until F does not change. At
that fixed point a_F > 0 and every other margin is >= 1: the KKT conditions hold to the rounding
of one solve (relative gaps of 1e-13, where the interior-point method stops at 1e-8), so the
answer is certified as the interior-point method's would be, by the same gap.

This is the method of Hintermueller, Ito and Kunisch (2003) for bound-constrained QPs; for an
M-matrix it converges in finitely many steps, in general it may cycle. Whenever it does not reach
its fixed point (a cycle, a singular Q_FF, non-finite multipliers, no positive margin, a gap above
the tolerance, MAX_STEPS) it returns None and the caller runs the interior-point method, so it can
cost time but never an answer. Its measurements: docs/solvers-and-certificates.md.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from gbcli.programs.design import Stop
from gbcli.programs.ipm import TIGHTER, Kernel, Outcome, duality_gap

MAX_STEPS = 30          # active-set steps before giving up (6-8 on MNIST's svm-l2 at N = 500-2000)
START_FRACTION = 0.5    # the first guess: this fraction of the points (all of them below FULL_BELOW)
FULL_BELOW = 600        # ... where one Cholesky of all N is cheap
SEED = 0                # of the first guess
SHRINK = 4              # a first guess whose Q_FF is singular is halved at most this many times


def active_set(grp: Kernel, tol: float, deadline: float | None = None, guess: np.ndarray | None = None,
               max_steps: int | None = None):
    """(status, message, lam, s, steps) of the interior-point method's form (lam scaled so that
    lam'Q lam = 1, zeta = s V(lam)), or None when the method did not reach a certified fixed point.
    Only for single-group kernels with folded gates (grp.e is None): Q = grp.ky. guess: a boolean
    mask of the first support guess (a working set's previous round: its support and its new
    violators), else a seeded random half of the points. max_steps: svm.max_iters, at most MAX_STEPS."""
    if grp.e is not None:
        return None
    q = grp.ky
    n = q.shape[0]
    opts = dict(dtype=q.dtype, device=q.device)
    free = torch.zeros(n, dtype=torch.bool, device=q.device)
    if guess is not None and bool(np.any(guess)):
        free[torch.as_tensor(np.flatnonzero(guess), device=q.device)] = True
    elif n < FULL_BELOW:
        free[:] = True
    else:   # a seeded random guess: the support set is 40-50% of N on MNIST, and its Cholesky 8x cheaper
        pick = np.random.default_rng(SEED).choice(n, size=max(1, int(START_FRACTION * n)), replace=False)
        free[torch.as_tensor(pick, device=q.device)] = True
    seen, sizes, shrunk = set(), [], 0
    rng = np.random.default_rng(SEED + 1)
    for step in range(1, min(MAX_STEPS, max_steps or MAX_STEPS) + 1):
        if deadline is not None and time.monotonic() >= deadline:
            return None
        idx = torch.nonzero(free)[:, 0]
        qf = q.index_select(0, idx)                     # |F| x N: the margins need these rows too
        chol, info = torch.linalg.cholesky_ex(qf.index_select(1, idx))
        while int(info) != 0 and not sizes and shrunk < SHRINK and len(idx) > 1:
            # the first guess has more points than Q's rank (digits' constant pixels: rank < N):
            # a random half of it
            shrunk += 1
            idx = idx[torch.as_tensor(np.sort(rng.choice(len(idx), size=len(idx) // 2, replace=False)),
                                      device=q.device)]
            free[:] = False
            free[idx] = True
            qf = q.index_select(0, idx)
            chol, info = torch.linalg.cholesky_ex(qf.index_select(1, idx))
        if int(info) != 0:                              # Q_FF singular: a support larger than Q's rank
            return None
        a = torch.cholesky_solve(torch.ones(len(idx), 1, **opts), chol)[:, 0]
        if not bool(torch.isfinite(a).all()):
            return None
        margins = qf.T @ a                              # (Qa)_n for every n (Q symmetric)
        nxt = torch.zeros_like(free)
        nxt[idx] = a > 0
        nxt |= ~free & (margins < 1)
        sizes.append(len(idx))
        if torch.equal(nxt, free):
            break
        key = nxt.cpu().numpy().tobytes()
        if key in seen:                                 # a cycle: this method will not get there
            return None
        seen.add(key)
        free = nxt
    else:
        return None
    alpha = torch.zeros(n, **opts)
    alpha[idx] = a
    return _answer(grp, alpha, tol, step, sizes)


def _answer(grp: Kernel, alpha: torch.Tensor, tol: float, steps: int, sizes: list[int]):
    """The fixed point in the interior-point method's form, checked by its gap (None above tol)."""
    f = float(alpha @ (grp.ky @ alpha))
    if not f > 0:
        return None
    lam = alpha / f ** 0.5                                 # lam'Q lam = 1, as the interior-point method's
    s = np.array([f ** 0.5])
    grp.scale = max(grp.scale, float(lam.sum()) * grp.radius())   # V's cancellation (ipm.Kernel.accurate)
    u, fq = grp.products(lam)
    margins = (u[:, 0] * float(s[0])).cpu().numpy()
    gap = duality_gap(margins, fq.cpu().numpy(), lam.cpu().numpy(), s, True)
    if not gap <= tol * TIGHTER:
        return None
    message = f"active set: {steps} steps (support guesses of {', '.join(map(str, sizes))} points)"
    return Outcome("optimal", message, lam.cpu().numpy(), s, steps, Stop.CONVERGED)
