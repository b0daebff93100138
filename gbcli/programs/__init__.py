"""Convex max-margin programs: designs, norms, certificates and solvers (protocol sections 5-6).

- `design`: the data of a program (`GatedDesign`) and what a solver returns (`Solution`);
- `norms`: one class per norm (value, dual norm, radius, cvxpy form, kernel, recovery);
- `ipm`: our interior-point method on the multiple-kernel dual (the bare algorithm);
- `workingset`: the certified working-set method around it (large N: O(|W|^2 + N D) memory);
- `certify`: the certificate every answer gets, whatever solver produced it;
- `solvers`: registered solver classes that declare the norms they solve;
- `estimators`: scikit-learn-style estimators over these, usable on any data without a config.

Which design a program has is declared by the model it describes (`gbcli.models`).
"""

from gbcli.lazy import attach

# what each name is imported from, on first use (PEP 562): `gb compare` and the store need the
# status enums of `design` without loading torch, which the interior-point method imports
_HOME = {
    "certify": ["CERTIFY_TOL", "certificate", "dual_bound", "input_radius", "relative_margin_bound"],
    "design": ["GatedDesign", "Solution", "combination", "decision", "margin_matrix", "reference_groups",
               "unit_groups"],
    "ipm": ["NOT_SEPARABLE"],
    "norms": ["NORMS", "context_mean", "context_pinv", "count_groups_matrix", "l2_root", "norm_of", "norm_value",
              "reference_matrix", "reference_null_and_pinv"],
    "solvers": ["SOLVERS", "check_solver", "default_solver", "solve"],
    "solvers.dual": ["solve_dual"],
}
__getattr__, __dir__ = attach(globals(), {name: f"{__name__}.{module}" for module, names in _HOME.items()
                                           for name in names})


def solve_primal(design, solver: str, max_iters: int | None = None, eps: float | None = None):
    """Solve the program in primal form through cvxpy (`solver`: ecos, osqp, clarabel or scs)."""
    from gbcli.programs.solvers import SOLVERS
    return SOLVERS[solver].solve(design, max_iters, eps)


__all__ = sorted([name for names in _HOME.values() for name in names] + ["solve_primal"])
