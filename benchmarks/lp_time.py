"""How long HiGHS takes on a GLN's l-infinity LP (svm-gln-linf) as N grows: MNIST 0-4 against 5-9,
H = 20 units, C = 2 contexts, one thread, each of HiGHS's methods (dual simplex, interior point with
crossover). Prints one row per (N, method): status, iterations, seconds, the certificate's relative gap.

    GB_DATA_DIR=../shared/data python benchmarks/lp_time.py --sizes 250 500 --methods highs-ds highs-ipm
"""

from __future__ import annotations

import argparse
import time
from unittest import mock

import scipy.optimize

from gbcli.config import validate
from gbcli.programs.certify import certificate
from gbcli.programs.solvers.lp import Highs
from gbcli.runs.stages import build_design, prepare
from gbcli.runs.threads import limit_threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[250, 500])
    ap.add_argument("--methods", nargs="+", default=["highs-ds", "highs-ipm"])
    ap.add_argument("--units", type=int, default=20)
    a = ap.parse_args()
    limit_threads(1)
    linprog = scipy.optimize.linprog
    print("| N | method | status | iterations | seconds | rel gap |\n|---|---|---|---|---|---|")
    for n in a.sizes:
        cfg = validate({"dataset": {"name": "mnist", "train_size": n, "val_size": 200},
                        "model": {"kind": "gln", "hidden_units": a.units, "output_bias": False},
                        "contexts": {"count": 2}})
        design = build_design("svm-gln-linf", cfg, prepare(cfg))
        for method in a.methods:
            # the solver asks for "highs-ipm"; here each method is named
            with mock.patch("scipy.optimize.linprog", lambda *p, **k: linprog(*p, **{**k, "method": method})):
                start = time.perf_counter()
                sol = Highs().solve(design)
                seconds = time.perf_counter() - start
            gap = certificate(design, sol)["rel_gap"]
            print(f"| {n} | {method} | {sol.status} | {sol.iterations} | {seconds:.1f} | {gap:.1e} |", flush=True)


if __name__ == "__main__":
    main()
