"""The norms of the max-margin programs, one class each (protocol sections 5 and 6): value, dual norm,
input radius, cvxpy form, kernel form and primal recovery. Solvers ask `NORMS[design.norm]`; nothing
branches on a norm's name. `sq`, `l2` (zeta' M zeta, svm-l2), `group` and `l2-reference` are the dual
solver's; `l1` and `linf` are LPs (HiGHS), `l1.5` a cone program.
"""

from __future__ import annotations

import contextlib
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
import threadpoolctl
import torch

from gbcli.programs.design import GatedDesign, Stop, combination, decision
from gbcli.programs.ipm import Kernel, interior_point


def context_mean(units: int, count: int) -> sp.csr_matrix:
    """P = I_H (x) (1/C) 1 1': replaces each row by the mean of its unit's C rows."""
    return sp.kron(sp.identity(units), np.full((count, count), 1.0 / count), format="csr")


def context_pinv(units: int, count: int) -> np.ndarray:
    """Mt^+ = J/(HC)^2 + (I - P)/C, the pseudo-inverse of svm-l2's Mt (the svm-l2 kernel is E Mt^+ E')."""
    r = units * count
    return np.ones((r, r)) / r ** 2 + (np.eye(r) - context_mean(units, count).toarray()) / count


def count_groups_matrix(units: int, count: int) -> np.ndarray:
    """T of the reference objective: T[r, r'] = [r = r' mod H]."""
    idx = np.arange(units * count)
    return (idx[:, None] % units == idx[None, :] % units).astype(float)


def reference_matrix(units: int, count: int) -> np.ndarray:
    """The published code's A_ref: (1/HC) J - T + C I, T summing rows in the groups {i, i+H, ...}."""
    r = units * count
    return np.ones((r, r)) / r - count_groups_matrix(units, count) + count * np.eye(r)


