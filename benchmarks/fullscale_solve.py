"""Benchmark: one program of `configs/fullscale.yaml` solved by the dual through its working set,
with a line per round (working-set size, Newton steps, seconds, violators) and a JSON summary.

    GB_DATA_DIR=../shared/data .venv/bin/python benchmarks/fullscale_solve.py \
        --objective svm-gln --hidden-units 10 --seed 1 [--train-size 48000]

The programs are those of `results/fullscale/` (published context draws, median init, C = 2):
H = 10 at N = 48,000 is the nearly inseparable case (optimum 8414 for svm-gln at seed 1, against
about 20 at H = 50). One torch and one BLAS thread; `cpu_seconds` is the process's CPU time
(time.process_time), the cost of the work on an idle core even when the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def wrap_rounds(out: Path | None, resume: Path | None = None, through: int = 0) -> None:
    """Wrap the working set's round solver. `out`: each round's W (indices), lam on W (and its low
    halves when the interior-point method kept it as a double-double) and s are saved as
    out/round-K.npz, the state a study of one round starts from without re-running the ones
    before. `resume`, `through`: rounds 1..through are not solved but read from resume/round-K.npz
    (each round's W must be the saved one: the bookkeeping of added and dropped points is the
    solver's own), and the rounds after them are solved from there, warm started as usual."""
    import numpy as np

    from gbcli.programs import workingset
    from gbcli.programs.exact import double_double

    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    inner, rounds, current = workingset.solve_working_set, [0], {}
    subset = workingset.subset

    def recording_subset(design, w):
        current["w"] = np.asarray(w)
        return subset(design, w)

    def wrapped(design, solve_on, tol, finish=None):
        def recorded(sub, sub_tol, start=None):
            rounds[0] += 1
            if rounds[0] <= through:
                with np.load(resume / f"round-{rounds[0]}.npz") as z:
                    if not np.array_equal(z["w"], current["w"]):
                        raise SystemExit(f"round {rounds[0]}: the working set differs from {resume}'s")
                    print(f"  round {rounds[0]} read from {resume}", flush=True)
                    lam, s = (None if z[k].size == 0 else z[k] for k in ("lam", "s"))
                    if lam is not None and "lam_lo" in z.files and z["lam_lo"].size:   # a double-double
                        lam = double_double(lam, z["lam_lo"])
                    return str(z["status"]), str(z["message"]), lam, s, 0
            status, message, lam, s, it = solve_on(sub, sub_tol, start)
            if out is not None:
                lo = getattr(lam, "lo", None)   # the low halves of a double-double lam (ipm), kept
                np.savez(out / f"round-{rounds[0]}.npz", w=current["w"], lam=np.zeros(0) if lam is None else lam,
                         lam_lo=np.zeros(0) if lo is None else lo, s=np.zeros(0) if s is None else s,
                         status=status, message=message)
            return status, message, lam, s, it
        return inner(design, recorded, tol, finish)

    workingset.subset, workingset.solve_working_set = recording_subset, wrapped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objective", default="svm-gln", choices=["svm-gln", "svm-l2"])
    ap.add_argument("--hidden-units", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1, help="context seed (the published draws)")
    ap.add_argument("--train-size", type=int, default=48000)
    ap.add_argument("--max-iters", type=int, default=None, help="interior-point iterations a round (default: the solver's)")
    ap.add_argument("--trace", action="store_true", help="a line per interior-point iterate (gbcli.programs.ipm.TRACE)")
    ap.add_argument("--save-rounds", type=Path, default=None,
                    help="directory: each round's working set, multipliers and s as round-K.npz")
    ap.add_argument("--resume", type=Path, default=None, metavar="DIR",
                    help="a --save-rounds directory: take its rounds 1..--through instead of solving them")
    ap.add_argument("--through", type=int, default=0, help="with --resume: the last round read")
    ap.add_argument("--plain-products", action="store_true",
                    help="plain float64 products, float64 multipliers and unrefined Newton directions "
                         "(ipm.EXACT = False), to compare")
    ap.add_argument("--save-solution", type=Path, default=None, metavar="FILE",
                    help="the answer as FILE (.npz: zeta, lam, status, message, seconds, iterations)")
    args = ap.parse_args()

    from gbcli.config import load_config
    from gbcli.programs import certificate, solve_dual
    from gbcli.runs.stages import build_design, prepare
    from gbcli.runs.sweep import limit_threads

    limit_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    cfg = load_config(ROOT / "configs" / "fullscale.yaml", (
        f"model.hidden_units={args.hidden_units}", f"contexts.seed={args.seed}",
        f"dataset.train_size={args.train_size}", f"svm.objectives=[{args.objective}]"))
    design = build_design(args.objective, cfg, prepare(cfg), None)
    if args.trace:
        from gbcli.programs import ipm

        ipm.TRACE = lambda d: print("    iterate " + " ".join(
            f"{k}={v:.3e}" if isinstance(v, float) else f"{k}={v}" for k, v in d.items()), flush=True)
    if args.plain_products:
        from gbcli.programs import ipm

        ipm.EXACT = False
    if args.save_rounds is not None or args.resume is not None:
        wrap_rounds(args.save_rounds, args.resume, args.through)
    cpu, wall = time.process_time(), time.perf_counter()
    sol = solve_dual(design, max_iters=args.max_iters, working_set=True)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    cert = certificate(design, sol)
    if args.save_solution is not None:
        import numpy as np

        np.savez(args.save_solution, zeta=np.zeros(0) if sol.zeta is None else sol.zeta,
                 lam=np.zeros(0) if sol.lam is None else sol.lam, status=sol.status, message=sol.message,
                 seconds=sol.seconds, iterations=sol.iterations)
    print(json.dumps({"objective_name": args.objective, "hidden_units": args.hidden_units, "seed": args.seed,
                      "train_size": args.train_size, "status": sol.status, "cpu_seconds": round(cpu, 1),
                      "wall_seconds": round(wall, 1), "objective": sol.value, "rel_gap": cert["rel_gap"],
                      "min_margin": cert["min_margin"], "certified": cert["certified"],
                      "newton_steps": sol.iterations, "message": sol.message}), flush=True)


if __name__ == "__main__":
    main()
