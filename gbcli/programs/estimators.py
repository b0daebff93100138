"""scikit-learn estimators for the certified max-margin programs, on any data (docs/library-api.md):
`KernelSVM` (hard margin, no bias) and `GroupNormSVM` (the group-norm program on gates or contexts).
Both take any two labels (classes_[1] plays +1); inseparable data is "warn" (fitted without a
predictor, status_ "infeasible", score NaN) or "raise" (`NotSeparableError`), per `on_inseparable`.
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

from gbcli.programs.certify import certificate, relative_gap
from gbcli.programs.design import (GatedDesign, certified_status, constant_gates, decision, one_hot, singleton_groups,
                                   unit_groups)
from gbcli.programs.ipm import NOT_SEPARABLE, Kernel, interior_point

SUPPORT = 1e-6   # a training point is a support vector when its multiplier exceeds this fraction of the largest
MAX_GATE_ENTRIES = 2 ** 31   # one-hot gate entries an estimator may build (16 GiB of float64)


class NotSeparableError(ValueError):
    """fit's answer (on_inseparable="raise") to inseparable training data; a ValueError subclass."""


class NotSeparableWarning(UserWarning):
    """fit's one-line warning (on_inseparable="warn") on inseparable data: score NaN, predicts majority_."""


def _inseparable(est, message: str, classes, ypm, certificate_: dict, lam) -> None:
    """Raise NotSeparableError, or fit without a predictor and warn in one line (one per fold)."""
    message = " ".join(str(message).split())
    positive = int(np.sum(ypm > 0))
    label = [repr(c.item() if isinstance(c, np.generic) else c) for c in classes]   # 0, not np.int64(0)
    points = f"{len(ypm)} training points ({len(ypm) - positive} of {label[0]}, {positive} of {label[1]})"
    if est.on_inseparable == "raise":
        raise NotSeparableError(f"{points}: {message}")
    majority = 1 if positive > len(ypm) - positive else 0
    est.classes_, est.majority_, est._constant = classes, classes[majority], 1.0 if majority else -1.0
    est.status_, est.message_, est.objective_ = "infeasible", message, float("inf")
    est.certificate_, est.lam_, est.n_iter_ = certificate_, lam, certificate_.get("iterations")
    warnings.warn(f"{type(est).__name__} on {points}: {message}; fitted without a predictor (status_ "
                  f"'infeasible'): score is NaN, predict answers the majority class {label[majority]}",
                  NotSeparableWarning, stacklevel=3)


def _score(est, y, predicted, sample_weight) -> float:
    return float("nan") if _no_predictor(est) else float(accuracy_score(y, predicted, sample_weight=sample_weight))


def _no_predictor(est) -> bool:
    return getattr(est, "status_", None) == "infeasible"


def _binary_labels(est, y) -> tuple[np.ndarray, np.ndarray]:
    """(classes, y as -1 / +1 with classes[1] -> +1); ValueError unless exactly two classes."""
    check_classification_targets(y)
    y_type = type_of_target(y, input_name="y", raise_unknown=True)
    if y_type != "binary":
        raise ValueError(f"Only binary classification is supported. The type of the target is {y_type}.")
    classes, idx = np.unique(y, return_inverse=True)
    if len(classes) != 2:
        raise ValueError(f"{type(est).__name__} needs two classes in y, got 1 class ({classes[0]!r})")
    return classes, np.where(idx == 1, 1.0, -1.0)


def _warn_inexact(est, status: str, message: str) -> None:
    if status != "optimal":
        warnings.warn(f"{type(est).__name__}: the solve is {status}: {message}", ConvergenceWarning, stacklevel=3)


