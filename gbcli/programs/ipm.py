"""Mehrotra predictor-corrector in dense float64 torch on the multiple-kernel dual max 1'lam s.t.
lam' Q_g lam <= 1 for every group g, lam >= 0, Q_g = Ky o (E_g E_g'): sum_g a_g Q_g is one N x R x N
product, so memory stays at three N x N arrays. Past EXACT_ABOVE V(lam) is rounded once, lam is a
double-double and Newton directions are refined by GMRES (relative margins certified to 3e-11, not 3e-7).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
import torch

from gbcli.programs.design import INSEPARABLE, Stop
from gbcli.programs.exact import ExactProduct, double_double

MAX_ITERS = 100


class Outcome(NamedTuple):
    """How the interior-point method, the active set or the polish ended (`stop` for decisions)."""

    status: str
    message: str
    lam: object
    s: np.ndarray | None
    iterations: int
    stop: Stop

TIGHTER = 1e-2          # iterate to a gap 100x below the tolerance, so the support set is resolved too
STALL = 8               # stop when the best gap has not improved for this many iterations,
STALL_MET = 3           # ... or for this many once the best gap meets the caller's tolerance
STALLED = f"no progress in the last {STALL} iterations"
STALLED_MET = f"no progress in the last {STALL_MET} iterations"   # an optimal answer's message when it stalled
TIME_LIMITED = "stopped at the time limit"   # svm.time_limit reached (the deadline of `interior_point`)
POLISHED = "polished on the active set"   # how an answer finished by `polish` begins its message
NOT_SEPARABLE = 1e-9    # relative margin below which the data counts as not separable (certified infeasible)
WARM_SHIFT = 0.1        # a warm start's distance from the boundary lam, s >= 0 (relative to the largest lam, s),
WARM_MU = 0.3           # from mu >= 0 (margin slacks, absolute), and its lam is scaled to
WARM_F = 0.8            # max_g lam'Q_g lam = WARM_F (a scan of these three on digits: ~20% fewer Newton steps)
ACTIVE = 1e-6           # polish: a multiplier above this fraction of the largest is active (a point or a group)
SLACK = 1e-3            # ... and a point whose margin is above 1 + SLACK is not
EXACT_ABOVE = 1e4       # dual x radius past which products are rounded once and lam is a double-double
GMRES_STEPS = 12        # ... and Newton directions refined by at most this many GMRES steps (`gmres`)
PATIENCE = 2            # polish: Newton steps without a smaller residual before it stops


class Kernel:
    """The products the interior-point method needs, for Q_g = Ky o (E_g E_g').

    `features` (rows y_n x_n, Ky = features features'): Q_g lam through V = E' diag(lam) features when
    N > 2 D, rounded once past EXACT_ABOVE; `fold` = (E, M) does the same for Ky o (E M E'). One-hot
    groups use E_g E_g' = (11' + Phi_g Phi_g') / C_g (Phi_g = E_g times a Hadamard-type basis): N x N x
    (R - G) products instead of N x N x R."""

    def __init__(self, ky: torch.Tensor, e: torch.Tensor | None = None, col_group: torch.Tensor | None = None,
                 features: torch.Tensor | None = None, fold: tuple[torch.Tensor, torch.Tensor] | None = None):
        self.ky, self.e, self.col_group = ky, e, col_group
        self.round_once = True   # False (a test's comparison): always the plain float64 products
        self.fold = fold if e is None else None
        self.features = features if (e is not None or self.fold is not None) and features is not None \
            and ky.shape[0] > 2 * features.shape[1] else None
        self.exact, self.scale = None, 0.0   # scale: the caller's dual x radius (the cancellation in V)
        self.phi = None
        self.count = 1 if e is None else int(col_group.max()) + 1
        if e is None:
            return
        opts = dict(dtype=ky.dtype, device=ky.device)
        self.member = torch.nn.functional.one_hot(col_group, self.count).to(**opts)   # column -> group indicator
        # Phi (N x (R - G)), its group indicator and 1 / C_g, when every group is one-hot
        sizes = self.member.sum(0)
        if bool((sizes < 2).any()) or not bool(((e == 0) | (e == 1)).all()) or \
                not bool(((e @ self.member) == 1).all()):
            return
        cols, groups = [], []
        for g in range(self.count):
            idx = torch.nonzero(col_group == g)[:, 0]
            cols.append(e[:, idx] @ _basis(len(idx)).to(**opts))
            groups += [g] * (len(idx) - 1)
        self.phi = torch.cat(cols, 1)
        self.phi_member = torch.nn.functional.one_hot(torch.tensor(groups), self.count).to(**opts)
        self.inv_size = 1.0 / sizes

    def u(self, lam: torch.Tensor) -> torch.Tensor:
        """U[:, g] = Q_g lam (N x G); a folded kernel through feature space only when 2 R D < N."""
        if self.e is None and not (self.features is not None and 2 * self.fold[0].shape[1]
                                   * self.features.shape[1] < self.ky.shape[0]):
            return (self.ky @ lam)[:, None]
        if self.features is not None:
            return self._in_features([lam])[0]
        if self.phi is not None:   # (Q_g lam) = (Ky lam + sum_j Phi_j o Ky (Phi_j o lam)) / C_g
            t = self.ky @ torch.cat([lam[:, None], self.phi * lam[:, None]], 1)
            return (t[:, :1] + (t[:, 1:] * self.phi) @ self.phi_member) * self.inv_size
        return ((self.ky @ (self.e * lam[:, None])) * self.e) @ self.member

    def products(self, lam: torch.Tensor, lam_lo: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(U, f), f_g = lam'Q_g lam, for lam + lam_lo; when `accurate` f is V's squared norms (lam'U cancels)."""
        if not self.accurate():
            u = self.u(lam)
            return u, (u * lam[:, None]).sum(0)
        return self._in_features([lam] if lam_lo is None else [lam, lam_lo])

    def _in_features(self, parts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(U, f) for lam = sum(parts) through V = E' diag(lam) features (R x D), one V per part."""
        if self.e is None:
            e, m = self.fold
            cols = [e * q[:, None] for q in parts]
        elif self.phi is not None:
            cols = [torch.cat([q[:, None], self.phi * q[:, None]], 1) for q in parts]
        else:
            cols = [self.e * q[:, None] for q in parts]
        k = cols[0].shape[1]
        if self.accurate() and self.exact is None:   # the features' slices, once
            self.exact = ExactProduct(self.features)
        a = torch.cat(cols, 1)
        p = self.exact.t(a) if self.accurate() else a.T @ self.features   # the cancelling sums, rounded once
        v = sum(p[i * k:(i + 1) * k] for i in range(len(parts)))
        if self.e is None:
            mv = m @ v
            return ((self.features @ mv.T) * e).sum(1, keepdim=True), (v * mv).sum().reshape(1)
        t = self.features @ v.T
        if self.phi is not None:
            sq = (v * v).sum(1)
            return ((t[:, :1] + (t[:, 1:] * self.phi) @ self.phi_member) * self.inv_size,
                    (sq[0] + sq[1:] @ self.phi_member) * self.inv_size)
        return (t * self.e) @ self.member, (v * v).sum(1) @ self.member

    def accurate(self) -> bool:
        """Whether Q_g products are rounded once now (feature space, past EXACT_ABOVE)."""
        return self.features is not None and self.round_once and self.scale > EXACT_ABOVE

    def _factors(self, a: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, float]:
        """(cols, w, const) with sum_g a_g Q_g = Ky o (cols diag(w) cols' + const)."""
        if self.e is None:
            return None, None, 0.0
        if self.phi is not None:
            ws = a * self.inv_size
            return self.phi, self.phi_member @ ws, float(ws.sum())
        return self.e, self.member @ a, 0.0

    def _block(self, a: torch.Tensor, factors, rows: slice, part: slice, out: torch.Tensor) -> None:
        cols, w, const = factors
        if cols is None:
            torch.mul(self.ky[rows, part], a[0], out=out)
            return
        torch.mm(cols[rows] * w[None, :], cols[part].T, out=out)
        if const:
            out.add_(const)
        out.mul_(self.ky[rows, part])

    def weighted(self, a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """out = sum_g a_g Q_g = Ky o (E diag(a) E')."""
        self._block(a, self._factors(a), slice(None), slice(None), out)
        return out

    def newton_lower(self, a: torch.Tensor, left: torch.Tensor, right: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The lower triangle of sum_g a_g Q_g + left right' into `out`, by blocks (all Cholesky reads)."""
        n = out.shape[0]
        b = 4 if n >= 1500 else 2 if n >= 600 else 1
        cuts = [i * n // b for i in range(b + 1)]
        factors = self._factors(a)
        for i in range(b):
            rows = slice(cuts[i], cuts[i + 1])
            for j in range(i + 1):
                part = slice(cuts[j], cuts[j + 1])
                blk = out[rows, part]
                self._block(a, factors, rows, part, blk)
                blk.addmm_(left[rows], right[part].T)
        return out

    def restrict(self, idx: torch.Tensor) -> "Kernel":
        pick = lambda a: None if a is None else a[idx]
        fold = None if self.fold is None else (self.fold[0][idx], self.fold[1])
        return Kernel(self.ky[idx][:, idx], pick(self.e), self.col_group, pick(self.features), fold)

    def radius(self) -> float:
        """max_{n,g} sqrt(Q_g[n, n]): the largest gated input, the scale of margins."""
        d = torch.diagonal(self.ky)
        return float(d.max().sqrt()) if self.e is None else float((d[:, None] * self.e).max().sqrt())


def _basis(c: int) -> torch.Tensor:
    """B (c x (c-1)) with [1 B] [1 B]' = c I: Sylvester Hadamard columns (exact) when c is a power of 2."""
    if c & (c - 1) == 0:
        h = torch.ones(1, 1, dtype=torch.float64)
        while h.shape[0] < c:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        return h[:, 1:]
    q, _ = torch.linalg.qr(torch.cat([torch.ones(c, 1, dtype=torch.float64), torch.eye(c, dtype=torch.float64)[:, 1:]], 1))
    return q[:, 1:] * c ** 0.5


def gmres(apply, precond, b: torch.Tensor, tol: float = 1e-14) -> tuple[torch.Tensor, int]:
    """(x, steps) with apply(x) ~ b: GMRES right-preconditioned by precond, started from precond(b)."""
    x = precond(b)
    r = b - apply(x)
    beta, scale = float(r.norm()), float(b.norm())
    if beta <= tol * scale:
        return x, 0
    basis, h = [r / beta], torch.zeros(GMRES_STEPS + 1, GMRES_STEPS, dtype=b.dtype, device=b.device)
    z, y = [], None
    for j in range(GMRES_STEPS):
        z.append(precond(basis[j]))
        v = apply(z[j])
        for _ in range(2):   # Gram-Schmidt twice: the basis stays orthogonal to rounding
            for i in range(j + 1):
                c = v @ basis[i]
                h[i, j] += c
                v = v - c * basis[i]
        h[j + 1, j] = v.norm()
        e1 = torch.zeros(j + 2, dtype=b.dtype, device=b.device)
        e1[0] = beta
        y = torch.linalg.lstsq(h[:j + 2, :j + 1], e1[:, None]).solution[:, 0]
        res = float((e1 - h[:j + 2, :j + 1] @ y).norm())
        if res <= tol * scale or float(h[j + 1, j]) <= 1e-300:
            break
        basis.append(v / h[j + 1, j])
    return x + sum(yi * zi for yi, zi in zip(y, z)), len(z)


def _add(hi: torch.Tensor, lo: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(hi + lo) + x as a renormalized double-double (Knuth's two-sum, then a fast two-sum)."""
    t = hi + x
    b = t - hi
    err = (hi - (t - b)) + (x - b)
    lo = lo + err
    new = t + lo
    return new, lo - (new - t)


def _pair(hi: torch.Tensor, lo: torch.Tensor) -> np.ndarray:
    """lam as numpy: float64 when its low half is zero, else an `exact.DoubleDouble`."""
    if not bool(lo.any()):
        return hi.cpu().numpy().copy()
    return double_double(hi.cpu().numpy(), lo.cpu().numpy())


def _step(v: torch.Tensor, dv: torch.Tensor) -> float:
    """Largest step a <= 1 keeping v + a dv >= 0."""
    neg = dv < 0
    return min(1.0, float((-v[neg] / dv[neg]).min())) if bool(neg.any()) else 1.0


def duality_gap(margins: np.ndarray, f: np.ndarray, lam: np.ndarray, s: np.ndarray, quadratic: bool) -> float:
    """The relative gap of zeta_g = s_g V_g(lam) at margin >= 1 against lam's dual bound (inf: no positive margin)."""
    f = np.clip(f, 0, None)
    primal, m_min = float((s * np.sqrt(f)).sum()), float(margins.min())
    if m_min <= 0 or primal <= 0:
        return float("inf")
    gap = 1 - float(lam.sum()) / max(float(np.sqrt(f.max())), 1e-300) * m_min / primal
    return 1 - (1 - gap) ** 2 if quadratic else gap


def polish(grp: Kernel, lam: np.ndarray, s: np.ndarray, quadratic: bool, exact, passes: int = 6, steps: int = 12):
    """Newton's method on an answer's active set S (points) and A (groups): margins of S = 1 and
    lam'Q_g lam = 1 on A, with residuals from `exact(lam, s) -> (margins, f)` (through the primal) and
    (lam, s) in long double. Returns (lam, s, gap) when lam, s >= 0 and the gap shrank, else None."""
    opts = dict(dtype=grp.ky.dtype, device=grp.ky.device)
    lo = getattr(lam, "lo", None)   # a double-double from the interior-point method: both halves
    lam, s = np.asarray(lam, dtype=np.longdouble), np.asarray(s, dtype=np.longdouble)
    if lo is not None:
        lam = lam + lo.astype(np.longdouble)

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(a, dtype=np.float64), **opts)

    margins, f = exact(lam, s)
    start_gap = duality_gap(margins, f, lam, s, quadratic)
    on = (lam > ACTIVE * lam.max()) & (margins < 1 + SLACK)
    a = np.flatnonzero(s > ACTIVE * s.max())
    best = None
    for _ in range(passes):
        idx = np.flatnonzero(on)
        sub = grp.restrict(torch.as_tensor(idx, device=grp.ky.device))
        x = np.zeros_like(lam)
        x[idx] = np.clip(lam[idx], 0, None)
        sv = np.zeros_like(s)
        sv[a] = s[a]
        mat = torch.empty(len(idx), len(idx), **opts)
        zero = torch.zeros(len(idx), 0, **opts)
        least, kept, worse = float("inf"), (x.copy(), sv.copy()), 0
        for _ in range(steps):
            margins, f = exact(x, sv)
            f1 = tensor(margins[idx] - 1)
            f2 = tensor(0.5 * (f[a] - 1))
            size = max(float(f1.abs().max()), float(f2.abs().max()))
            if size < least:
                least, kept, worse = size, (x.copy(), sv.copy()), 0
            else:   # the residuals stopped shrinking: at the rounding floor after PATIENCE steps
                worse += 1
                if worse >= PATIENCE:
                    break
            sub.newton_lower(tensor(sv), zero, zero, mat)
            chol, info = torch.linalg.cholesky_ex(mat)
            if int(info) != 0:
                break
            ua = sub.u(tensor(x[idx]))[:, torch.as_tensor(a)]
            ya = torch.cholesky_solve(ua, chol)
            schur = ua.T @ ya
            y1 = torch.cholesky_solve(f1[:, None], chol)[:, 0]
            ds = torch.linalg.solve(schur, f2 - ua.T @ y1)
            dx = -y1 - ya @ ds
            x[idx] += dx.cpu().numpy()
            sv[a] += ds.cpu().numpy()
        x, sv = kept   # the iterate with the smallest residuals
        margins, f = exact(np.clip(x, 0, None), sv)
        negative = on & (x < 0)
        low = ~on & (margins < 1 - 1e-8)   # a point outside S below the margin: it belongs in S
        if not negative.any() and not low.any() and (sv >= 0).all():
            gap = duality_gap(margins, f, x, sv, quadratic)
            if gap < start_gap:
                best = (x, sv, gap)
            break
        on = (on & ~negative) | low
    return best


def interior_point(grp: Kernel, quadratic: bool, tol: float, max_iters: int | None = None, start=None,
                   deadline: float | None = None, trace=None) -> Outcome:
    """An `Outcome`; s None when infeasible (lam the dual ray) or failed (lam the last iterate, still a
    dual bound). start: None or a warm (lam, mu, s); deadline: time.monotonic() after which no iteration
    starts (the best iterate is returned, TIME_LIMITED); trace: called with each iterate's numbers."""
    max_iters = MAX_ITERS if max_iters is None else max_iters
    n, g = grp.ky.shape[0], grp.count
    opts = dict(dtype=grp.ky.dtype, device=grp.ky.device)
    one = torch.ones(n, **opts)

    if start is None:   # start strictly inside: lam uniform with every lam'Q_g lam <= 1/4
        lam, mu, s = one, one.clone(), torch.ones(g, **opts)
    else:               # a warm start, pushed away from the boundary of lam, mu, s >= 0
        lam, mu, s = (torch.as_tensor(np.asarray(a, dtype=np.float64), **opts).clamp(min=0) for a in start)
        lam = lam + WARM_SHIFT * float(lam.max())
        mu, s = mu + WARM_MU, s + WARM_SHIFT * float(s.max())
    f0 = (grp.u(lam) * lam[:, None]).sum(0)
    scale = (0.25 if start is None else WARM_F) / max(float(f0.max()), 1e-300)
    lam = lam * scale ** 0.5
    w = 0.5 - 0.5 * scale * f0                            # lam'Q_g lam at the rescaled lam
    mat = torch.zeros(n, n, **opts)
    radius = grp.radius()
    status, message, it, stop = "failed", f"stopped after {max_iters} iterations", 0, Stop.ITERATION_LIMIT
    best = None                                           # (gap, lam, s, iteration) of the best iterate
    lam_lo = torch.zeros_like(lam)                        # lam's low half once products are rounded once
    refined = []
    a, limits = 1.0, [1.0] * 4                            # the last step's length, how far lam, mu, s, w could go
    for it in range(1, max_iters + 1):
        if deadline is not None and time.monotonic() >= deadline:
            message, stop = f"{TIME_LIMITED} after {it - 1} iterations", Stop.TIME_LIMIT
            break
        u, f = grp.products(lam, lam_lo)                  # N x G, and lam' Q_g lam
        margins = u @ s                                   # of the recovered primal zeta_g = s_g V_g
        primal = float((s * f.clamp(min=0).sqrt()).sum())  # sum_g ||zeta_g||
        dual = float(lam.sum()) / max(float(f.max().clamp(min=0).sqrt()), 1e-300)  # lam rescaled to feasible
        m_min = float(margins.min())
        if m_min > 0:
            gap = 1 - dual * m_min / primal                  # zeta rescaled to margin >= 1
            if quadratic:                                    # the objective is the squared norm
                gap = 1 - (1 - gap) ** 2
        if trace is not None:   # this iterate, and the step length that led to it (1: the first)
            trace(dict(n=n, it=it, min_margin=m_min, gap=gap if m_min > 0 else None, dual=dual,
                       step=a if it > 1 else 1.0, lam_max=float(lam.max()), s_max=float(s.max()),
                       mu_lam=float(mu @ lam) / n, s_w=float(s @ w) / g,
                       limited_by="lam mu s w".split()[int(np.argmin(limits))] if it > 1 else "",
                       gmres="+".join(map(str, refined)) if it > 1 else ""))
        if m_min > 0:
            if best is None or gap < best[0]:
                best = (gap, _pair(lam, lam_lo), s.clone(), it)
            elif it - best[3] >= (STALL_MET if best[0] <= tol else STALL):
                message, stop = (STALLED_MET, Stop.STALLED_MET) if best[0] <= tol else (STALLED, Stop.STALLED)
                break
            if gap <= tol * TIGHTER:
                message, stop = "", Stop.CONVERGED
                break
        grp.scale = max(grp.scale, dual * radius)   # V's cancellation: products rounded once above EXACT_ABOVE
        if dual * radius > 1 / (NOT_SEPARABLE * TIGHTER):   # 100x past the certificate's threshold, as for the gap
            status, stop = "infeasible", Stop.UNBOUNDED
            message = (f"{INSEPARABLE} (the dual is unbounded: any separating predictor has normalized margin "
                       f"below {NOT_SEPARABLE:g})")
            break
        # Newton matrix: sum_g s_g Q_g + U diag(s/w) U' + diag(mu/lam), one Cholesky per iteration
        rd = -1 + margins - mu
        rp = 0.5 * f - 0.5 + w
        nu = float((s @ w + mu @ lam) / (n + g))
        grp.newton_lower(s, u * (s / w)[None, :], u, mat)   # the lower triangle: all the Cholesky reads
        mat.diagonal().add_(mu / lam)
        chol, info = torch.linalg.cholesky_ex(mat)
        jitter = 1e-14 * float(mat.diagonal().max())
        while int(info) != 0 and jitter < 1e-4 * float(mat.diagonal().max()):
            mat.diagonal().add_(jitter)
            chol, info = torch.linalg.cholesky_ex(mat)
            jitter *= 100
        if int(info) != 0:
            message, stop = f"the Newton system is singular at iteration {it}", Stop.NUMERICAL
            break

        def factor_solve(rhs):   # two triangular solves: a quarter of torch.cholesky_solve's time
            half = torch.linalg.solve_triangular(chol, rhs[:, None], upper=False)
            return torch.linalg.solve_triangular(chol.T, half, upper=True)[:, 0]

        refining, refined = grp.accurate(), []   # refined: GMRES steps of this iterate's directions
        if refining:   # the Newton matrix applied with its cancelling sums rounded once
            sw, diag = s / w, mu / lam
            ut = ExactProduct(u)

            def newton(v):
                return grp.u(v) @ s + u @ (sw * ut.t(v[:, None])[0]) + diag * v

        def direction(r_s, r_mu):
            rhs = -rd + r_mu / lam - u @ ((r_s + s * rp) / w)
            if refining:
                dl, steps = gmres(newton, factor_solve, rhs)
                refined.append(steps)
            else:
                dl = factor_solve(rhs)
            dmu = (r_mu - mu * dl) / lam
            dw = -rp - (ut.t(dl[:, None])[0] if refining else u.T @ dl)
            ds = (r_s - s * dw) / w
            return dl, dmu, ds, dw

        def steps(dl, dmu, ds, dw):
            return [_step(lam, dl), _step(mu, dmu), _step(s, ds), _step(w, dw)]

        dl, dmu, ds, dw = direction(-s * w, -mu * lam)          # predictor (affine scaling)
        a = min(steps(dl, dmu, ds, dw))
        nu_aff = float(((s + a * ds) @ (w + a * dw) + (mu + a * dmu) @ (lam + a * dl)) / (n + g))
        sigma = (nu_aff / nu) ** 3
        dl, dmu, ds, dw = direction(sigma * nu - s * w - ds * dw, sigma * nu - mu * lam - dmu * dl)  # corrector
        limits = steps(dl, dmu, ds, dw)
        a = min(1.0, 0.99 * min(limits))
        # lam as a double-double once V(lam) cancels below float64's resolution of lam
        lam, lam_lo = _add(lam, lam_lo, a * dl) if grp.accurate() else (lam + a * dl, lam_lo)
        mu, s, w = mu + a * dmu, s + a * ds, w + a * dw
    if status == "infeasible":
        return Outcome(status, message, lam.cpu().numpy(), None, it, stop)
    if best is None:   # no positive margin: the last lam still bounds the optimum (weak duality)
        return Outcome(status, message, _pair(lam, lam_lo), None, it, stop)
    gap, lam, s, _ = best   # the best iterate, and `it` the iterates computed (the work done)
    if gap > tol:
        status, message = "inaccurate", f"relative gap {gap:.1e} > {tol:g}: {message}"
    else:   # met; say so when it stalled short of the tighter target (its own gap is then the least reliable)
        status, message = "optimal", (f"relative gap {gap:.1e}: {message}" if stop is Stop.STALLED_MET else "")
    return Outcome(status, message, lam, s.cpu().numpy(), it, stop)
