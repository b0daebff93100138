"""A primal-dual interior-point method (Mehrotra predictor-corrector) for the multiple-kernel dual

    max 1'lam   s.t.   lam' Q_g lam <= 1 for every group g,   lam >= 0,   Q_g = Ky o (E_g E_g'),

on dense float64 N x N algebra in torch (GPU when available). This module is the bare algorithm:
it knows kernels and groups, not designs or norms (`gbcli.programs.solvers.dual` builds the kernel
from a design's norm and recovers the primal).

No library exploits the structure that makes it cheap: sum_g a_g Q_g = Ky o (E diag(a) E') is one
N x R x N product, so a Newton step costs that product plus one Cholesky, and memory stays at three
N x N arrays, never G*N*N.

Nearly inseparable programs (relative margins ~1e-9) take three more things once the dual's scale
passes EXACT_ABOVE, when the products are formed in feature space: V(lam) = E' diag(lam) features
rounded once (`exact.ExactProduct`), so the margins and lam'Q_g lam are right although V cancels
1e8-fold; lam kept as a double-double (hi + lo), because at the optimum V is smaller than float64's
resolution of lam's terms; and Newton directions refined by GMRES on the Newton matrix applied with
those products, preconditioned by the float64 Cholesky factor, whose smallest eigen-directions
float64 cannot resolve. On tests/test_exact.py's family the plain method certifies down to a
relative margin of ~3e-7, the products and double-doubles to ~3e-8, all three to 3e-11.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
import torch

from gbcli.programs.design import Stop
from gbcli.programs.exact import ExactProduct, double_double

MAX_ITERS = 100


class Outcome(NamedTuple):
    """What the interior-point method, the active set and the polish end with: `stop` says why, for
    the callers' decisions; `message` says it for people."""

    status: str
    message: str
    lam: object
    s: np.ndarray | None
    iterations: int
    stop: Stop

TIGHTER = 1e-2          # iterate to a gap 100x below the tolerance, so the support set is resolved too
STALL = 8               # stop when the best gap has not improved for this many iterations,
STALL_MET = 3           # ... or for this many once the best gap meets the caller's tolerance (near a
                        # rounding floor no later iterate comes back to the best)
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
EXACT_ABOVE = 1e4       # products rounded once (`Kernel.accurate`), lam a double-double, once dual x radius
                        # passes this: float64 margins then err by ~(dual radius)^2 eps > 1e-8 (tol x TIGHTER)
GMRES_STEPS = 12        # ... and Newton directions refined by at most this many GMRES steps (`gmres`)
PATIENCE = 2            # polish: Newton steps without a smaller residual before it stops (one step can
                        # overshoot and the next recover)