def _finite(value) -> bool:
    """A finite real number, not a bool (True is not a tolerance) or a string."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and math.isfinite(float(value))


def _check_common(est) -> tuple[float, int | None]:
    """(tol, max_iter) with on_inseparable checked; tol in (0, 1): tol >= 1 would certify anything, tol <= 0 nothing."""
    if not isinstance(est.on_inseparable, str) or est.on_inseparable not in ("raise", "warn"):
        raise ValueError(f"{type(est).__name__}: on_inseparable must be 'raise' or 'warn', "
                         f"got {est.on_inseparable!r}")
    if not _finite(est.tol) or not 0 < float(est.tol) < 1:
        raise ValueError(f"{type(est).__name__}: tol must be a finite number in (0, 1), got {est.tol!r}")
    return float(est.tol), _check_count(est, "max_iter", est.max_iter)


def _check_count(est, param: str, value, optional: bool = True) -> int | None:
    """None (when `optional`) or a positive integer, not a bool or a float."""
    if value is None and optional:
        return None
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)) or value < 1:
        raise ValueError(f"{type(est).__name__}: {param} must be {'None or ' if optional else ''}a positive integer, "
                         f"got {value!r}")
    return int(value)


class KernelSVM(ClassifierMixin, BaseEstimator):
    """Hard-margin kernel SVM without bias: min ||w||^2 s.t. y_n f(x_n) >= 1, f(x) = sum_n alpha_n k(x_n, x).

    kernel: "linear", "rbf", "poly" (scikit-learn's; gamma None is 1 / n_features) or "precomputed" (N x N
    at fit, M x N after); tol: the certified relative gap and margin shortfall. When fitted infeasible:
    no alpha_, lam_ the dual ray, certificate_ with relative_margin_bound (certified below 1e-9).
    """

    def __init__(self, kernel="linear", gamma=None, degree=3, coef0=1.0, tol=1e-6, max_iter=None,
                 on_inseparable="warn"):
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.tol = tol
        self.max_iter = max_iter
        self.on_inseparable = on_inseparable

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        tags.classifier_tags.multi_class = False
        return tags

    def _gram(self, x, z):
        if self.kernel == "precomputed":
            return x
        if self.kernel not in ("linear", "rbf", "poly"):
            raise ValueError(f"kernel must be 'linear', 'rbf', 'poly' or 'precomputed', got {self.kernel!r}")
        return pairwise_kernels(x, z, metric=self.kernel, filter_params=True, gamma=self.gamma,
                                degree=self.degree, coef0=self.coef0)

    def fit(self, X, y):
        name = type(self).__name__   # every parameter validated at fit, as scikit-learn does
        if not isinstance(self.kernel, str) or self.kernel not in ("linear", "rbf", "poly", "precomputed"):
            raise ValueError(f"{name}: kernel must be 'linear', 'rbf', 'poly' or 'precomputed', got {self.kernel!r}")
        if self.gamma is not None and not (_finite(self.gamma) and float(self.gamma) > 0):
            raise ValueError(f"{name}: gamma must be None or a finite positive number, got {self.gamma!r}")
        _check_count(self, "degree", self.degree, optional=False)
        if not _finite(self.coef0):
            raise ValueError(f"{name}: coef0 must be a finite number, got {self.coef0!r}")
        tol, max_iter = _check_common(self)
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
        status, message, lam, s, it, _ = interior_point(Kernel(torch.as_tensor(q, dtype=torch.float64)), True,
                                                        tol, max_iter)
        if s is None and status != "infeasible":
            raise ValueError(f"the interior-point method failed: {message}")
        for name in ("alpha_", "dual_coef_", "support_", "coef_", "majority_", "_constant"):   # a previous fit's
            self.__dict__.pop(name, None)
        qlam = float(lam @ q @ lam)
        radius = math.sqrt(max(float(np.max(np.diag(gram))), 0.0))
        if status == "infeasible":
            bound = 0.0 if radius == 0 or lam.sum() <= 0 else math.sqrt(max(qlam, 0.0)) / (lam.sum() * radius)
            cert = {"primal_objective": float("inf"), "dual_objective": float(lam.sum() ** 2 / qlam) if qlam > 0
                    else float("inf"), "rel_gap": float("nan"), "min_margin": float("nan"),
                    "relative_margin_bound": float(bound), "iterations": it, "tolerance": tol,
                    "certified": bool(bound <= NOT_SEPARABLE)}
            _inseparable(self, f"the training data is not separable by this kernel ({self.kernel}) with a hard "
                         "margin and no bias: the program has no solution", classes, ypm, cert, lam)
            self.X_fit_ = X
            return self
        alpha = s[0] * lam * ypm
        margins = ypm * (gram @ alpha)
        if margins.min() > 0:   # rescale to smallest margin exactly 1 (as the dual solver does)
            alpha = alpha / margins.min()
            margins = margins / margins.min()
        primal = float(alpha @ gram @ alpha)
        dual = float(lam.sum() ** 2 / qlam) if qlam > 0 else float("nan")
        gap = relative_gap(primal, dual, radius, True)
        self.certificate_ = {"primal_objective": primal, "dual_objective": dual, "rel_gap": gap,
                             "min_margin": float(margins.min()), "iterations": it, "tolerance": tol,
                             "certified": bool(abs(gap) <= tol and margins.min() >= 1 - tol)}
        status = certified_status(status, self.certificate_["certified"])
        self.status_, self.message_, self.lam_, self.alpha_, self.objective_ = status, message, lam, alpha, primal
        self.support_ = np.flatnonzero(lam > SUPPORT * lam.max())
        self.dual_coef_ = alpha[self.support_][None, :]
        self.classes_, self.X_fit_, self.n_iter_ = classes, X, it
        if self.kernel == "linear":
            self.coef_ = (alpha @ X)[None, :]
        _warn_inexact(self, status, message)
        return self

    def decision_function(self, X):
        """f(x) = sum_n alpha_n k(x_n, x); when fitted infeasible, the majority_ class's +1 or -1."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        if _no_predictor(self):
            return np.full(X.shape[0], self._constant)
        return self._gram(X, self.X_fit_) @ self.alpha_

    def predict(self, X):
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) > 0).astype(int)]

    def score(self, X, y, sample_weight=None):
        return _score(self, y, self.predict(X), sample_weight)


