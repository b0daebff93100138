"""The dual (kernel) solver (protocol section 6): every program as a group-norm program, solved on its
dual max 1'lam s.t. lam' Q_g lam <= 1, lam >= 0, Q_g = (yy' o K) o (E_g E_g') (quadratic norms: G = 1).
The norm supplies the kernel and the primal recovery zeta_g = s_g V_g, V = E' diag(lam o y) X, which is
rescaled by its smallest margin.
"""

from __future__ import annotations

import time
import weakref

import numpy as np
import torch
from scipy.optimize import nnls

from gbcli.programs.certify import CERTIFY_TOL, relative_margin_bound
from gbcli.programs.design import GatedDesign, Solution, Stop, combination, decision
from gbcli.programs.ipm import POLISHED, Kernel, Outcome, interior_point, polish
from gbcli.programs.norms import NORMS, norm_of
from gbcli.programs import workingset
from gbcli.programs.active_set import active_set
from gbcli.programs.solvers import Solver
from gbcli.programs.solvers.primal import CLARABEL

POLISH_MAX_FEATURES = 4000   # NNLS on a (features x N) matrix: cheap for svm-hl / svm-gates (H <= 100)


def kernel_problem(design: GatedDesign, device: str = "cpu") -> Kernel:
    """The interior-point method's kernel through the norm's kernel form, with the features y_n x_n."""
    t = lambda a: torch.as_tensor(np.array(a, dtype=np.float64, order="C"), device=device)   # a copy: inputs may be read-only
    e = t(design.e_train)
    xy, ky = _linear_kernel(design.x_train, design.y_train, device)
    norm = norm_of(design)
    out = norm.kernel(design, ky, e)
    if out is None:
        raise ValueError(f"the dual solver does not cover norm {design.norm!r}")
    metric = norm.gate_metric(design)
    fold = None if metric is None else (e, t(metric))
    return Kernel(*out, features=xy, fold=fold)


def primal_products(design: GatedDesign, grp: Kernel):
    """(lam, s) -> (margins, lam'Q_g lam per group) through the primal in long double (the polish's)."""
    norm = norm_of(design)

    def products(lam: np.ndarray, s: np.ndarray):
        v = combination(design, lam, precise=True)
        m = decision(norm.recover(design, v, np.asarray(s, np.longdouble)), design.x_train, design.e_train) * design.y_train
        f = [np.sum(v[g] ** 2) for g in design.groups] if grp.e is not None else [norm.dual(design, v) ** 2]
        return np.asarray(m, np.float64), np.asarray(f, np.float64)
    return products


_KERNEL: list = []   # [(weakref x, weakref y, device, xy, ky)]: the last linear kernel built
KERNEL_CACHE_MAX = 6000   # points: a kept N x N kernel costs 8 N^2 bytes (288 MB at 6000)


