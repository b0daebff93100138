"""Paper 001's one-class programs `svm-pos` / `svm-neg` (the max-margin directions w+ / w- of the
positives / negatives alone), declared by `relu` and `residual`; their instruments are in
`gbcli.experiments.paper001`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gbcli.errors import GbError
from gbcli.models.base import Problem, Program

if TYPE_CHECKING:
    from gbcli.programs.design import GatedDesign


def one_class_design(sign: float):
    """svm-pos (sign +1): w+ = argmin ||w|| s.t. <w, x_n> >= 1 on the positives only; svm-neg: w- on the
    negatives, with label and gate -1 so that its decision -<w-, x> classifies the task as <w+, x> does
    (errors: that classifier's over every training and validation point)."""
    name = "svm-pos" if sign > 0 else "svm-neg"

    def design(cfg, problem: Problem, trained=None) -> GatedDesign:
        from gbcli.programs.design import GatedDesign

        ds = problem.dataset
        xs = ds.x_train[ds.y_train == sign]
        if not len(xs):
            raise GbError(f"svm.objectives: {name} needs training points with label {sign:+.0f}, there are none")
        return GatedDesign(xs, np.full(len(xs), sign), np.full((len(xs), 1), sign), ds.x_val,
                           np.full((len(ds.x_val), 1), sign), "sq",
                           classify=(ds.x_train, np.full((len(ds.x_train), 1), sign), ds.y_train))

    return design


PROGRAMS = {"svm-pos": Program("svm-pos", "sq", one_class_design(1.0), description="w+: max margin on the positives"),
            "svm-neg": Program("svm-neg", "sq", one_class_design(-1.0), description="w-: max margin on the negatives")}
