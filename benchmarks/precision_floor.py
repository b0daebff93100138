"""Benchmark: the dual solver's floor on nearly inseparable programs, on a family whose optimum is
known (issue 13: seed 3 at H = 10, N = 48,000, whose working set bounds every separating
predictor's relative margin by ~2.5e-9).

    .venv/bin/python benchmarks/precision_floor.py [--eps 1e-5,1e-6,1e-7,1e-8,1e-9] [--points 300]

The program: svm's squared l2 norm (one always-on gate) on --points points in 3 dimensions, of which
x_1 = (1, 0, 0) and x_2 = (-1, eps, 0), both labelled +1, and the rest random points that the
optimum separates easily. Any separating w needs w_1 >= 1 and eps w_2 >= 1 + w_1, so the optimum
is ||w||^2 = 1 + 4 / eps^2 (the easy points do not bind; checked against the certificate), and the
relative margin 1 / (||w|| radius) is ~eps / 2. The multipliers' combination V cancels ~1/eps-fold
and the Newton matrix's smallest useful eigenvalue is ~eps^2 of its largest. For each eps, one line
per mode (--modes): plain float64 feature-space products (ipm.EXACT = False), products rounded once
(ipm.EXACT, above ipm.EXACT_ABOVE, with the double-double multipliers and GMRES-refined Newton
directions that come with them: the solver's default), or unrefined (the same without GMRES,
ipm.REFINE = False): status, Newton steps, relative gap, the objective against
1 + 4 / eps^2, and whether the certificate holds. Writes nothing; one thread.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eps", default="1e-4,1e-5,1e-6,1e-7,1e-8,1e-9")
    ap.add_argument("--points", type=int, default=300)
    ap.add_argument("--modes", default="plain,rounded once",
                    help="of: plain (ipm.EXACT = False), rounded once (the solver's default), "
                         "unrefined (rounded once and double-doubles, ipm.REFINE = False)")
    args = ap.parse_args()

    from gbcli.programs import certificate, ipm, solve_dual
    from gbcli.runs.sweep import limit_threads
    from tests.test_exact import near_inseparable   # the family, also the test's

    limit_threads(1)
    print("| eps | relative margin | products | status | Newton steps | relative gap | objective / (1 + 4/eps^2) | certified | message |")
    print("|---|---|---|---|---|---|---|---|---|")
    for eps in (float(e) for e in args.eps.split(",")):
        design = near_inseparable(eps, args.points)
        radius = float(np.linalg.norm(design.x_train, axis=1).max())
        for mode in args.modes.split(","):
            ipm.EXACT, ipm.REFINE = mode != "plain", mode != "unrefined"
            sol = solve_dual(design, working_set=False)
            cert = certificate(design, sol)
            ratio = sol.value / (1 + 4 / eps ** 2) if sol.zeta is not None else float("nan")
            print(f"| {eps:g} | {eps / 2 / radius:.1e} | {mode} | {sol.status} | {sol.iterations} | {cert['rel_gap']:.1e} | "
                  f"{ratio:.9f} | {cert['certified']} | {sol.message[:70]} |", flush=True)
    ipm.EXACT, ipm.REFINE = True, True


if __name__ == "__main__":
    main()