def _linear_kernel(x: np.ndarray, y: np.ndarray, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(xy, Ky) = (diag(y) X, yy' o XX'), Ky the caller's; the last kernel of read-only inputs is kept."""
    if _KERNEL:
        rx, ry, dev, xy, ky = _KERNEL[0]
        if rx() is x and ry() is y and dev == device:
            return xy, ky.clone()
    xy = torch.as_tensor(np.array(x, dtype=np.float64, order="C"), device=device)
    xy.mul_(torch.tensor(np.asarray(y, dtype=np.float64), device=device)[:, None])
    ky = xy @ xy.T
    _KERNEL.clear()
    if not x.flags.writeable and not y.flags.writeable and len(x) <= KERNEL_CACHE_MAX:
        _KERNEL.append((weakref.ref(x), weakref.ref(y), device, xy, ky.clone()))
    return xy, ky


def dual_memory(n: int, norm: str) -> int:
    """Bytes of the dual solver's largest arrays: three N x N float64, or |W| x |W| for the first working set."""
    if NORMS[norm].has_reduction or n <= workingset.WORKING_SET_ABOVE:
        return 3 * 8 * n * n
    return 3 * 8 * min(n, workingset.START) ** 2


def polish_ray(design: GatedDesign, lam: np.ndarray) -> np.ndarray:
    """The better of lam and the NNLS ray min ||sum_n lam_n y_n phi_n|| over the simplex (feature space)."""
    n, r = design.e_train.shape
    if r * design.x_train.shape[1] > POLISH_MAX_FEATURES:
        return lam
    phi = (design.e_train[:, :, None] * design.x_train[:, None, :]).reshape(n, -1) * design.y_train[:, None]
    rho = float(np.abs(phi).max()) or 1.0
    a = np.vstack([phi.T, np.full((1, n), rho)])
    b = np.append(np.zeros(len(a) - 1), rho)
    polished, _ = nnls(a, b, maxiter=50 * n)
    if not polished.any():
        return lam
    return min((lam, polished), key=lambda v: relative_margin_bound(design, v))


def recover(design: GatedDesign, out: Outcome, seconds: float) -> Solution:
    """zeta from (lam, s), rescaled to margin 1."""
    norm = norm_of(design)
    lam = out.lam
    zeta = norm.predictor(design, lam, out.s, precise=out.stop is Stop.POLISHED or getattr(lam, "lo", None) is not None)
    m = decision(zeta, design.x_train, design.e_train) * design.y_train
    if m.min() > 0:   # the stopping test assumed this rescaling (it may scale up as well as down)
        zeta = zeta / m.min()
    return Solution(zeta, out.status, norm.value(design, zeta), seconds, "dual", out.message,
                    iterations=out.iterations, lam=np.asarray(lam, np.float64), stop=out.stop)   # a polished lam is long double


class DualSolver(Solver):
    """Our interior-point method on the N-dimensional dual: certified, the default."""

    name = "dual"   # its iteration limit is the interior-point method's (ipm.MAX_ITERS)
    norms = frozenset({"sq", "l2", "group", "l2-reference"})
    honours = frozenset({"device", "time_limit", "checkpoint", "stop"})

    def solve(self, design, max_iters=None, eps=None, device: str | None = None,
              working_set: bool | None = None, time_limit: float | None = None,
              checkpoint: tuple | None = None, through: int | None = None, stop=None,
              use_active_set: bool = True) -> Solution:
        """working_set: None uses it above WORKING_SET_ABOVE points; device: default cpu; time_limit:
        seconds, then `inaccurate` with its bounds; checkpoint, through, stop: `workingset.solve_working_set`'s;
        use_active_set: False skips the quadratic programs' active-set method."""
        tol = CERTIFY_TOL if eps is None else eps
        device = device or "cpu"
        deadline = None if time_limit is None else time.monotonic() + time_limit
        norm = norm_of(design)
        start = time.perf_counter()

        def answer(status, message, zeta, lam, iterations, stop) -> Solution:
            seconds = time.perf_counter() - start
            value = float("nan") if zeta is None else norm.value(design, zeta)
            return Solution(zeta, status, value, seconds, "dual", message, iterations=iterations, lam=lam, stop=stop)

        if norm.has_reduction:   # an exact route of the norm's own (svm-l2-reference)
            reduced = norm.solve_reduced(design, tol, max_iters, device)
            if reduced is None:   # the reduction does not apply: the general program, in primal form
                sol = CLARABEL.solve(design)
                sol.message = ("the free points' null-space features are dependent, so the reduction does not "
                               "apply: solved in primal form with Clarabel" + (f"; {sol.message}" if sol.message else ""))
                return sol
            return answer(*reduced)

        def finish(sub: GatedDesign, got: Outcome, sub_tol: float, grp: Kernel | None = None) -> Outcome | None:
            grp = grp if grp is not None else kernel_problem(sub, device)
            done = polish(grp, got.lam, got.s, norm.quadratic, primal_products(sub, grp))
            if done is None:
                return None
            lam, s, gap = done
            return Outcome("optimal" if gap <= sub_tol else "inaccurate",
                           f"{POLISHED} to a relative gap of {gap:.1e} (the interior-point method {got.message})",
                           lam, s, got.iterations, Stop.POLISHED)

        def solve_on(sub: GatedDesign, sub_tol: float, start=None):
            grp = kernel_problem(sub, device)
            if norm.quadratic and use_active_set:   # a round's guess: the previous support and its violators
                guess = None if start is None else (np.asarray(start[0]) > 0) | (np.asarray(start[1]) <= 0)
                done = active_set(grp, sub_tol, deadline, guess, max_iters)
                if done is not None:
                    return done
            got = interior_point(grp, norm.quadratic, sub_tol, max_iters, start=start, deadline=deadline)
            if got.status == "infeasible":
                got = got._replace(lam=polish_ray(sub, got.lam))
            elif got.status == "inaccurate" and got.s is not None and got.stop is Stop.STALLED:
                got = finish(sub, got, sub_tol, grp) or got
            return got

        if working_set is None:   # above the threshold, N x N arrays cost more than a working set's rounds
            working_set = len(design.y_train) > workingset.WORKING_SET_ABOVE
        if working_set:
            return workingset.solve_working_set(design, solve_on, finish, answer, tol, checkpoint, deadline, through,
                                                stop)
        got = solve_on(design, tol)
        if got.s is None:   # infeasible (lam is the dual ray that certifies it) or failed
            return answer(got.status, got.message, None, got.lam, got.iterations, got.stop)
        return recover(design, got, time.perf_counter() - start)


def solve_dual(design: GatedDesign, tol: float | None = None, max_iters: int | None = None,
               device: str | None = None, working_set: bool | None = None, time_limit: float | None = None,
               checkpoint: tuple | None = None, use_active_set: bool = True) -> Solution:
    """Solve the program through its dual; never raises on numerical trouble (see `status`)."""
    return DualSolver().solve(design, max_iters, tol, device, working_set, time_limit, checkpoint,
                              use_active_set=use_active_set)
