"""Record a dual answer solved outside a sweep as a point's result (issue 13: seed 3 at H = 10).

    python scripts/adopt_solution.py RUN_DIR OBJECTIVE SOLUTION.npz [--cache SOLVES_DIR] [--note TEXT]

SOLUTION.npz is `benchmarks/fullscale_solve.py --save-solution`'s file (zeta, lam, status, message,
seconds, iterations) for the program of RUN_DIR's configuration (RUN_DIR/gd/config.yaml) and
OBJECTIVE (one of its svm.objectives): a predictor, or a dual ray (status infeasible, zeta empty).
Its status word is a claim, never recorded as it is: the answer is certified on the point's own
design at the configuration's svm.certify_tol (`gbcli.programs.certify.certificate`), and the
status recorded is the computed one:

- a ray (the file says `infeasible`) is recorded `infeasible`, certified, only when its multipliers
  bound every predictor's relative margin at or below `gbcli.programs.ipm.NOT_SEPARABLE` (weak
  duality); a file that says infeasible but whose multipliers do not certify it, or that holds a
  predictor, is refused;
- a predictor (any other word) is recorded `optimal` when its relative duality gap and 1 - its
  smallest margin are within the tolerance, and `inaccurate`, uncertified, otherwise (a file that
  said `optimal` then gets the reason in its message, as any uncertified solve does).

The record is RUN_DIR/svm/OBJECTIVE/result.json, its message saying where the answer came from (and
--note); a line is appended to RUN_DIR/log.txt (never through a symlink), and a certified answer
also enters the solve cache (--cache, a sweep's OUT/solves), so the resumed sweep reuses it instead
of solving again. Exit 0 when the record is certified, 1 when it is not.

Refused with exit 2, one line `gb: error: ...` on stderr and nothing written: a claim the data does
not certify (above), an answer of another size, a non-finite one, one without a predictor that is
not a ray, negative multipliers, a status word that is not a solver's, a file that is not such an
.npz; and, as scripts/finish_stalled.py refuses them, an objective that is not a plain
name of the configuration, a RUN_DIR that is not a run directory (a sweep directory, say) or holds a
symlink, a missing or garbage configuration and an svm.certify_tol that is not a finite number in (0, 1).
"""

from __future__ import annotations

import argparse
import math
import os
import stat
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from finish_stalled import (MAX_LINE, Parser, Refused, array, check_cache, check_log,  # noqa: E402
                            error_line, one_line, open_npz, open_run, rebuild_design, record, why)

from gbcli.errors import GbError  # noqa: E402
from gbcli.programs import Solution, norm_of  # noqa: E402
from gbcli.programs.certify import certificate  # noqa: E402
from gbcli.programs.ipm import NOT_SEPARABLE  # noqa: E402
from gbcli.runs.sweep import limit_threads  # noqa: E402

STATUSES = ("optimal", "inaccurate", "infeasible", "failed")   # a solver's words (gbcli.programs.design.Solution)
MAX_SOLUTION_BYTES = 1024 ** 3


