"""A primal-dual interior-point method (Mehrotra predictor-corrector) for the multiple-kernel dual

    max 1'lam   s.t.   lam' Q_g lam <= 1 for every group g,   lam >= 0,   Q_g = Ky o (E_g E_g'),

on dense float64 N x N algebra in torch (GPU when available). This module is the bare algorithm:
it knows kernels and groups, not designs or norms (`gbcli.programs.solvers.dual` builds the kernel
from a design's norm and recovers the primal).

We wrote it ourselves because no library exploits the structure that makes it cheap:
sum_g a_g Q_g = Ky o (E diag(a) E') is one N x R x N product, so a Newton step costs that product
plus one Cholesky, and memory stays at three N x N arrays, never G*N*N.
"""

from __future__ import annotations

import numpy as np
import torch

MAX_ITERS = 100
TIGHTER = 1e-2          # iterate to a gap 100x below the tolerance, so the support set is resolved too
STALL = 8               # stop when the best gap has not improved for this many iterations
NOT_SEPARABLE = 1e-9    # relative margin below which the data counts as not separable (certified infeasible)
WARM_SHIFT = 0.1        # a warm start's distance from the boundary lam, s >= 0 (relative to the largest lam, s),
WARM_MU = 0.3           # from mu >= 0 (margin slacks, absolute), and its lam is scaled to
WARM_F = 0.8            # max_g lam'Q_g lam = WARM_F: ~20% fewer Newton steps over a working set's
                        # rounds on digits (a scan of these three; smaller shifts were slower than cold)


class Kernel:
    """The products the interior-point method needs, for Q_g = Ky o (E_g E_g').

    `features` (optional, group kernels only): the rows y_n x_n (N x D) with Ky = features features'.
    Then Q_g lam is computed in feature space, (Q_g lam)_n = sum_{r in g} E[n, r] <y_n x_n, V_r> with
    V = E' diag(lam) features: 2 N R D operations instead of the N^2 R of Ky (E diag(lam)), used when
    that is cheaper (N > 2 D)."""

    def __init__(self, ky: torch.Tensor, e: torch.Tensor | None = None, col_group: torch.Tensor | None = None,
                 features: torch.Tensor | None = None):
        self.ky, self.e = ky, e
        self.features = features if e is not None and features is not None and ky.shape[0] > 2 * features.shape[1] \
            else None
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
        if self.features is not None:
            v = (self.e * lam[:, None]).T @ self.features            # R x D
            return ((self.features @ v.T) * self.e) @ self.member
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


def interior_point(grp: Kernel, quadratic: bool, tol: float, max_iters: int | None = None,
                   not_separable: float = NOT_SEPARABLE, start=None):
    """Mehrotra predictor-corrector on the dual; returns (status, message, lam, s, iterations) with
    lam, s as numpy arrays (s None when infeasible, lam then being the unbounded dual ray; both None
    when failed). start: None (a cold start) or (lam, mu, s) near a solution of a nearby problem
    (the working set's previous round), shifted strictly inside."""
    max_iters = MAX_ITERS if max_iters is None else max_iters
    n, g = grp.ky.shape[0], grp.count
    opts = dict(dtype=grp.ky.dtype, device=grp.ky.device)
    one = torch.ones(n, **opts)

    if start is None:   # start strictly inside: lam uniform with every lam'Q_g lam <= 1/4
        lam = one
        mu, s = one.clone(), torch.ones(g, **opts)
    else:               # a warm start, pushed away from the boundary of lam, mu, s >= 0
        lam, mu, s = (torch.as_tensor(np.asarray(a, dtype=np.float64), **opts).clamp(min=0) for a in start)
        lam = lam + WARM_SHIFT * float(lam.max())
        mu, s = mu + WARM_MU, s + WARM_SHIFT * float(s.max())
    f0 = (grp.u(lam) * lam[:, None]).sum(0)
    lam = lam * ((0.25 if start is None else WARM_F) / max(float(f0.max()), 1e-300)) ** 0.5
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
        if dual * radius > 1 / (not_separable * TIGHTER):   # 100x past the certificate's threshold, as for the gap
            status = "infeasible"
            message = ("the training data is not separable under this program's architecture (the dual is "
                       f"unbounded: any separating predictor has normalized margin below {not_separable:g})")
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
            # two triangular solves on the factor: with one right-hand side they cost a quarter of
            # torch.cholesky_solve (9.6 ms against 39 ms at N = 2000)
            half = torch.linalg.solve_triangular(chol, rhs[:, None], upper=False)
            dl = torch.linalg.solve_triangular(chol.T, half, upper=True)[:, 0]
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
