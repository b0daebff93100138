"""Convex max-margin programs (protocol sections 5-6): `design`, `norms`, the interior-point method
(`ipm`) and its working set, `certify`, the registered `solvers` and scikit-learn `estimators`.
"""

from gbcli.lazy import attach

# each name's module, imported on first use (PEP 562): the store reads `design` without loading torch
_HOME = {
    "certify": ["certificate", "relative_margin_bound"],
    "design": ["GatedDesign", "Solution", "combination", "decision", "reference_groups", "unit_groups"],
    "norms": ["NORMS", "context_mean", "count_groups_matrix", "norm_of", "reference_matrix"],
    "solvers": ["SOLVERS", "solve"],
    "solvers.dual": ["solve_dual"],
    "solvers.registered": ["solve_primal"],
}
__getattr__, __dir__ = attach(globals(), {name: f"{__name__}.{module}" for module, names in _HOME.items()
                                           for name in names})
__all__ = sorted(name for names in _HOME.values() for name in names)
