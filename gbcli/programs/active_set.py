"""A primal-dual active-set method (Hintermueller, Ito and Kunisch 2003) for the quadratic programs'
dual min 1/2 a'Qa - 1'a s.t. a >= 0: a_F = Q_FF^-1 1 on the support guess F, negative multipliers
leave F, margins below 1 join, until F is fixed (relative gaps of 1e-13). Short of its fixed point it
returns None and the caller runs the interior-point method: it can cost time, never an answer.
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
    """An `ipm.Outcome` (lam'Q lam = 1), or None short of a certified fixed point; single-group kernels only.
    guess: a mask of the first support guess (default: a seeded random half); max_steps: at most MAX_STEPS."""
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
            # the first guess has more points than Q's rank (digits' constant pixels): a random half of it
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
    alpha = torch.zeros(n, **opts)   # the fixed point, an `Outcome` when its gap is within tol
    alpha[idx] = a
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
    message = f"active set: {step} steps (support guesses of {', '.join(map(str, sizes))} points)"
    return Outcome("optimal", message, lam.cpu().numpy(), s, step, Stop.CONVERGED)
