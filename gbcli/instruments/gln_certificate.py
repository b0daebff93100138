"""Which limit a 2-layer GLN is heading for: svm-gln's optimum, or a KKT point of min ||w||^2 / 2 s.t.
y_n f(x_n) >= 1 with a dead unit whose dual norm ||g_h(lam)|| > 1 violates svm-gln's conditions
(definitions and derivation: docs/gln-certificate.md). `certify` is the float64 numpy computation the
`convergence` instrument logs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from gbcli.programs.design import one_hot

# a unit is dead when its norm sqrt(v_h^2 + ||W_h||^2) is at most this fraction of the largest unit's
DEAD_RELATIVE_NORM = 1e-2
# the protocol's NNLS multipliers are fitted over at most this many points (those of smallest margin)
MAX_CANDIDATES = 2000

COLUMNS = ("gln_kkt_residual", "gln_stationarity_w1", "gln_stationarity_w2", "gln_complementarity",
           "gln_dual_mass", "min_unit_norm", "dead_units", "max_dead_dual_norm", "max_dead_dual_unit",
           "softmin_kkt_residual", "softmin_max_dead_dual_norm")


class Limit(StrEnum):
    """What a certificate says of the limit a run is heading for."""

    SVM_GLN = "svm-gln"                        # near a KKT point; no dead unit violates svm-gln's conditions
    DEAD_UNIT_VIOLATES = "dead-unit-violates"  # near a KKT point whose dead unit has ||g_h(lam)|| > 1
    NOT_NEAR_KKT = "not-near-kkt"              # the KKT residual is above the tolerance (or undefined)


@dataclass(frozen=True)
class Certificate:
    lam: np.ndarray            # (N,) the dual estimate (svm-gln's multiplier scaling)
    stationarity_w1: float     # ||W - v g(lam)|| / ||w||, at margin 1
    stationarity_w2: float     # ||v - <W, g(lam)>|| / ||w||
    complementarity: float     # sum lam_n (margin_n - 1) / sum |lam_n| margin_n
    dual_infeasibility: float  # sum max(-lam_n, 0) / sum |lam_n|
    unit_norms: np.ndarray     # (H,) sqrt(v_h^2 + ||W_h||^2) at margin 1
    dual_norms: np.ndarray     # (H,) ||g_h(lam)|| (Frobenius over the C x D block)
    dead: np.ndarray           # (H,) bool: unit norm <= DEAD_RELATIVE_NORM x the largest

    @property
    def kkt_residual(self) -> float:
        """Both layers' stationarity, complementary slackness and dual feasibility, in one number."""
        stationarity = math.hypot(self.stationarity_w1, self.stationarity_w2)
        return stationarity + abs(self.complementarity) + self.dual_infeasibility

    @property
    def max_dead(self) -> tuple[float, int | None]:
        """The largest ||g_h(lam)|| over the dead units and its unit (NaN, None when none is dead)."""
        if not self.dead.any():
            return float("nan"), None
        idx = np.flatnonzero(self.dead)
        h = int(idx[np.argmax(self.dual_norms[idx])])
        return float(self.dual_norms[h]), h

    def columns(self) -> dict:
        norms = self.unit_norms
        value, unit = self.max_dead
        return {"gln_kkt_residual": self.kkt_residual, "gln_stationarity_w1": self.stationarity_w1,
                "gln_stationarity_w2": self.stationarity_w2, "gln_complementarity": self.complementarity,
                "gln_dual_mass": float(self.lam.sum()),
                "min_unit_norm": float(norms.min() / norms.max()) if norms.max() > 0 else float("nan"),
                "dead_units": int(self.dead.sum()), "max_dead_dual_norm": value,
                "max_dead_dual_unit": float("nan") if unit is None else unit}

    def heading(self, tol: float = 1e-2, dual_tol: float = 1e-3) -> Limit:
        """Near a KKT point (residual <= tol): svm-gln unless a dead unit's dual norm exceeds 1 + dual_tol."""
        if not self.kkt_residual <= tol:
            return Limit.NOT_NEAR_KKT
        value, _ = self.max_dead
        return Limit.DEAD_UNIT_VIOLATES if value > 1 + dual_tol else Limit.SVM_GLN


def track_columns(w1, w2, x, y, ctx) -> dict:
    """COLUMNS: the NNLS multipliers' certificate, and the softmin estimate's residual and largest dead-unit
    dual norm; all NaN while some training margin is <= 0."""
    cert = certify(w1, w2, x, y, ctx, "nnls")
    if cert is None:
        return dict.fromkeys(COLUMNS, float("nan"))
    soft = certify(w1, w2, x, y, ctx, "softmin")
    return {**cert.columns(), "softmin_kkt_residual": soft.kkt_residual,
            "softmin_max_dead_dual_norm": soft.max_dead[0]}


def dual_blocks(lam: np.ndarray, x: np.ndarray, y: np.ndarray, ctx: np.ndarray, count: int) -> np.ndarray:
    """g_h(lam) for every unit, as (H, C, D): g_h[c] = sum over n with ctx[n, h] = c of lam_n y_n x_n."""
    return ((one_hot(ctx, count) * (lam * y)[:, None]).T @ x).reshape(ctx.shape[1], count, x.shape[1])


