"""scikit-learn estimators for the certified max-margin programs, on any data and without a config.

- `KernelSVM`: the hard-margin kernel SVM without bias, min ||w||^2 s.t. y_n f(x_n) >= 1, solved by
  our interior-point method (`gbcli.programs.ipm`) on Q = yy' o K and certified in kernel space.
- `GroupNormSVM`: the group-norm (multiple-kernel) program min sum_g ||zeta_g|| s.t. y_n f(x_n) >= 1
  with f(x_n) = sum_r E[n, r] <zeta_r, x_n>, on gates E given by the caller or built from local
  contexts (the svm-gln program of `gb fit-svm`), solved by a registered solver and certified by
  `gbcli.programs.certify`.

Both take any two labels: classes_[1] plays +1. Data that no predictor of the program separates
(a hard-margin program without bias has no solution then) raises ValueError.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import accuracy_score
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from gbcli.programs.certify import certificate
from gbcli.programs.design import GatedDesign, constant_gates, decision, singleton_groups, unit_groups
from gbcli.programs.ipm import Kernel, interior_point

SUPPORT = 1e-6   # a training point is a support vector when its multiplier exceeds this fraction of the largest


def _binary_labels(est, y) -> tuple[np.ndarray, np.ndarray]:
    """(classes, y mapped to -1 / +1 with classes[1] -> +1); ValueError unless exactly two classes."""
    check_classification_targets(y)
    y_type = type_of_target(y, input_name="y", raise_unknown=True)
    if y_type != "binary":
        raise ValueError(f"Only binary classification is supported. The type of the target is {y_type}.")
    classes, idx = np.unique(y, return_inverse=True)
    if len(classes) != 2:
        raise ValueError(f"{type(est).__name__} needs two classes in y, got 1 class ({classes[0]!r})")
    return classes, np.where(idx == 1, 1.0, -1.0)


def _certified_status(status: str, cert: dict) -> str:
    """`optimal` is a certified word: an uncertified optimum is `inaccurate`."""
    return "inaccurate" if status == "optimal" and not cert["certified"] else status


def _warn_inexact(est, status: str, message: str) -> None:
    if status != "optimal":
        warnings.warn(f"{type(est).__name__}: the solve is {status}: {message}", ConvergenceWarning, stacklevel=3)


def _is_real(value) -> bool:
    """A real number: int, float or numpy's, not a bool (True is not a tolerance) or a string."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _check_tol(est, tol) -> float:
    """A certificate's tolerance is a finite number in (0, 1): a relative gap and a margin shortfall
    below 1 is the least an answer needs, so tol >= 1 (or inf) would certify anything (tol=inf
    certified a relative gap of 0.99), and tol <= 0 (or NaN) nothing."""
    if not _is_real(tol) or not math.isfinite(float(tol)) or not 0 < float(tol) < 1:
        raise ValueError(f"{type(est).__name__}: tol must be a finite number in (0, 1), got {tol!r}")
    return float(tol)


def _check_max_iter(est, max_iter) -> int | None:
    """max_iter: None (the method's default) or a positive integer (not a bool or a float)."""
    if max_iter is None:
        return None
    if not isinstance(max_iter, numbers.Integral) or isinstance(max_iter, (bool, np.bool_)) or max_iter < 1:
        raise ValueError(f"{type(est).__name__}: max_iter must be None or a positive integer, got {max_iter!r}")
    return int(max_iter)