def read_solution(path: Path) -> dict:
    """The arrays and scalars of SOLUTION.npz, checked for types (shapes are checked on the design).
    The file is the user's: a symlink to it is followed, but only a regular file is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError("not a regular file")
            if st.st_size > MAX_SOLUTION_BYTES:
                raise ValueError(f"{st.st_size} bytes, more than {MAX_SOLUTION_BYTES}")
            with open(fd, "rb", closefd=False) as fh:
                data = fh.read(MAX_SOLUTION_BYTES + 1)
        finally:
            os.close(fd)
    except (OSError, ValueError) as exc:
        raise Refused(f"{path}: cannot read the answer ({why(exc)})") from None
    try:
        with open_npz(data, path) as z:
            out = {"zeta": array(z, "zeta", path), "lam": array(z, "lam", path, 1)}
            for name in ("status", "message"):
                if name not in z.files:
                    raise Refused(f"{path}: has no {name!r} (holds {', '.join(z.files)[:200]})")
                a = z[name]
                if a.ndim != 0 or a.dtype.kind != "U":
                    raise Refused(f"{path}: {name} is not a text (dtype {a.dtype}, shape {a.shape})")
                out[name] = str(a)
            seconds, iterations = array(z, "seconds", path, 0), array(z, "iterations", path, 0)
    except Refused:
        raise
    except Exception as exc:   # noqa: BLE001 (object arrays, a corrupt member)
        raise Refused(f"{path}: cannot read the answer ({why(exc)})") from None
    if out["status"] not in STATUSES:
        raise Refused(f"{path}: status {one_line(repr(out['status']), 80)} is not a solver's ({', '.join(STATUSES)})")
    if not seconds >= 0 or iterations < 0 or float(iterations) != math.floor(iterations):
        raise Refused(f"{path}: seconds {float(seconds)} and iterations {float(iterations)} are not a time >= 0 "
                      f"and a count")
    out["seconds"], out["iterations"] = float(seconds), int(iterations)
    if (out["lam"] < 0).any():
        raise Refused(f"{path}: lam holds negative values (margin multipliers are >= 0)")
    return out


def main(argv: list[str]) -> int:
    ap = Parser(prog="adopt_solution.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path, help="a run directory (not a sweep directory)")
    ap.add_argument("objective", help="one of the run configuration's svm.objectives")
    ap.add_argument("solution", type=Path, help="benchmarks/fullscale_solve.py --save-solution's .npz")
    ap.add_argument("--cache", default=None, help="a sweep's OUT/solves: a certified answer enters it")
    ap.add_argument("--note", default=None, help="said in the result's message")
    args = ap.parse_args(argv)   # a wrong command line: one line, exit 2
    try:
        return adopt(args)
    except (Refused, GbError) as exc:
        error_line(exc)
        return 2
    except OSError as exc:   # a full disk, an unwritable directory: one line
        error_line(f"{exc.filename or args.run_dir}: cannot write ({exc.strerror or exc})")
        return 2


def adopt(args) -> int:
    run_dir, obj, path = args.run_dir, args.objective, args.solution
    limit_threads(1)
    cfg = open_run(run_dir, obj)
    check_cache(args.cache)
    check_log(run_dir)
    ans = read_solution(path)   # a missing, truncated or foreign file: one line, exit 2, nothing written
    design, problem = rebuild_design(run_dir, cfg, obj)
    zeta, lam, claim, tol = ans["zeta"], ans["lam"], ans["status"], cfg.svm.certify_tol
    rows, dim, n = design.rows, design.x_train.shape[1], len(design.y_train)
    ray = zeta.size == 0   # a dual ray: its certificate is a relative margin bound
    if (not ray and zeta.shape != (rows, dim)) or lam.shape != (n,):
        raise Refused(f"{path}: zeta {zeta.shape} and lam {lam.shape} do not fit {obj} of {run_dir} "
                      f"({rows} x {dim}, {n} points)")
    note = f"solved outside the sweep and adopted by scripts/adopt_solution.py from {path.name}"
    if args.note:
        note += f" ({one_line(args.note, MAX_LINE)})"
    message = f"{ans['message']}; {note}" if ans["message"] else note

    # the status is computed from the data, never taken from the file
    if claim == "infeasible":   # a dual ray: certified by its bound on every predictor's relative margin
        sol = Solution(None, "infeasible", float("nan"), ans["seconds"], "dual", message, ans["iterations"], lam)
        cert = certificate(design, sol, tol)
        if not cert["certified"]:
            raise Refused(f"{path}: says infeasible, but its multipliers do not certify infeasibility (relative "
                          f"margin bound {cert['relative_margin_bound']:.3g}, certified only at or below "
                          f"{NOT_SEPARABLE:g})")
        if not ray:
            raise Refused(f"{path}: says infeasible, but it holds a predictor (zeta {zeta.shape}); a dual ray's "
                          f"zeta is empty")
    else:   # a predictor: `optimal` only when certified (gap and margins), `inaccurate` otherwise
        if ray:
            raise Refused(f"{path}: says {claim}, but holds no predictor (zeta is empty; only a ray, status "
                          f"infeasible, has none)")
        # _record (gbcli.runs.stages) certifies it at svm.certify_tol and writes `optimal` only when
        # certified (an uncertified `optimal` becomes `inaccurate`, a certified `inaccurate` `optimal`)
        sol = Solution(zeta, "optimal" if claim == "optimal" else "inaccurate", norm_of(design).value(design, zeta),
                       ans["seconds"], "dual", message, ans["iterations"], lam)
    r = record(run_dir, obj, cfg, design, problem, sol, args.cache)
    return 0 if r["certified"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