class Kernel:
    """The products the interior-point method needs, for Q_g = Ky o (E_g E_g').

    `features` (optional): the rows y_n x_n (N x D) with Ky = features features'. Then Q_g lam is
    computed in feature space, (Q_g lam)_n = sum_{r in g} E[n, r] <y_n x_n, V_r> with
    V = E' diag(lam) features: 2 N R D operations instead of the N^2 R of Ky (E diag(lam)), used when
    that is cheaper (N > 2 D). Once the caller's `scale` (dual x radius) passes EXACT_ABOVE, V is
    computed with one rounding (`exact.ExactProduct`), so the margins and lam'Q_g lam are exact to
    float64's precision of V instead of its terms (the Newton matrix keeps Ky's rounding: it only
    steers). Single-group kernels with folded gates, Ky o (E M E'), use the feature space through
    `fold` = (E, M): (Q lam)_n = e_n' M V y_n x_n.

    One-hot groups (every group's columns hold exactly one 1 per row, as a GLN unit's C contexts):
    E_g E_g' = (11' + Phi_g Phi_g') / C_g with Phi_g = E_g B_g, B_g the C_g x (C_g - 1) columns of a
    Hadamard-type basis (entries +-1 when C_g is a power of two: exact), so sum_g a_g Q_g =
    Ky (sum_g a_g / C_g) + Ky o (Phi diag(a) Phi') and Q_g lam share the term Ky lam: the N x N x R
    products become N x N x (R - G) (+ N^2), half of them at C = 2. Other groups use E itself."""

    def __init__(self, ky: torch.Tensor, e: torch.Tensor | None = None, col_group: torch.Tensor | None = None,
                 features: torch.Tensor | None = None, fold: tuple[torch.Tensor, torch.Tensor] | None = None,
                 round_once: bool = True):
        self.ky, self.e, self.col_group = ky, e, col_group
        self.round_once = round_once   # False: always the plain float64 products (to compare)
        self.fold = fold if e is None else None
        self.features = features if (e is not None or self.fold is not None) and features is not None \
            and ky.shape[0] > 2 * features.shape[1] else None
        self.exact, self.scale = None, 0.0   # scale: the caller's dual x radius (the cancellation in V)
        self.phi = None
        if e is None:
            self.count = 1
            return
        self.count = int(col_group.max()) + 1
        self.member = torch.zeros(e.shape[1], self.count, dtype=ky.dtype, device=ky.device)
        self.member[torch.arange(e.shape[1]), col_group] = 1.0   # column -> group indicator
        self._one_hot_basis(col_group)

    def _one_hot_basis(self, col_group: torch.Tensor) -> None:
        """Phi (N x (R - G)), its group indicator and 1 / C_g, when every group is one-hot."""
        e, opts = self.e, dict(dtype=self.ky.dtype, device=self.ky.device)
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
        self.phi_member = torch.zeros(self.phi.shape[1], self.count, **opts)
        self.phi_member[torch.arange(self.phi.shape[1]), torch.tensor(groups)] = 1.0
        self.inv_size = 1.0 / sizes

    def u(self, lam: torch.Tensor) -> torch.Tensor:
        """U[:, g] = Q_g lam (N x G). A folded single-group kernel goes through its feature space
        (2 N R D operations) only when that is cheaper than its one N^2 product (2 R D < N), and
        always for the products rounded once (`products` when accurate)."""
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
        """(U, f): U[:, g] = Q_g lam and f_g = lam'Q_g lam for lam = lam + lam_lo (a double-double
        iterate). When `accurate`, both come from V computed with one rounding, f as V's squared
        norms (lam'U would cancel as V does); otherwise the plain products, f = lam'U (lam_lo ignored)."""
        if not self.accurate():
            u = self.u(lam)
            return u, (u * lam[:, None]).sum(0)
        return self._in_features([lam] if lam_lo is None else [lam, lam_lo])

    def _in_features(self, parts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(U, f) for lam = sum(parts) through V = E' diag(lam) features (R x D), each part's V
        formed by `_combine` and then added: (Q_g lam)_n = sum_{r in g} E[n, r] <y_n x_n, V_r> and
        f_g = sum_{r in g} ||V_r||^2 (one-hot groups: in the Hadamard-type basis, [1 Phi]; folded
        gates: e_n' M V y_n x_n and <V, M V>)."""
        if self.e is None:
            e, m = self.fold
            cols = [e * q[:, None] for q in parts]
        elif self.phi is not None:
            cols = [torch.cat([q[:, None], self.phi * q[:, None]], 1) for q in parts]
        else:
            cols = [self.e * q[:, None] for q in parts]
        k = cols[0].shape[1]
        p = self._combine(torch.cat(cols, 1))
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
        """Whether Q_g products are rounded once now (feature space, and past EXACT_ABOVE)."""
        return self.features is not None and self.round_once and self.scale > EXACT_ABOVE

    def _combine(self, a: torch.Tensor) -> torch.Tensor:
        """a' features (K x D): the cancelling sums, rounded once when `accurate`."""
        if not self.accurate():
            return a.T @ self.features
        if self.exact is None:   # the features' slices, once
            self.exact = ExactProduct(self.features)
        return self.exact.t(a)

    def _factors(self, a: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, float]:
        """sum_g a_g Q_g = Ky o (cols diag(w) cols' + const): (E, member a, 0) in general,
        (Phi, a / C per Phi column, sum_g a_g / C_g) for one-hot groups; (None, None, 0) without gates."""
        if self.e is None:
            return None, None, 0.0
        if self.phi is not None:
            ws = a * self.inv_size
            return self.phi, self.phi_member @ ws, float(ws.sum())
        return self.e, self.member @ a, 0.0

    def _block(self, a: torch.Tensor, factors, rows: slice, part: slice, out: torch.Tensor) -> None:
        """The block (rows, part) of sum_g a_g Q_g into `out`."""
        cols, w, const = factors
        if cols is None:
            torch.mul(self.ky[rows, part], a[0], out=out)
            return
        torch.mm(cols[rows] * w[None, :], cols[part].T, out=out)
        if const:
            out.add_(const)
        out.mul_(self.ky[rows, part])

    def weighted(self, a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """out = sum_g a_g Q_g = Ky o (E diag(a) E'): one N x R x N product (N x (R - G) x N for
        one-hot groups)."""
        whole = slice(None)
        self._block(a, self._factors(a), whole, whole, out)
        return out

    def newton_lower(self, a: torch.Tensor, left: torch.Tensor, right: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The lower triangle (with the diagonal) of sum_g a_g Q_g + left right' in `out`, block by
        block; the upper triangle is left as it was (the Cholesky factorization reads only the lower
        triangle: 10 of 16 blocks at N >= 1500)."""
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
        """The same kernel on the points idx."""
        pick = lambda a: None if a is None else a[idx]
        fold = None if self.fold is None else (self.fold[0][idx], self.fold[1])
        return Kernel(self.ky[idx][:, idx], pick(self.e), self.col_group, pick(self.features), fold)

    def radius(self) -> float:
        """max_{n,g} sqrt(Q_g[n, n]): the largest gated input, the scale of margins."""
        d = torch.diagonal(self.ky)
        return float(d.max().sqrt()) if self.e is None else float((d[:, None] * self.e).max().sqrt())


def _basis(c: int) -> torch.Tensor:
    """B (c x (c-1)) with [1 B] [1 B]' = c I: the columns after the first of a Sylvester Hadamard
    matrix when c is a power of two (entries +-1, so products with it are exact), else of sqrt(c)
    times an orthonormal basis whose first vector is 1 / sqrt(c)."""
    if c & (c - 1) == 0:
        h = torch.ones(1, 1, dtype=torch.float64)
        while h.shape[0] < c:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        return h[:, 1:]
    q, _ = torch.linalg.qr(torch.cat([torch.ones(c, 1, dtype=torch.float64), torch.eye(c, dtype=torch.float64)[:, 1:]], 1))
    return q[:, 1:] * c ** 0.5


def gmres(apply, precond, b: torch.Tensor, tol: float = 1e-14, most: int | None = None) -> tuple[torch.Tensor, int]:
    """x with apply(x) ~ b: GMRES right-preconditioned by precond (the float64 Cholesky factor's
    solve), started from precond(b). With apply exact to rounding and precond wrong only in the few
    directions float64 cannot resolve (a nearly inseparable program's Newton matrix has eigenvalues
    below eps of its largest), the preconditioned matrix is the identity plus a low-rank error and
    GMRES needs about that rank of steps (GMRES-based iterative refinement). Returns (x, steps)."""
    most = GMRES_STEPS if most is None else most
    x = precond(b)
    r = b - apply(x)
    beta, scale = float(r.norm()), float(b.norm())
    if beta <= tol * scale:
        return x, 0
    basis, h = [r / beta], torch.zeros(most + 1, most, dtype=b.dtype, device=b.device)
    z = []
    y = None
    for j in range(most):
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
    """A double-double lam as numpy: float64 when its low half is zero, else an `exact.DoubleDouble`."""
    if not bool(lo.any()):
        return hi.cpu().numpy().copy()
    return double_double(hi.cpu().numpy(), lo.cpu().numpy())


def _step(v: torch.Tensor, dv: torch.Tensor) -> float:
    """Largest step a <= 1 keeping v + a dv >= 0."""
    neg = dv < 0
    return min(1.0, float((-v[neg] / dv[neg]).min())) if bool(neg.any()) else 1.0


def duality_gap(margins: np.ndarray, f: np.ndarray, lam: np.ndarray, s: np.ndarray, quadratic: bool) -> float:
    """The relative gap of the primal zeta_g = s_g V_g(lam), rescaled to margin >= 1, against the dual
    bound of lam, from the margins and f_g = lam' Q_g lam (inf when no margin is positive)."""
    f = np.clip(f, 0, None)
    primal, m_min = float((s * np.sqrt(f)).sum()), float(margins.min())
    if m_min <= 0 or primal <= 0:
        return float("inf")
    gap = 1 - float(lam.sum()) / max(float(np.sqrt(f.max())), 1e-300) * m_min / primal
    return 1 - (1 - gap) ** 2 if quadratic else gap


def polish(grp: Kernel, lam: np.ndarray, s: np.ndarray, quadratic: bool, exact, passes: int = 6, steps: int = 12):
    """Newton's method on the optimality conditions of the active set of an interior-point answer
    that stopped short (nearly inseparable programs stall at relative gaps of 1e-6 to 4e-6).

    On the active points S (lam_n > ACTIVE max lam and margin below 1 + SLACK) and the active
    groups A (s_g > ACTIVE max s):
        sum_g s_g (Q_g lam)_S = 1      (the margins of the active points are 1)
        lam' Q_g lam = 1, g in A       (the dual constraints of the active groups are tight)
    with lam = 0 outside S and s = 0 outside A. Each Newton step factors the |S| x |S| matrix
    sum_g s_g Q_g (the interior-point method's, without the barrier terms), with a |A| x |A| Schur
    complement for the groups, and the steps stop when the residuals stop shrinking. The residuals
    come from `exact(lam, s) -> (margins, f)`, through the primal (`solvers.dual.primal_products`):
    the kernel products' margins are sums ~1e9 times larger than the result. A point whose
    multiplier turns negative leaves S, one outside S whose margin falls below 1 joins it, and the
    conditions are solved again. The iterate (lam, s) is kept in numpy's long double (rounding lam
    to float64 alone moves those margins by ~5e-7); only the Newton matrix and its solves are
    float64.
    Returns (lam, s, gap), lam and s long double arrays (pass them on to `Norm.predictor(...,
    precise=True)` before rounding), when it ends with lam, s >= 0 and a smaller gap than the
    start's; else None (the caller keeps the interior-point answer)."""
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
    """Mehrotra predictor-corrector on the dual; an `Outcome` with lam, s as numpy arrays (s None when
    infeasible, lam then the unbounded dual ray; s None when failed, lam then the last iterate, whose
    dual bound still holds). lam is an `exact.DoubleDouble` when it was kept as one: pass it whole to
    `Norm.predictor(..., precise=True)`. start: None (cold) or (lam, mu, s) near a solution of a
    nearby problem (the working set's previous round), shifted strictly inside. deadline: a
    time.monotonic() after which no iteration starts (svm.time_limit): the answer is then the best
    iterate so far, its message saying TIME_LIMITED. trace: a callable given each iterate's numbers."""
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
    scale = (0.25 if start is None else WARM_F) / max(float(f0.max()), 1e-300)
    lam = lam * scale ** 0.5
    w = 0.5 - 0.5 * scale * f0                            # lam'Q_g lam at the rescaled lam
    mat = torch.zeros(n, n, **opts)
    radius = grp.radius()
    status, message, it, stop = "failed", f"stopped after {max_iters} iterations", 0, Stop.ITERATION_LIMIT
    best = None                                           # (gap, lam, s, iteration) of the best iterate
    lam_lo = torch.zeros_like(lam)                        # lam's low half once products are rounded once
    refined = []
    a, limits = 1.0, [1.0] * 4                            # the last step's length and what limited it (trace)
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
            message = ("the training data is not separable under this program's architecture (the dual is "
                       f"unbounded: any separating predictor has normalized margin below {NOT_SEPARABLE:g})")
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

        def factor_solve(rhs):
            # two triangular solves on the factor: with one right-hand side they cost a quarter of
            # torch.cholesky_solve (9.6 ms against 39 ms at N = 2000)
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

        def max_step(dl, dmu, ds, dw):
            return min(_step(lam, dl), _step(mu, dmu), _step(s, ds), _step(w, dw))

        dl, dmu, ds, dw = direction(-s * w, -mu * lam)          # predictor (affine scaling)
        a = max_step(dl, dmu, ds, dw)
        nu_aff = float(((s + a * ds) @ (w + a * dw) + (mu + a * dmu) @ (lam + a * dl)) / (n + g))
        sigma = (nu_aff / nu) ** 3
        dl, dmu, ds, dw = direction(sigma * nu - s * w - ds * dw, sigma * nu - mu * lam - dmu * dl)  # corrector
        a = min(1.0, 0.99 * max_step(dl, dmu, ds, dw))
        if trace is not None:   # which of lam, mu, s, w stops the step (reported with the next iterate)
            limits = [_step(lam, dl), _step(mu, dmu), _step(s, ds), _step(w, dw)]
        if grp.accurate():   # lam as a double-double: V(lam) cancels below float64's resolution of lam
            lam, lam_lo = _add(lam, lam_lo, a * dl)
        else:
            lam = lam + a * dl
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
