"""Benchmark: the quadratic programs' working-set rounds by the active-set method against the
interior-point method (issue 26).

    GB_DATA_DIR=../shared/data OMP_NUM_THREADS=1 .venv/bin/python benchmarks/active_set_rounds.py --sizes 50,2,10000 10,2,10000

For each (H, C, N) the svm-l2 program of a deep GLN on MNIST (as `default_vs_libsvm.py` builds it)
is solved by the default dual solver (the working set above N = 3000) with the active-set method
on, then off (`DualSolver.solve(use_active_set=False)`), one thread; CPU seconds, our certificate's
relative gap, the objective and the rounds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from default_vs_libsvm import design_of, timed   # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["50,2,10000", "10,2,10000"], help="H,C,N triples")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from gbcli.programs.certify import certificate
    from gbcli.programs.solvers import SOLVERS

    print("| H, C, N | active set | certified | rel gap | objective | CPU s | rounds |")
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes:
        h, c, n = map(int, size.split(","))
        design = design_of(h, c, n)
        for on in (True, False):
            sol, _, cpu = timed(lambda: SOLVERS["dual"].solve(design, use_active_set=on))
            cert = certificate(design, sol)
            rounds = sol.message.split("(rounds: ")[-1].removesuffix(")") if "(rounds: " in sol.message else sol.message
            print(f"| {h}, {c}, {n} | {'on' if on else 'off'} | {cert['certified']} | {cert['rel_gap']:.1e} | "
                  f"{sol.value:.10g} | {cpu:.2f} | {rounds} |", flush=True)


if __name__ == "__main__":
    main()