class KernelSVM(ClassifierMixin, BaseEstimator):
    """Hard-margin kernel SVM without bias: min ||w||^2 s.t. y_n f(x_n) >= 1, f(x) = sum_n alpha_n k(x_n, x).

    kernel: "linear", "rbf", "poly" (scikit-learn's pairwise kernels, with gamma, degree, coef0; gamma
    None means 1 / n_features) or "precomputed" (fit takes the N x N training kernel, decision_function
    the M x N kernel between new and training points). tol: the relative duality gap (and margin
    shortfall) the solve is certified to; max_iter: interior-point iterations (None: the method's default).

    Fitted: classes_, alpha_ (N,), dual_coef_ (1, n_SV) and support_, coef_ (1, D) for the linear
    kernel, lam_ (the dual multipliers), status_ ("optimal" | "inaccurate"), objective_ (||w||^2) and
    certificate_ (primal_objective, dual_objective, rel_gap, min_margin, iterations, certified, tolerance).
    """

    def __init__(self, kernel="linear", gamma=None, degree=3, coef0=1.0, tol=1e-6, max_iter=None):
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.tol = tol
        self.max_iter = max_iter

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        tags.classifier_tags.multi_class = False
        return tags

    def _check_params(self) -> tuple[float, int | None]:
        """(tol, max_iter), validated at fit as scikit-learn does (the constructor stores them
        unchanged); ValueError naming the parameter otherwise."""
        name = type(self).__name__
        if not isinstance(self.kernel, str) or self.kernel not in ("linear", "rbf", "poly", "precomputed"):
            raise ValueError(f"{name}: kernel must be 'linear', 'rbf', 'poly' or 'precomputed', got {self.kernel!r}")
        if self.gamma is not None and (not _is_real(self.gamma) or not math.isfinite(float(self.gamma))
                                       or not float(self.gamma) > 0):
            raise ValueError(f"{name}: gamma must be None or a finite positive number, got {self.gamma!r}")
        if not isinstance(self.degree, numbers.Integral) or isinstance(self.degree, (bool, np.bool_)) \
                or self.degree < 1:
            raise ValueError(f"{name}: degree must be a positive integer, got {self.degree!r}")
        if not _is_real(self.coef0) or not math.isfinite(float(self.coef0)):
            raise ValueError(f"{name}: coef0 must be a finite number, got {self.coef0!r}")
        return _check_tol(self, self.tol), _check_max_iter(self, self.max_iter)

    def _gram(self, x, z):
        if self.kernel == "precomputed":
            return x
        if self.kernel not in ("linear", "rbf", "poly"):
            raise ValueError(f"kernel must be 'linear', 'rbf', 'poly' or 'precomputed', got {self.kernel!r}")
        return pairwise_kernels(x, z, metric=self.kernel, filter_params=True, gamma=self.gamma,
                                degree=self.degree, coef0=self.coef0)

    def fit(self, X, y):
        """Solve the program on (X, y); ValueError when the data is not separable by this kernel, or
        when a parameter is out of range (tol a finite number in (0, 1), max_iter a positive integer)."""
        tol, max_iter = self._check_params()
        X, y = validate_data(self, X, y, dtype=np.float64)
        classes, ypm = _binary_labels(self, y)
        if self.kernel == "precomputed":
            if X.shape[0] != X.shape[1]:
                raise ValueError(f"kernel='precomputed' needs a square training kernel, got shape {X.shape}")
            ev = np.linalg.eigvalsh((X + X.T) / 2)   # rounding-level asymmetry and negative eigenvalues pass
            scale = np.abs(X).max()
            if np.abs(X - X.T).max() > 1e-6 * scale or ev[0] < -1e-6 * scale:
                raise ValueError("the precomputed kernel is not symmetric positive semidefinite, so the program "
                                 f"is not convex (smallest eigenvalue {ev[0]:.3g})")
        gram = self._gram(X, X)
        q = gram * np.outer(ypm, ypm)
        status, message, lam, s, it = interior_point(Kernel(torch.as_tensor(q, dtype=torch.float64)), True,
                                                     tol, max_iter)
        if status == "infeasible":
            raise ValueError(f"the training data is not separable by this kernel ({self.kernel}) with a hard "
                             "margin and no bias: the program has no solution")
        if s is None:
            raise ValueError(f"the interior-point method failed: {message}")
        alpha = s[0] * lam * ypm
        margins = ypm * (gram @ alpha)
        if margins.min() > 0:   # rescale to smallest margin exactly 1 (as the dual solver does)
            alpha = alpha / margins.min()
            margins = margins / margins.min()
        primal = float(alpha @ gram @ alpha)
        qlam = float(lam @ q @ lam)
        dual = float(lam.sum() ** 2 / qlam) if qlam > 0 else float("nan")
        gap = (primal - dual) / max(abs(primal), 1e-12)
        self.certificate_ = {"primal_objective": primal, "dual_objective": dual, "rel_gap": gap,
                             "min_margin": float(margins.min()), "iterations": it, "tolerance": tol,
                             "certified": bool(abs(gap) <= tol and margins.min() >= 1 - tol)}
        status = _certified_status(status, self.certificate_)
        self.status_, self.message_, self.lam_, self.alpha_, self.objective_ = status, message, lam, alpha, primal
        self.support_ = np.flatnonzero(lam > SUPPORT * lam.max())
        self.dual_coef_ = alpha[self.support_][None, :]
        self.classes_, self.X_fit_, self.n_iter_ = classes, X, it
        if self.kernel == "linear":
            self.coef_ = (alpha @ X)[None, :]
        _warn_inexact(self, status, message)
        return self

    def decision_function(self, X):
        """f(x) = sum_n alpha_n k(x_n, x) for each row of X (M x N_train kernel rows when precomputed)."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self._gram(X, self.X_fit_) @ self.alpha_

    def predict(self, X):
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) > 0).astype(int)]


class GroupNormSVM(ClassifierMixin, BaseEstimator):
    """The group-norm program min sum_g ||zeta_g||_F s.t. y_n f(x_n) >= 1, f(x_n) = sum_r E[n, r] <zeta_r, x_n>.

    The gates E of the training (and of every new) point come from one of
    - gates: an (N, R) gate matrix (0/1 ReLU gates, an always-on column, ...);
    - contexts (N, H) ints in [0, count) with count C: E = one_hot(contexts, C), the GLN gating;
    - neither: one always-on gate, so f is linear and the program is the linear hard-margin SVM.
    groups: "units" (contexts: the C columns of each unit, the svm-gln norm; gates: one group per
    column), None (one group per gate column) or a list of column-index arrays partitioning the R
    columns. solver: a name in gbcli.programs.solvers.SOLVERS that solves group norms (default the
    certified dual interior point); tol and max_iter are passed to it.

    Fitted: classes_, zeta_ (R, D), lam_ (the dual multipliers, when the solver gives them),
    objective_, status_, message_, certificate_ (gbcli.programs.certify.certificate), groups_, count_.
    """

    def __init__(self, groups="units", tol=1e-6, max_iter=None, solver="dual"):
        self.groups = groups
        self.tol = tol
        self.max_iter = max_iter
        self.solver = solver

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _gates(self, n, gates, contexts, count, fitting):
        """(E, H, C): the gate matrix of n points, the number of units and of contexts per unit."""
        if gates is not None and contexts is not None:
            raise ValueError("pass gates or contexts, not both")
        if fitting and count is not None and contexts is None:
            raise ValueError("count is the number of contexts per unit: it goes with contexts")
        mode = "gates" if gates is not None else "contexts" if contexts is not None else "constant"
        if not fitting and mode != self.gate_mode_:
            raise ValueError(f"{type(self).__name__} was fitted with {self.gate_mode_} gating, "
                             f"so decision_function needs the same ({mode} given)")
        if mode == "constant":
            return constant_gates(n), 1, 1
        if mode == "gates":
            e = check_array(gates, dtype=np.float64, input_name="gates")
            units, count = e.shape[1], 1
        else:
            ctx = check_array(contexts, dtype=None, input_name="contexts")
            if not np.issubdtype(ctx.dtype, np.integer):
                if not np.all(np.mod(ctx, 1) == 0):
                    raise ValueError("contexts must be integers")
                ctx = ctx.astype(np.int64)
            count = (int(ctx.max()) + 1 if count is None else int(count)) if fitting else self.count_
            if ctx.min() < 0 or ctx.max() >= count:
                raise ValueError(f"contexts must lie in [0, {count}), got values in [{ctx.min()}, {ctx.max()}]")
            from gbcli.models.gating import one_hot
            e = one_hot(ctx, count)
            units = ctx.shape[1]
        if e.shape[0] != n:
            raise ValueError(f"{mode} has {e.shape[0]} rows but X has {n}")
        if not fitting and e.shape[1] != self.zeta_.shape[0]:
            raise ValueError(f"{mode} gives {e.shape[1]} gate columns, the fit had {self.zeta_.shape[0]}")
        return e, units, count

    def _group_list(self, rows, units, count, mode):
        if isinstance(self.groups, str):
            if self.groups != "units":
                raise ValueError(f"groups must be 'units', None or a list of index arrays, got {self.groups!r}")
            return unit_groups(units, count) if mode == "contexts" else singleton_groups(rows)
        if self.groups is None:
            return singleton_groups(rows)
        groups = [np.asarray(g, dtype=np.int64).reshape(-1) for g in self.groups]
        flat = np.concatenate(groups) if groups else np.array([], dtype=np.int64)
        if len(flat) != rows or not np.array_equal(np.sort(flat), np.arange(rows)):
            raise ValueError(f"groups must partition the {rows} gate columns (each column in exactly one group)")
        return groups

    def fit(self, X, y, gates=None, contexts=None, count=None):
        """Solve the program on (X, y) with the points' gates; ValueError when it has no solution, or
        when a parameter is out of range (tol a finite number in (0, 1), max_iter a positive integer)."""
        from gbcli.programs.solvers import SOLVERS

        tol, max_iter = _check_tol(self, self.tol), _check_max_iter(self, self.max_iter)
        X, y = validate_data(self, X, y, dtype=np.float64)
        X = X if X.flags.writeable else X.copy()   # the dual solver hands X to torch, which wants writable arrays
        classes, ypm = _binary_labels(self, y)
        if not isinstance(self.solver, str) or self.solver not in SOLVERS \
                or not SOLVERS[self.solver].can_solve("group"):
            able = [n for n, s in SOLVERS.items() if s.can_solve("group")]
            raise ValueError(f"solver must be one of {able}, got {self.solver!r}")
        e, units, count = self._gates(len(X), gates, contexts, count, fitting=True)
        mode = "gates" if gates is not None else "contexts" if contexts is not None else "constant"
        groups = self._group_list(e.shape[1], units, count, mode)
        design = GatedDesign(X, ypm, e, X[:0], e[:0], "group", groups, units, count)
        sol = SOLVERS[self.solver].solve(design, max_iter, tol)
        if sol.zeta is None:
            if sol.status == "infeasible":
                raise ValueError(f"no hard-margin solution with these gates: {sol.message}")
            raise ValueError(f"the {self.solver} solver failed ({sol.status}): {sol.message}")
        self.classes_, self.gate_mode_, self.groups_, self.count_ = classes, mode, groups, count
        self.zeta_, self.lam_, self.objective_ = sol.zeta, sol.lam, sol.value
        self.certificate_ = certificate(design, sol, tol)
        sol.status = _certified_status(sol.status, self.certificate_)
        self.status_, self.message_, self.n_iter_ = sol.status, sol.message, sol.iterations
        _warn_inexact(self, sol.status, sol.message)
        return self

    def decision_function(self, X, gates=None, contexts=None):
        """f(x) = sum_r E[x, r] <zeta_r, x>, with the new points' gates given as in fit."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        e, _, _ = self._gates(len(X), gates, contexts, None, fitting=False)
        return decision(self.zeta_, X, e)

    def predict(self, X, gates=None, contexts=None):
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X, gates, contexts) > 0).astype(int)]

    def score(self, X, y, sample_weight=None, gates=None, contexts=None):
        """Mean accuracy on (X, y), with the points' gates given as in fit."""
        return accuracy_score(y, self.predict(X, gates, contexts), sample_weight=sample_weight)