def reference_null_and_pinv(units: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(B, (A'A)^+) for the published code's A_ref: B spans its null space (H - 1 columns:
    sum_i u_i 1_{g_i} with sum u = 0, g_i the rows {i, i+H, ...}); the pseudo-inverse acts on the rest."""
    a = reference_matrix(units, count)
    ev, vec = np.linalg.eigh(a.T @ a)
    zero = ev < 1e-9 * ev.max()
    return vec[:, zero], (vec[:, ~zero] / ev[~zero]) @ vec[:, ~zero].T


def _metric_norm(v: np.ndarray, m: np.ndarray) -> float:
    """sqrt(<V, M V>) for a positive semidefinite M."""
    return float(np.sqrt(max(float(np.sum(v * (m @ v))), 0.0)))


def _metric_norm_rows(e: np.ndarray, m: np.ndarray) -> np.ndarray:
    """sqrt(e_n' M e_n) for each row e_n of E."""
    return np.sqrt(np.clip(((e @ m) * e).sum(1), 0, None))


class Norm:
    """A norm of zeta (or its square, for the quadratic ones)."""

    name: ClassVar[str]
    description: ClassVar[str]            # for messages: "minimizes <description>"
    quadratic: ClassVar[bool] = False     # the objective is the squared norm (a QP)
    default_solver: ClassVar[str] = "dual"
    has_reduction: ClassVar[bool] = False  # an exact route through the dual of its own (solve_reduced)

    def value(self, design: GatedDesign, zeta: np.ndarray) -> float:
        raise NotImplementedError

    def dual(self, design: GatedDesign, v: np.ndarray) -> float:
        """The dual norm ||V||_* (of the norm itself, not of its square); NaN when V cannot certify."""
        raise NotImplementedError

    def gate_radius(self, design: GatedDesign) -> np.ndarray:
        """Per training point: the dual norm of its gates (|f(x_n)| <= ||zeta|| ||x_n|| radius_n)."""
        return np.linalg.norm(design.e_train, axis=1)

    def input_radius(self, design: GatedDesign) -> float:
        """max_n of the dual norm of point n's gated input, so |f(x_n)| <= ||zeta|| * radius."""
        return float((np.linalg.norm(design.x_train, axis=1) * self.gate_radius(design)).max())

    def cvxpy(self, cp, design: GatedDesign, z, zm):
        """The objective as a cvxpy expression of z (zm: its R x D reshape); cp: the cvxpy module."""
        raise NotImplementedError

    def kernel(self, design: GatedDesign, ky: torch.Tensor, e: torch.Tensor):
        """(Ky, E, col_group) from Ky = yy' o XX': a `gate_metric` M folds E into Ky as Ky o (E M E') (E None);
        None: not the dual solver's."""
        m = self.gate_metric(design)
        if m is None:
            return None
        if e.shape[1] > 1:
            ky.mul_(e @ torch.as_tensor(m, dtype=ky.dtype, device=ky.device) @ e.T)
        return ky, None, None

    def gate_metric(self, design: GatedDesign) -> np.ndarray | None:
        """M (R x R) of a quadratic norm whose kernel and recovery fold the gates (ipm.Kernel's `fold`), else None."""
        return None

    def recover(self, design: GatedDesign, v: np.ndarray, s: np.ndarray) -> np.ndarray:
        """The primal zeta from V = combination(lam) and the group multipliers s (s_0 M V for a `gate_metric`)."""
        m = self.gate_metric(design)
        if m is None:
            raise NotImplementedError
        return s[0] * (m @ v)

    def predictor(self, design: GatedDesign, lam: np.ndarray, s: np.ndarray, precise: bool = False) -> np.ndarray:
        """zeta = recover(V(lam), s) in float64. `precise`: V summed exactly and recovered in long double,
        for a V that cancels (a float64 recovery's margins are then off by ~5e-6 to ~0.1)."""
        if not precise:
            return self.recover(design, combination(design, lam), s)
        v = combination(design, lam, precise=True)
        return np.asarray(self.recover(design, v, np.asarray(s, np.longdouble)), np.float64)


class SquaredL2(Norm):
    name, description, quadratic = "sq", "the squared l2 norm", True

    def value(self, design, zeta):
        return float((zeta ** 2).sum())

    def dual(self, design, v):
        return float(np.linalg.norm(v))

    def cvxpy(self, cp, design, z, zm):
        return cp.sum_squares(z)

    def gate_metric(self, design):
        return np.eye(design.e_train.shape[1])


class ContextL2(Norm):
    """svm-l2: the L2 norm of all C^H context predictors (protocol section 5), a quadratic form."""

    name, description, quadratic = "l2", "the quadratic context norm zeta' M zeta", True

    def value(self, design, zeta):
        h, c = design.units, design.count
        s = zeta.sum(0)
        dev = zeta - context_mean(h, c) @ zeta
        return float(s @ s + c * (dev ** 2).sum())

    def dual(self, design, v):
        return _metric_norm(v, context_pinv(design.units, design.count))

    def gate_radius(self, design):
        return _metric_norm_rows(design.e_train, context_pinv(design.units, design.count))

    def cvxpy(self, cp, design, z, zm):
        h, c = design.units, design.count
        # zeta' M zeta = ||s||^2 + C ||(I - P) zeta||^2, with s the sum of all rows
        dev = (sp.identity(design.rows, format="csr") - context_mean(h, c)) @ zm
        return cp.sum_squares(cp.sum(zm, axis=0)) + c * cp.sum_squares(dev)

    def gate_metric(self, design):
        return context_pinv(design.units, design.count)


class GroupNorm(Norm):
    """Sum of the groups' Frobenius norms: the GLN norm (groups = units) and the FReLU norm."""

    name, description = "group", "a group norm"

    def value(self, design, zeta):
        return float(sum(np.linalg.norm(zeta[g]) for g in design.groups))

    def dual(self, design, v):
        return float(max(np.linalg.norm(v[g]) for g in design.groups))

    def gate_radius(self, design):
        e = design.e_train
        return np.max([np.linalg.norm(e[:, g], axis=1) for g in design.groups], axis=0)

    def cvxpy(self, cp, design, z, zm):
        return sum(cp.norm(cp.hstack([zm[i] for i in g])) if len(g) > 1 else cp.norm(zm[int(g[0])])
                   for g in design.groups)

    def kernel(self, design, ky, e):
        col_group = np.full(design.rows, -1, dtype=np.int64)
        for g, cols in enumerate(design.groups):
            if (col_group[cols] >= 0).any():
                raise ValueError(f"group {g} shares gate columns with an earlier group (groups must partition them)")
            col_group[cols] = g
        if (col_group < 0).any():
            raise ValueError(f"gate columns {np.flatnonzero(col_group < 0)[:5].tolist()} are in no group")
        return ky, e, torch.as_tensor(col_group, device=ky.device)

    def recover(self, design, v, s):
        zeta = np.zeros_like(v)
        for gi, cols in enumerate(design.groups):
            zeta[cols] = s[gi] * v[cols]
        return zeta


class Polyhedral(Norm):
    """l1 (the sum of absolute entries) or l-infinity (the largest: sign descent's margin, docs/optimizers.md),
    each the other's dual norm: LPs, which the dual solver does not cover."""

    default_solver = "highs"

    def __init__(self, name: str, words: str, own, dual_of, cvxpy_form: str):
        """own, dual_of: np.sum or np.max (of the absolute entries); cvxpy_form: cvxpy's function of the norm."""
        self.name, self.description = name, f"the {words} norm (a linear program)"
        self.own, self.dual_of, self.cvxpy_form = own, dual_of, cvxpy_form

    def value(self, design, zeta):
        return float(self.own(np.abs(zeta)))

    def dual(self, design, v):
        return float(self.dual_of(np.abs(v)))

    def input_radius(self, design):
        rows = lambda a: self.dual_of(np.abs(a), axis=1)
        return float((rows(design.x_train) * rows(design.e_train)).max())

    def cvxpy(self, cp, design, z, zm):
        return getattr(cp, self.cvxpy_form)(z)


class Lp(Norm):
    """The lp norm of all entries, 1 < p < 2 (a cone program: mirror descent's margin); dual lq."""

    def __init__(self, p: float):
        self.p, self.q = p, p / (p - 1)
        self.name, self.description, self.default_solver = f"l{p:g}", f"the l{p:g} norm (a cone program)", "clarabel"

    def value(self, design, zeta):
        return float((np.abs(zeta) ** self.p).sum() ** (1 / self.p))

    def dual(self, design, v):
        return float((np.abs(v) ** self.q).sum() ** (1 / self.q))

    def input_radius(self, design):
        q = self.q
        return float(((np.abs(design.x_train) ** q).sum(1) ** (1 / q) * (np.abs(design.e_train) ** q).sum(1) ** (1 / q))
                     .max())

    def cvxpy(self, cp, design, z, zm):
        return cp.pnorm(z, self.p)


class ReferenceL2(Norm):
    """svm-l2-reference: ||A_ref zeta||^2 with the published code's (degenerate) A_ref."""

    name, description, quadratic = "l2-reference", "the published code's quadratic norm", True
    has_reduction = True

    def value(self, design, zeta):
        return float(((reference_matrix(design.units, design.count) @ zeta) ** 2).sum())

    def dual(self, design, v):
        # lam certifies only when it puts no weight on the null space of A_ref
        null, pinv = reference_null_and_pinv(design.units, design.count)
        if np.linalg.norm(null.T @ v) > 1e-9 * max(np.linalg.norm(v), 1e-300):
            return float("nan")
        return _metric_norm(v, pinv)

    def gate_radius(self, design):
        return _metric_norm_rows(design.e_train, reference_null_and_pinv(design.units, design.count)[1])

    def cvxpy(self, cp, design, z, zm):
        h, c = design.units, design.count
        # ||A_ref zeta||^2 = ||(C I - T) zeta||^2 + ||s||^2 / (HC): every column of T sums to C
        t = sp.csr_matrix(count_groups_matrix(h, c))
        return (cp.sum_squares((c * sp.identity(design.rows, format="csr") - t) @ zm)
                + cp.sum_squares(cp.sum(zm, axis=0)) / (h * c))

    def solve_reduced(self, design, tol, max_iters, device):
        """(status, message, zeta, lam, iterations, stop): a kernel SVM on the points without null-space gates
        plus the minimum-norm null part lifting each free point to margin >= 1; None when that part's features
        are dependent. One thread: the predictor is left to rounding, which must not depend on threads."""
        with _one_thread():
            x, y, e = design.x_train, design.y_train, design.e_train
            _, pinv, _, free = self._split(design)
            fixed = ~free
            gram = x @ x.T
            lam = np.zeros(len(y))
            status, message, it, stop = "optimal", "", 0, Stop.CONVERGED
            if fixed.any():
                ky = gram[np.ix_(fixed, fixed)] * (e[fixed] @ pinv @ e[fixed].T) * np.outer(y[fixed], y[fixed])
                got = interior_point(Kernel(torch.as_tensor(ky, device=device)), True, tol, max_iters)
                status, message, it, stop = got.status, got.message, got.iterations, got.stop
                if got.s is None:
                    return status, message, None, None, it, stop
                lam[fixed] = got.s[0] * got.lam
            zeta = self.complete(design, lam, gram)
            if zeta is None:   # rare on images (D large): the caller solves the primal instead
                return None
            note = (f"the objective constrains {int(fixed.sum())} of {len(y)} training points; the rest of the "
                    "predictor is the minimum-norm null-space part, which the program does not determine")
            return status, f"{message}; {note}" if message else note, zeta, lam, it, stop

    def complete(self, design: GatedDesign, lam: np.ndarray, gram: np.ndarray | None = None) -> np.ndarray | None:
        """`solve_reduced`'s predictor of lam (`gb verify` rebuilds it from stored multipliers), or None;
        gram: X X' when the caller has it."""
        with _one_thread():
            x, y, e = design.x_train, design.y_train, design.e_train
            gram = x @ x.T if gram is None else gram
            null, pinv, cn, free = self._split(design)
            fixed = ~free
            zeta = pinv @ combination(design, np.asarray(lam, np.float64))
            if fixed.any():   # the stopping test assumed this rescaling (it may scale up as well as down)
                zeta = zeta / (decision(zeta, x[fixed], e[fixed]) * y[fixed]).min()
            if free.any():
                m = decision(zeta, x, e) * y
                w = gram[np.ix_(free, free)] * (cn[free] @ cn[free].T) * np.outer(y[free], y[free])
                chol, info = torch.linalg.cholesky_ex(torch.as_tensor(w))
                if int(info) != 0:
                    return None
                t = torch.as_tensor(np.maximum(1 - m[free], 0))[:, None]
                beta = torch.cholesky_solve(t, chol)[:, 0].numpy()
                zeta = zeta + null @ ((cn[free] * (beta * y[free])[:, None]).T @ x[free])
            m = decision(zeta, x, e) * y
            if 0 < m.min() < 1:
                zeta = zeta / m.min()
            return zeta

    @staticmethod
    def _split(design):
        """(B, (A'A)^+, c = E B, free): null space, pseudo-inverse, null-space gates, free points."""
        null, pinv = reference_null_and_pinv(design.units, design.count)
        cn = design.e_train @ null
        return null, pinv, cn, np.abs(cn).max(1) > 1e-9


@contextlib.contextmanager
def _one_thread():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
            yield
    finally:
        torch.set_num_threads(threads)


NORMS: dict[str, Norm] = {n.name: n for n in (
    SquaredL2(), ContextL2(), GroupNorm(), Polyhedral("l1", "l1", np.sum, np.max, "norm1"),
    Polyhedral("linf", "l-infinity", np.max, np.sum, "norm_inf"), Lp(1.5), ReferenceL2())}


def norm_of(design: GatedDesign) -> Norm:
    return NORMS[design.norm]