def softmin_dual(q: np.ndarray, big_w: np.ndarray, v: np.ndarray, x, y, ctx) -> np.ndarray:
    """The dual estimate GD itself produces: the logistic loss's weights sigmoid(-q_n) at the current margins
    (relative to the largest), times the c >= 0 minimizing the margin-1 stationarity residual (closed form)."""
    soft = np.exp(np.logaddexp(0, -q.min()) - np.logaddexp(0, -q))   # sigmoid(-q) / sigmoid(-q_min)
    g = dual_blocks(soft, x, y, ctx, big_w.shape[1])
    u1, u2 = v[:, None, None] * g, np.einsum("hcd,hcd->h", big_w, g)
    c = float((big_w * u1).sum() + v @ u2) / float((u1 ** 2).sum() + (u2 ** 2).sum())
    return max(0.0, c) * soft


def nnls_dual(margins: np.ndarray, big_w: np.ndarray, v: np.ndarray, x, y, ctx) -> np.ndarray:
    """Protocol section 7's multipliers (the `kkt` instrument's fit at margin 1) over the MAX_CANDIDATES
    points of smallest margin (the others get lam = 0: an upper bound on the all-points fit), solved in
    the Gram form (docs/gln-certificate.md): only a k x k matrix is formed."""
    units, count, _ = big_w.shape
    k = min(len(margins), MAX_CANDIDATES)
    idx = np.argsort(margins, kind="stable")[:k]
    xs, ys, cs = x[idx], y[idx], ctx[idx]
    z = np.take_along_axis(xs @ big_w.reshape(units * count, -1).T, cs + np.arange(units) * count, 1)   # z_h(n)
    onehot = one_hot(cs, count)
    same = (onehot * np.repeat(v ** 2, count)) @ onehot.T   # sum_h v_h^2 [same context of unit h]
    excess = margins[idx] - 1
    weight = 2 / math.sqrt(float((big_w ** 2).sum() + (v ** 2).sum()))
    gram = np.outer(ys, ys) * ((xs @ xs.T) * same + z @ z.T) + weight ** 2 * np.outer(excess, excess)
    target = 2 * margins[idx]                      # J w (the extra row's target is 0)
    vals, vecs = np.linalg.eigh(gram)              # gram = A'A with A = sqrt(vals) vecs'
    keep = vals > vals.max() * 1e-13
    a = np.sqrt(vals[keep])[:, None] * vecs[:, keep].T
    from scipy.optimize import nnls   # here: scipy.optimize costs 0.2 s of every `gb` start

    lam_k, _ = nnls(a, (vecs[:, keep].T @ target) / np.sqrt(vals[keep]), maxiter=50 * k)
    lam = np.zeros(len(margins))
    lam[idx] = lam_k
    return lam


def certify(w1, w2, x, y, ctx, lam="nnls") -> Certificate | None:
    """The certificate of the GLN (w1 (H*C, D), w2 (H,)) on x (N, D), y (N,) in {-1, +1}, ctx (N, H), at
    margin 1; None while some margin is <= 0. `lam`: the multipliers (an array), "nnls" or "softmin"."""
    w1, w2 = np.asarray(w1, dtype=np.float64), np.asarray(w2, dtype=np.float64).reshape(-1)
    x, y, ctx = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), np.asarray(ctx)
    units = len(w2)
    count = w1.shape[0] // units
    q = y * (np.take_along_axis(x @ w1.T, ctx + np.arange(units) * count, 1) @ w2)   # f = sum_h w2[h] z_h
    qmin = float(q.min())
    if not qmin > 0:
        return None
    scale = 1 / math.sqrt(qmin)                  # f is 2-homogeneous: margins scale by scale^2
    big_w, v = scale * w1.reshape(units, count, -1), scale * w2   # w1's rows h*C + c as (H, C, D)
    margins = q / qmin
    if isinstance(lam, str):
        lam = {"softmin": lambda: softmin_dual(q, big_w, v, x, y, ctx),
               "nnls": lambda: nnls_dual(margins, big_w, v, x, y, ctx)}[lam]()
    lam = np.asarray(lam, dtype=np.float64)
    g = dual_blocks(lam, x, y, ctx, count)
    r1 = big_w - v[:, None, None] * g
    r2 = v - np.einsum("hcd,hcd->h", big_w, g)
    total = math.sqrt(float((big_w ** 2).sum() + (v ** 2).sum()))
    mass = float(np.abs(lam) @ margins)
    absolute = float(np.abs(lam).sum())
    norms = np.sqrt((big_w ** 2).sum(axis=(1, 2)) + v ** 2)
    return Certificate(
        lam=lam, stationarity_w1=float(np.linalg.norm(r1)) / total, stationarity_w2=float(np.linalg.norm(r2)) / total,
        complementarity=float(lam @ (margins - 1)) / mass if mass > 0 else float("nan"),
        dual_infeasibility=float(np.maximum(-lam, 0).sum()) / absolute if absolute > 0 else float("nan"),
        unit_norms=norms, dual_norms=np.sqrt((g ** 2).sum(axis=(1, 2))),
        dead=norms <= DEAD_RELATIVE_NORM * norms.max())