class GroupNormSVM(ClassifierMixin, BaseEstimator):
    """The group-norm program min sum_g ||zeta_g||_F s.t. y_n f(x_n) >= 1, f(x_n) = sum_r E[n, r] <zeta_r, x_n>.

    Gates E: `gates` (N, R), `contexts` (N, H) ints in [0, count) one-hot encoded, or neither (linear),
    as keyword arguments (metadata routing) or in X's last `context_columns` / `gate_columns` columns
    (give `count` then). groups: "units" (the svm-gln norm), None (one per gate column) or a partition.
    """

    def __init__(self, groups="units", tol=1e-6, max_iter=None, solver="dual", context_columns=None,
                 gate_columns=None, count=None, on_inseparable="warn"):
        self.groups = groups
        self.tol = tol
        self.max_iter = max_iter
        self.solver = solver
        self.context_columns = context_columns
        self.gate_columns = gate_columns
        self.count = count
        self.on_inseparable = on_inseparable

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _gates(self, n, gates, contexts, count, fitting):
        """(E, H, C, mode): n points' gates, units, contexts per unit, and "gates" | "contexts" | "constant"."""
        if gates is not None and contexts is not None:
            raise ValueError("pass gates or contexts, not both")
        if fitting and count is not None and contexts is None:
            raise ValueError("count is the number of contexts per unit: it goes with contexts")
        mode = "gates" if gates is not None else "contexts" if contexts is not None else "constant"
        if not fitting and mode != self.gate_mode_:
            raise ValueError(f"{type(self).__name__} was fitted with {self.gate_mode_} gating, "
                             f"so decision_function needs the same ({mode} given)")
        if mode == "constant":
            return constant_gates(n), 1, 1, mode
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
            if ctx.size * count > MAX_GATE_ENTRIES:   # refused before numpy tries to allocate it
                raise ValueError(f"count={count}: the one-hot gating of {ctx.shape[0]} rows x {ctx.shape[1]} units "
                                 f"x {count} contexts would hold {ctx.size * count:.3g} entries (at most "
                                 f"{MAX_GATE_ENTRIES:.3g}, {MAX_GATE_ENTRIES * 8 / 2 ** 30:.0f} GiB)")
            e = one_hot(ctx, count)
            units = ctx.shape[1]
        if e.shape[0] != n:
            raise ValueError(f"{mode} has {e.shape[0]} rows but X has {n}")
        if not fitting and e.shape[1] != self.n_gates_:
            raise ValueError(f"{mode} gives {e.shape[1]} gate columns, the fit had {self.n_gates_}")
        return e, units, count, mode

    def _columns(self) -> tuple[str | None, int]:
        """("contexts" | "gates" | None, k): which gates travel in the last k columns of X."""
        for param in ("context_columns", "gate_columns"):
            _check_count(self, param, getattr(self, param))
        if self.context_columns is not None and self.gate_columns is not None:
            raise ValueError(f"{type(self).__name__}: set context_columns or gate_columns, not both")
        kind = "contexts" if self.context_columns is not None else "gates" if self.gate_columns is not None else None
        return kind, int(self.context_columns or self.gate_columns or 0)

    def _split(self, X, gates, contexts):
        """(features, gates, contexts): the gates travelling in X's last columns split off."""
        kind, k = self._columns()
        if kind is None:
            return X, gates, contexts
        if gates is not None or contexts is not None:
            raise ValueError(f"{type(self).__name__}: the {kind} travel in X ({kind[:-1]}_columns={k}); "
                             "do not pass gates= or contexts= as well")
        if k >= X.shape[1]:
            raise ValueError(f"{type(self).__name__}: {kind[:-1]}_columns={k} leaves no features in X's "
                             f"{X.shape[1]} columns")
        features, tail = X[:, :-k], X[:, -k:]
        return (features, tail, None) if kind == "gates" else (features, None, tail)

    def fit(self, X, y, gates=None, contexts=None, count=None):
        from gbcli.programs.solvers import SOLVERS

        tol, max_iter = _check_common(self)
        self._columns()
        _check_count(self, "count", self.count)
        X, y = validate_data(self, X, y, dtype=np.float64)
        classes, ypm = _binary_labels(self, y)
        able = [n for n, s in SOLVERS.items() if "group" in s.norms]
        if not isinstance(self.solver, str) or self.solver not in able:
            raise ValueError(f"solver must be one of {able}, got {self.solver!r}")
        X, gates, contexts = self._split(X, gates, contexts)
        X = np.ascontiguousarray(X) if X.flags.writeable else X.copy()   # torch wants writable arrays
        count = self.count if count is None else count   # `_gates` refuses a count without contexts
        e, units, count, mode = self._gates(len(X), gates, contexts, count, fitting=True)
        rows = e.shape[1]
        if isinstance(self.groups, str):
            if self.groups != "units":
                raise ValueError(f"groups must be 'units', None or a list of index arrays, got {self.groups!r}")
            groups = unit_groups(units, count) if mode == "contexts" else singleton_groups(rows)
        elif self.groups is None:
            groups = singleton_groups(rows)
        else:
            groups = [np.asarray(g, dtype=np.int64).reshape(-1) for g in self.groups]
            flat = np.concatenate(groups) if groups else np.array([], dtype=np.int64)
            if len(flat) != rows or not np.array_equal(np.sort(flat), np.arange(rows)):
                raise ValueError(f"groups must partition the {rows} gate columns (each column in exactly one group)")
        design = GatedDesign(X, ypm, e, X[:0], e[:0], "group", groups, units, count)
        sol = SOLVERS[self.solver].solve(design, max_iter, tol)
        for name in ("zeta_", "majority_"):   # a previous fit's, which this fit may not set
            self.__dict__.pop(name, None)
        self.gate_mode_, self.groups_, self.count_, self.n_gates_ = mode, groups, count, e.shape[1]
        cert = certificate(design, sol, tol)
        if sol.zeta is None:
            if sol.status == "infeasible":
                _inseparable(self, f"no hard-margin solution with these gates: {sol.message}", classes, ypm, cert,
                             sol.lam)
                return self
            raise ValueError(f"the {self.solver} solver failed ({sol.status}): {sol.message}")
        self.classes_, self.zeta_, self.lam_, self.objective_ = classes, sol.zeta, sol.lam, sol.value
        self.certificate_, self.status_ = cert, certified_status(sol.status, cert["certified"])
        self.message_, self.n_iter_ = sol.message, sol.iterations
        _warn_inexact(self, self.status_, sol.message)
        return self

    def decision_function(self, X, gates=None, contexts=None):
        """f(x) = sum_r E[x, r] <zeta_r, x>, gates as in fit; fitted infeasible: the majority_ class's +1 or -1."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        X, gates, contexts = self._split(X, gates, contexts)
        e = self._gates(len(X), gates, contexts, None, fitting=False)[0]
        if _no_predictor(self):
            return np.full(X.shape[0], self._constant)
        return decision(self.zeta_, X, e)

    def predict(self, X, gates=None, contexts=None):
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X, gates, contexts) > 0).astype(int)]

    def score(self, X, y, sample_weight=None, gates=None, contexts=None):
        return _score(self, y, self.predict(X, gates, contexts), sample_weight)
