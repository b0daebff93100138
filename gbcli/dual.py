"""The dual (kernel) solver: every max-margin program except `svm-l2-reference` (protocol section 6).

Each program is written as a group-norm program, min sum_g ||zeta_g|| s.t. y_n f(x_n) >= 1, whose
dual is

    max 1'lam   s.t.   lam' Q_g lam <= 1 for every group g,   lam >= 0,
    Q_g = (yy' o K) o (E_g E_g'),

with K the N x N kernel and E_g the gate columns of group g. A quadratic norm ||w||^2 is the square
of the one-group norm ||w||, so `svm-shallow`, `svm-l2`, `svm-hl` and `svm-gates` are the case
G = 1 with the program's kernel (K o EE', K o E Mt^+ E', or the linear kernel on the features).

We solve the dual with our own primal-dual interior-point method (Mehrotra predictor-corrector)
on dense float64 N x N algebra in torch (GPU when available). No library exploits the structure
that makes this cheap: sum_g a_g Q_g = (yy' o K) o (E diag(a) E') is one N x R x N product, so a
Newton step costs that product plus one Cholesky, and memory stays at three N x N arrays, never
H*N*N. cvxpy's primal has H*C*D variables and N*H*D constraint non-zeros instead.

Primal recovery: zeta_g = s_g V_g with V = E' diag(lam o y) X and s_g the multiplier of group g's
constraint; its margins are sum_g s_g (Q_g lam)_n = 1 + (dual slack), so it is feasible at
convergence, and it is rescaled by its smallest margin when that is a hair below 1.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from .programs import (NOT_SEPARABLE, GatedDesign, Solution, combination, context_pinv, decision, norm_value,
                       reference_null_and_pinv, relative_margin_bound)

TOLERANCE = 1e-6        # default certification: relative gap and 1 - smallest margin
MAX_ITERS = 100
TIGHTER = 1e-2          # iterate to a gap 100x below the tolerance, so the support set is resolved too
STALL = 8               # stop when the best gap has not improved for this many iterations


def kernel_problem(design: GatedDesign, device: str = "cpu"):
    """(Ky, E, col_group): Ky = yy' o kernel, and the gate columns with their group index
    (E = None for the single-group quadratic programs, whose gates are folded into Ky)."""
    t = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float64, device=device)
    x, y, e = t(design.x_train), t(design.y_train), t(design.e_train)
    ky = x @ x.T
    ky.mul_(y[:, None]).mul_(y[None, :])
    if design.norm == "group":
        col_group = np.empty(design.rows, dtype=np.int64)
        for g, cols in enumerate(design.groups):
            col_group[cols] = g
        return ky, e, torch.as_tensor(col_group, device=device)
    if design.norm == "sq":
        if e.shape[1] > 1:
            ky.mul_(e @ e.T)
    elif design.norm == "l2":
        ky.mul_(e @ t(context_pinv(design.units, design.count)) @ e.T)
    else:
        raise ValueError(f"the dual solver does not cover norm {design.norm!r}")
    return ky, None, None


class _Groups:
    """The products the interior-point method needs, for Q_g = Ky o (E_g E_g')."""

    def __init__(self, ky: torch.Tensor, e: torch.Tensor | None, col_group: torch.Tensor | None):
        self.ky, self.e = ky, e
        if e is None:
            self.count = 1
        else:
            self.count = int(col_group.max()) + 1
            self.member = torch.zeros(e.shape[1], self.count, dtype=ky.dtype, device=ky.device)
            self.member[torch.arange(e.shape[1]), col_group] = 1.0   # column -> group indicator

    def u(self, lam: torch.Tensor) -> torch.Tensor:
        """U[:, g] = Q_g lam (N x G)."""
        if self.e is None:
            return (self.ky @ lam)[:, None]
        return ((self.ky @ (self.e * lam[:, None])) * self.e) @ self.member

    def weighted(self, a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """out = sum_g a_g Q_g = Ky o (E diag(a) E'): one N x R x N product."""
        if self.e is None:
            return torch.mul(self.ky, a[0], out=out)
        torch.mm(self.e * (self.member @ a)[None, :], self.e.T, out=out)
        return out.mul_(self.ky)

    def radius(self) -> float:
        """max_{n,g} sqrt(Q_g[n, n]): the largest gated input, the scale of margins."""
        d = torch.diagonal(self.ky)
        return float(d.max().sqrt()) if self.e is None else float((d[:, None] * self.e).max().sqrt())


def _step(v: torch.Tensor, dv: torch.Tensor) -> float:
    """Largest step a <= 1 keeping v + a dv >= 0."""
    neg = dv < 0
    return min(1.0, float((-v[neg] / dv[neg]).min())) if bool(neg.any()) else 1.0


def solve_dual(design: GatedDesign, tol: float | None = None, max_iters: int | None = None,
               device: str | None = None) -> Solution:
    """Solve the program through its dual; never raises on numerical trouble (see `status`)."""
    tol = tol or TOLERANCE
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if design.norm == "l2-reference":
        return solve_l2_reference(design, tol, max_iters, device)
    start = time.perf_counter()
    grp = _Groups(*kernel_problem(design, device))
    status, message, lam, s, it = interior_point(grp, design.norm != "group", tol, max_iters or MAX_ITERS)
    if status == "infeasible":
        lam = polish_ray(design, lam)
    seconds = time.perf_counter() - start
    if s is None:   # infeasible (lam is the dual ray that certifies it) or failed
        return Solution(None, status, float("nan"), seconds, "dual", message, iterations=it, lam=lam)
    return _recover(design, lam, s, status, message, seconds, it)


POLISH_MAX_FEATURES = 4000   # NNLS on a (features x N) matrix: cheap for svm-hl / svm-gates (H <= 100)


def polish_ray(design: GatedDesign, lam: np.ndarray) -> np.ndarray:
    """Sharpen an infeasibility ray: min ||sum_n lam_n y_n phi_n|| over lam >= 0, 1'lam = 1, by NNLS
    in feature space (phi_n = e_n (x) x_n). The interior-point method sees the ray through the
    quadratic form lam'Q lam, whose rounding error (eps |lam|'|Q||lam|) hides how small V(lam) is;
    computed in feature space, V of an exactly conflicting set (e.g. equal gate patterns with
    opposite labels) comes out at rounding level. Returns the better of the two rays."""
    from scipy.optimize import nnls

    n, r = design.e_train.shape
    if r * design.x_train.shape[1] > POLISH_MAX_FEATURES:
        return lam
    phi = (design.e_train[:, :, None] * design.x_train[:, None, :]).reshape(n, -1) * design.y_train[:, None]
    rho = float(np.abs(phi).max()) or 1.0
    a = np.vstack([phi.T, np.full((1, n), rho)])
    b = np.zeros(len(a))
    b[-1] = rho
    polished, _ = nnls(a, b, maxiter=50 * n)
    if not polished.any():
        return lam
    return min((lam, polished), key=lambda v: relative_margin_bound(design, v))


def interior_point(grp: _Groups, quadratic: bool, tol: float, max_iters: int):
    """Mehrotra predictor-corrector on the dual; returns (status, message, lam, s, iterations) with
    lam, s as numpy arrays (s None when infeasible, lam then being the unbounded dual ray; both None
    when failed)."""
    n, g = grp.ky.shape[0], grp.count
    opts = dict(dtype=grp.ky.dtype, device=grp.ky.device)
    one = torch.ones(n, **opts)

    # Start strictly inside: lam uniform with every lam'Q_g lam <= 1/4.
    f0 = (grp.u(one) * one[:, None]).sum(0)
    lam = one * (0.25 / max(float(f0.max()), 1e-300)) ** 0.5
    mu, s = one.clone(), torch.ones(g, **opts)
    w = 0.5 - 0.5 * (grp.u(lam) * lam[:, None]).sum(0)
    mat = torch.empty(n, n, **opts)
    radius = grp.radius()
    status, message, it = "failed", f"stopped after {max_iters} iterations", 0
    best = None                                           # (gap, lam, s, iteration) of the best iterate
    for it in range(1, max_iters + 1):
        u = grp.u(lam)                                   # N x G
        f = (u * lam[:, None]).sum(0)                     # lam' Q_g lam
        margins = u @ s                                   # of the recovered primal zeta_g = s_g V_g
        primal = float((s * f.clamp(min=0).sqrt()).sum())  # sum_g ||zeta_g||
        dual = float(lam.sum()) / max(float(f.max().clamp(min=0).sqrt()), 1e-300)  # lam rescaled to feasible
        m_min = float(margins.min())
        if m_min > 0:
            gap = 1 - dual * m_min / primal                  # zeta rescaled to margin >= 1
            if quadratic:                                    # the objective is the squared norm
                gap = 1 - (1 - gap) ** 2
            if best is None or gap < best[0]:
                best = (gap, lam.clone(), s.clone(), it)
            elif it - best[3] >= STALL:
                message = f"no progress in the last {STALL} iterations"
                break
            if gap <= tol * TIGHTER:
                break
        if dual * radius > 1 / (NOT_SEPARABLE * TIGHTER):   # 100x past the certificate's threshold, as for the gap
            status = "infeasible"
            message = ("the training data is not separable under this program's architecture (the dual is "
                       f"unbounded: any separating predictor has normalized margin below {NOT_SEPARABLE:g})")
            break
        # Newton matrix: sum_g s_g Q_g + U diag(s/w) U' + diag(mu/lam), one Cholesky per iteration
        rd = -1 + margins - mu
        rp = 0.5 * f - 0.5 + w
        nu = float((s @ w + mu @ lam) / (n + g))
        grp.weighted(s, mat)
        mat.addmm_(u * (s / w)[None, :], u.T)
        mat.diagonal().add_(mu / lam)
        chol, info = torch.linalg.cholesky_ex(mat)
        jitter = 1e-14 * float(mat.diagonal().max())
        while int(info) != 0 and jitter < 1e-4 * float(mat.diagonal().max()):
            mat.diagonal().add_(jitter)
            chol, info = torch.linalg.cholesky_ex(mat)
            jitter *= 100
        if int(info) != 0:
            message = f"the Newton system is singular at iteration {it}"
            break

        def direction(r_s, r_mu):
            rhs = -rd + r_mu / lam - u @ ((r_s + s * rp) / w)
            dl = torch.cholesky_solve(rhs[:, None], chol)[:, 0]
            dmu = (r_mu - mu * dl) / lam
            dw = -rp - u.T @ dl
            ds = (r_s - s * dw) / w
            return dl, dmu, ds, dw

        def max_step(dl, dmu, ds, dw):
            return min(_step(lam, dl), _step(mu, dmu), _step(s, ds), _step(w, dw))

        dl, dmu, ds, dw = direction(-s * w, -mu * lam)          # predictor (affine scaling)
        a = max_step(dl, dmu, ds, dw)
        nu_aff = float(((s + a * ds) @ (w + a * dw) + (mu + a * dmu) @ (lam + a * dl)) / (n + g))
        sigma = (nu_aff / nu) ** 3
        dl, dmu, ds, dw = direction(sigma * nu - s * w - ds * dw, sigma * nu - mu * lam - dmu * dl)  # corrector
        a = min(1.0, 0.99 * max_step(dl, dmu, ds, dw))
        lam, mu, s, w = lam + a * dl, mu + a * dmu, s + a * ds, w + a * dw
    if status == "infeasible":
        return status, message, lam.cpu().numpy(), None, it
    if best is None:
        return status, message, None, None, it
    gap, lam, s, it = best
    status, message = ("optimal", "") if gap <= tol else ("inaccurate", f"relative gap {gap:.1e} > {tol:g}: {message}")
    return status, message, lam.cpu().numpy(), s.cpu().numpy(), it


def solve_l2_reference(design: GatedDesign, tol: float, max_iters: int | None, device: str) -> Solution:
    """svm-l2-reference, exactly, through a reduction we derived for it (protocol section 5 calls
    the program degenerate; this is what the degeneracy is).

    ||A_ref zeta||^2 vanishes on zeta = B eta (B: the H-1 null directions of A_ref), and the
    predictor sees that part through c_n = B' e_n. A point with c_n != 0 can get any margin from
    the null part for free; only the points with c_n = 0 (their contexts hit each row class mod H
    exactly once) constrain the objective. When the free points' null-space features are linearly
    independent (checked: a Cholesky), the optimum is a kernel SVM on the constrained points, with
    kernel <x,x'> e'(A'A)^+ e'. The program does not determine the rest of the predictor; we take
    the minimum-norm null part that lifts each free point's margin to max(1, its margin)."""
    start = time.perf_counter()
    x, y, e = design.x_train, design.y_train, design.e_train
    null, pinv = reference_null_and_pinv(design.units, design.count)
    cn = e @ null
    free = np.abs(cn).max(1) > 1e-9
    fixed = ~free
    gram = x @ x.T
    lam = np.zeros(len(y))
    status, message, it = "optimal", "", 0
    if fixed.any():
        ky = gram[np.ix_(fixed, fixed)] * (e[fixed] @ pinv @ e[fixed].T) * np.outer(y[fixed], y[fixed])
        grp = _Groups(torch.as_tensor(ky, device=device), None, None)
        status, message, lam_f, s, it = interior_point(grp, True, tol, max_iters or MAX_ITERS)
        if s is None:
            return Solution(None, status, float("nan"), time.perf_counter() - start, "dual", message, iterations=it)
        lam[fixed] = s[0] * lam_f
    zeta = pinv @ combination(design, lam)
    if fixed.any():   # the stopping test assumed this rescaling (it may scale up as well as down)
        zeta = zeta / (decision(zeta, x[fixed], e[fixed]) * y[fixed]).min()
    if free.any():
        m = decision(zeta, x, e) * y
        w = gram[np.ix_(free, free)] * (cn[free] @ cn[free].T) * np.outer(y[free], y[free])
        chol, info = torch.linalg.cholesky_ex(torch.as_tensor(w))
        if int(info) != 0:   # rare on images (D large); then the general program, in primal form
            from .programs import solve_primal

            sol = solve_primal(design, "clarabel")
            sol.message = ("the free points' null-space features are dependent, so the reduction does not "
                           "apply: solved in primal form with Clarabel" + (f"; {sol.message}" if sol.message else ""))
            return sol
        t = torch.as_tensor(np.maximum(1 - m[free], 0))[:, None]
        beta = torch.cholesky_solve(t, chol)[:, 0].numpy()
        zeta = zeta + null @ ((cn[free] * (beta * y[free])[:, None]).T @ x[free])
    m = decision(zeta, x, e) * y
    if 0 < m.min() < 1:
        zeta = zeta / m.min()
    note = (f"the objective constrains {int(fixed.sum())} of {len(y)} training points; the rest of the "
            "predictor is the minimum-norm null-space part, which the program does not determine")
    return Solution(zeta, status, norm_value(design, zeta), time.perf_counter() - start, "dual",
                    f"{message}; {note}" if message else note, iterations=it, lam=lam)


def _recover(design: GatedDesign, lam: np.ndarray, s: np.ndarray, status: str, message: str,
             seconds: float, iterations: int) -> Solution:
    """zeta from (lam, s), rescaled to margin >= 1; the objective is the program's norm."""
    v = combination(design, lam)   # (R, D)
    if design.norm == "group":
        zeta = np.zeros_like(v)
        for gi, cols in enumerate(design.groups):
            zeta[cols] = s[gi] * v[cols]
    elif design.norm == "sq":
        zeta = s[0] * v
    else:  # l2: zeta = M^+ V
        zeta = s[0] * (context_pinv(design.units, design.count) @ v)
    m = decision(zeta, design.x_train, design.e_train) * design.y_train
    if m.min() > 0:   # the stopping test assumed this rescaling (it may scale up as well as down)
        zeta = zeta / m.min()
    return Solution(zeta, status, norm_value(design, zeta), seconds, "dual", message,
                    iterations=iterations, lam=lam)
