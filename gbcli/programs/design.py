"""The data of a convex max-margin program (protocol section 5) and what every solver returns:
min norm(zeta) s.t. y_n f(x_n) >= 1, f(x_n) = sum_r E[n, r] <zeta_r, x_n> with gates E (one-hot
contexts, 0/1 ReLU gates, a constant column). Programs differ only in the design and the norm.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np


@dataclass
class GatedDesign:

    x_train: np.ndarray          # (N, D)
    y_train: np.ndarray          # (N,) in {-1, +1}
    e_train: np.ndarray          # (N, R) gates
    x_val: np.ndarray            # (M, D)
    e_val: np.ndarray            # (M, R)
    norm: str                    # the name of a registered norm (gbcli.programs.norms.NORMS)
    groups: list[np.ndarray] = field(default_factory=list)  # row indices of each group (group norms)
    units: int = 1               # H (for the l2 norms)
    count: int = 1               # C (for the l2 norms)
    # (x, e, y) of every training point when the design constrains only some (svm-pos, svm-neg)
    classify: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def rows(self) -> int:
        return self.e_train.shape[1]


class Status(StrEnum):
    """What a solve (or a record) says of its program. A str, so records and tables hold the word."""

    OPTIMAL = "optimal"          # solved, certified within the tolerance
    INACCURATE = "inaccurate"    # an answer whose certificate falls short of the tolerance
    INFEASIBLE = "infeasible"    # no predictor separates the training data (a dual ray says so)
    FAILED = "failed"            # no answer


INSEPARABLE = "the training data is not separable under this program's architecture"   # every solver's message


def certified_status(status: str, certified: bool) -> str:
    """`optimal` is a certified word: an uncertified optimum is reported `inaccurate`."""
    return Status.INACCURATE if status == Status.OPTIMAL and not certified else status


class Stop(StrEnum):
    """Why a solve ended: decisions read this, never the message (which is for people)."""

    CONVERGED = "converged"              # met the tolerance
    STALLED = "stalled"                  # no progress for a while, short of the tolerance
    STALLED_MET = "stalled-met"          # no progress for a while, the tolerance met
    POLISHED = "polished"                # finished on the active set after a stall
    TIME_LIMIT = "time-limit"            # svm.time_limit reached (a rerun resumes the working set)
    ITERATION_LIMIT = "iteration-limit"  # max_iters (or working-set rounds) used up
    NUMERICAL = "numerical"              # a singular Newton system, no positive margin, non-finite numbers
    UNBOUNDED = "unbounded"              # the dual is unbounded: its ray certifies infeasibility
    ASKED = "asked"                      # stopped between working-set rounds as its caller asked
    SHARED_RAY = "shared-ray"            # answered by the certified ray of a program with the same constraints
    OTHER = "other"                      # a solver that does not say (the primal adapters, old cache entries)


@dataclass
class Solution:

    zeta: np.ndarray | None
    status: str        # a Status (optimal | inaccurate | infeasible | failed)
    value: float
    seconds: float
    solver: str
    message: str = ""
    iterations: int | None = None
    lam: np.ndarray | None = None    # (N,) margin multipliers: a dual certificate
    stop: Stop = Stop.OTHER          # why the solve ended


def unit_groups(units: int, count: int) -> list[np.ndarray]:
    """The GLN norm's groups: the C rows h*C .. h*C+C-1 of each unit h."""
    return [np.arange(h * count, (h + 1) * count) for h in range(units)]


def reference_groups(units: int, count: int) -> list[np.ndarray]:
    """The published code's groups {i, i+H, i+2H, ...} (a column-major reshape of row-major rows)."""
    return [np.arange(i, units * count, units) for i in range(units)]


def singleton_groups(rows: int) -> list[np.ndarray]:
    """One group per row (a unit per gate: the FReLU norm)."""
    return [np.array([r]) for r in range(rows)]


def decision(zeta: np.ndarray, x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """f(x_n) = sum_r E[n, r] <zeta_r, x_n>."""
    return ((x @ zeta.T) * e).sum(1)


def train_outputs(design: GatedDesign, zeta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(f(x_n), y_n) over every training point the predictor classifies (`classify` when set)."""
    x, e, y = design.classify or (design.x_train, design.e_train, design.y_train)
    return decision(zeta, x, e), y


def combination(design: GatedDesign, lam: np.ndarray, precise: bool = False) -> np.ndarray:
    """V = E' diag(lam o y) X (R x D). `precise`: summed exactly, in long double, for a V that cancels."""
    if precise:
        import torch   # torch is heavy to import and only the precise sums need it here

        from gbcli.programs.exact import ExactProduct

        lo = getattr(lam, "lo", None)   # a double-double (exact.DoubleDouble): both halves
        lam = np.asarray(lam)
        hi = lam.astype(np.float64)
        if lo is None and lam.dtype != np.float64:   # a long double lam: two floats
            lo = (lam - hi).astype(np.float64)
        parts = [hi] if lo is None else [hi, lo]
        a = np.concatenate([design.e_train * (p * design.y_train)[:, None] for p in parts], 1)
        v = ExactProduct(torch.tensor(design.x_train, dtype=torch.float64)).t_precise(torch.as_tensor(a))
        return v.reshape(len(parts), design.e_train.shape[1], -1).sum(0)
    return design.e_train.T @ ((lam * design.y_train)[:, None] * design.x_train)


def margin_matrix(design: GatedDesign) -> "scipy.sparse.csr_matrix":
    """Sparse A with (A vec(zeta))_n = y_n f(x_n), vec row-major: one block of D per nonzero gate."""
    import scipy.sparse as sp   # here: the store reads this module's statuses, and scipy takes 0.3 s to import
    x, y, e = design.x_train, design.y_train, design.e_train
    n, d = x.shape
    rn, rr = np.nonzero(e)
    data = (y[rn] * e[rn, rr])[:, None] * x[rn]
    cols = rr[:, None] * d + np.arange(d)
    rows = np.repeat(rn, d)
    return sp.csr_matrix((data.ravel(), (rows, cols.ravel())), shape=(n, design.rows * d))


def one_hot(ctx: np.ndarray, count: int) -> np.ndarray:
    """(N, H) local contexts -> (N, H*C) 0/1 matrix E with column h*C + c (the row order of zeta)."""
    n, h = ctx.shape
    if n and (ctx.min() < 0 or ctx.max() >= count):
        raise ValueError(f"contexts must be in 0..{count - 1}, got values in {ctx.min()}..{ctx.max()}")
    e = np.zeros((n, h * count))
    e[np.arange(n)[:, None], np.arange(h) * count + ctx] = 1.0
    return e


def constant_gates(n: int) -> np.ndarray:
    """One always-on context: a plain linear predictor as a gated design."""
    return np.ones((n, 1))
