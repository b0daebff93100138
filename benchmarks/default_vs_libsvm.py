"""Benchmark: the default `fit-svm` solve against libsvm (scikit-learn's SVC) at tol = 1e-6, same run.

    GB_DATA_DIR=../shared/data OMP_NUM_THREADS=1 .venv/bin/python benchmarks/default_vs_libsvm.py

For each (H, C, N) the svm-l2 program of a deep GLN (configs/mnist-gln-small.yaml with those
settings, MNIST) is built once; then, interleaved and repeated (`--repeat`, the fastest kept):

- `default`: what `gb fit-svm` runs, `SOLVERS["dual"].solve(design)` (the working set or the plain
  interior-point method, as `workingset.WORKING_SET_ABOVE` decides), and also each path forced
  (`plain`, `working-set`), so the threshold can be chosen by measurement;
- `svc`: `SVC(kernel="precomputed", C=1e10, tol=1e-6)` on the program's kernel (the one the dual
  solver builds, `kernel_problem`), on the doubled set {(x, y), (-x, -y)} whose optimal bias is 0
  (the program has no bias); kernel construction included.

Every answer is judged by our certificate (`gbcli.programs.certify.certificate`). Seconds are wall
and CPU seconds of this process (one thread); the ratio is svc / default (above 1: the default is
faster).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = ["50,2,2000", "100,4,2000"]


def design_of(h: int, c: int, n: int):
    from gbcli.config import load_config
    from gbcli.runs.stages import build_design, prepare

    cfg = load_config(ROOT / "configs" / "mnist-gln-small.yaml", (
        f"name=bench-{h}-{c}-{n}", "model.kind=gln", f"model.hidden_units={h}", f"contexts.count={c}",
        f"dataset.train_size={n}", "svm.objectives=[svm-l2]"))
    return build_design("svm-l2", cfg, prepare(cfg))


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def svc(design, tol: float):
    from sklearn.svm import SVC

    from gbcli.programs import Solution
    from gbcli.programs.design import combination, decision
    from gbcli.programs.norms import norm_of

    from gbcli.programs.solvers.dual import kernel_problem

    x, e, y = design.x_train, design.e_train, design.y_train
    k = kernel_problem(design).ky.numpy()
    k *= y[:, None] * y[None, :]          # Ky = yy' o K -> K
    big = np.block([[k, -k], [-k, k]])
    fit = SVC(kernel="precomputed", C=1e10, tol=tol, max_iter=-1, cache_size=2000).fit(big, np.concatenate([y, -y]))
    alpha = np.zeros(2 * len(y))
    alpha[fit.support_] = np.abs(fit.dual_coef_[0])
    lam = alpha[:len(y)] + alpha[len(y):]
    norm = norm_of(design)
    zeta = norm.recover(design, combination(design, lam), np.ones(1))
    m = decision(zeta, x, e) * y
    zeta = zeta / m.min()
    return Solution(zeta, "unchecked", norm.value(design, zeta), 0.0, "svc", lam=lam)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=SIZES, help="H,C,N triples")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--svc-tol", type=float, default=1e-6)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from gbcli.programs.certify import certificate
    from gbcli.programs.solvers import SOLVERS
    from gbcli.programs.workingset import WORKING_SET_ABOVE

    print(f"working set above N = {WORKING_SET_ABOVE}; svc tol = {args.svc_tol:g}; fastest of {args.repeat}")
    print("| H, C, N | solver | certified | rel gap | objective | wall s | CPU s | svc CPU / this CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        h, c, n = map(int, size.split(","))
        design = design_of(h, c, n)
        runs = {"default": lambda: SOLVERS["dual"].solve(design),
                "plain": lambda: SOLVERS["dual"].solve(design, working_set=False),
                "working-set": lambda: SOLVERS["dual"].solve(design, working_set=True),
                "svc": lambda: svc(design, args.svc_tol)}
        best: dict[str, tuple] = {}
        for _ in range(args.repeat):
            for name, fn in runs.items():   # interleaved: a slow spell of the machine hits every solver
                sol, wall, cpu = timed(fn)
                if name not in best or cpu < best[name][2]:
                    best[name] = (sol, wall, cpu)
        svc_cpu = best["svc"][2]
        for name, (sol, wall, cpu) in best.items():
            cert = certificate(design, sol)
            print(f"| {h}, {c}, {n} | {name} | {cert['certified']} | {cert['rel_gap']:.1e} | {sol.value:.7g} | "
                  f"{wall:.2f} | {cpu:.2f} | {svc_cpu / cpu:.2f} |", flush=True)


if __name__ == "__main__":
    main()
