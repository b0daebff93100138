"""Finish a stored dual solution that stalled before the active-set polish existed (issue 13).

    python scripts/finish_stalled.py RUN_DIR OBJECTIVE [--cache SOLVES_DIR]

RUN_DIR is a run directory (of `gb train-gd` / `gb fit-svm`, or a sweep's OUT/points/<id>; not a
sweep directory) and OBJECTIVE one of its configuration's `svm.objectives` (RUN_DIR/gd/config.yaml).
RUN_DIR/svm/OBJECTIVE/ must hold a `result.json` of the dual solver with status `inaccurate` and its
`solution.npz` (zeta, and lam: the multipliers of the final working set, zero elsewhere). The
working set's final round is taken up where the interior-point method stopped: the same call the
solver now makes when it stalls (`gbcli.programs.ipm.polish` with the residuals of
`gbcli.programs.solvers.dual.primal_products`), on the points with lam > 0, with the group
multipliers s recovered from zeta = recover(V(lam), s). The result is certified on all N points
(`gbcli.programs.certify.certificate` at the configuration's svm.certify_tol: the status recorded
is the computed one, never a stored word) and recorded as a fresh `result.json` (its message says
it was finished here, and `solve_seconds` adds the polish to the stored solve), with a line
appended to RUN_DIR/log.txt; a certified result also enters the solve cache (`--cache`, e.g. a
sweep's OUT/solves), so the sweep's other points with the same program reuse it.

RUN_DIR is untrusted input: a symlink anywhere in it (svm/, svm/OBJECTIVE, log.txt, ...), an
objective that is not a plain name of the configuration, a missing or garbage configuration or
stored solve (a file that is not an .npz of finite real zeta and lam >= 0 of the program's shapes),
a sweep directory, or an svm.certify_tol that is not a finite number in (0, 1) is refused, and
nothing is written (the checks of the tree and the configuration come before any data is loaded).
Exit codes: 0 certified, 1 recorded but not certified (or the polish did
not improve the stored answer: nothing written), 2 refused (one line `gb: error: ...` on stderr,
nothing written).
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import numbers
import os
import re
import stat
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gbcli.config import validate  # noqa: E402
from gbcli.errors import GbError  # noqa: E402
from gbcli.io import load_yaml, read_text_untrusted, read_untrusted  # noqa: E402
from gbcli.programs import Solution, combination, norm_of  # noqa: E402
from gbcli.programs.ipm import polish  # noqa: E402
from gbcli.programs.solvers.dual import kernel_problem, primal_products  # noqa: E402
from gbcli.programs.workingset import margins, subset  # noqa: E402
from gbcli.runs.cache import SolveCache  # noqa: E402
from gbcli.runs.integrity import check_tree, dir_kind  # noqa: E402
from gbcli.runs.stages import _record, build_design, prepare, run_lock, svm_manifest  # noqa: E402
from gbcli.runs.sweep import limit_threads  # noqa: E402

PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}")   # an objective: used in RUN_DIR/svm/<objective>
MAX_CONFIG_BYTES = 10_000_000
MAX_LINE = 1000


# ------------------------------------------------------------------ refusals (shared with adopt_solution.py)


class Refused(Exception):
    """Bad input: one line on stderr, exit code 2, nothing written."""


def one_line(text: object, limit: int = MAX_LINE) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else f"{line[:limit - 200]} ... {line[-180:]}"


def error_line(msg: object) -> None:
    print(f"gb: error: {one_line(msg)}", file=sys.stderr)


def why(exc: BaseException) -> str:
    """An exception as a short clause: its type and its first line."""
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    text = text.splitlines()[0][:200] if text else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def rebuild_design(run_dir: Path, cfg, obj: str):
    """(design, problem): the program `obj` of the run's configuration, built as `fit-svm` builds
    it; Refused (one line) when the configuration no longer builds one."""
    try:
        problem = prepare(cfg)
        return build_design(obj, cfg, problem), problem
    except GbError:
        raise
    except Exception as exc:   # noqa: BLE001
        raise Refused(f"{run_dir}: cannot rebuild the program {obj} of its configuration ({why(exc)})") from None


class Parser(argparse.ArgumentParser):
    """argparse with a wrong command line reported as one line (`gb: error: ...`), exit 2."""

    def error(self, message: str):
        error_line(f"{self.prog}: {message} (see --help)")
        sys.exit(2)


def tolerance(name: str, value) -> float:
    """A tolerance: a finite real number in (0, 1) (not a bool or a string); Refused otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) \
            or not math.isfinite(float(value)) or not 0 < float(value) < 1:
        raise Refused(f"{name}: must be a finite number in (0, 1), got {one_line(repr(value), 80)}")
    return float(value)


def open_run(run_dir: Path, obj: str):
    """The validated configuration of run directory `run_dir` for objective `obj`, refusing (one line)
    an objective that is not a plain name of the configuration, a directory that is not a run (a
    sweep, a mixed or empty one), any symlink inside it, a missing or garbage gd/config.yaml and an
    svm.certify_tol outside (0, 1)."""
    if not PLAIN_NAME.fullmatch(obj) or ".." in obj:
        raise Refused(f"{one_line(repr(obj), 120)}: not an objective name (a plain name of svm.objectives, "
                      f"used as RUN_DIR/svm/<objective>)")
    if not run_dir.is_dir():
        raise Refused(f"{run_dir}: not a directory (expected a run directory of train-gd / fit-svm)")
    check_tree(run_dir)   # GbError: a symlink anywhere inside (gb never writes through one)
    kind = dir_kind(run_dir, "RUN_DIR")
    if kind == "sweep":
        raise Refused(f"{run_dir}: is a sweep directory (of gb sweep), not a run; a point of it is "
                      f"{run_dir}/points/<id>")
    if kind != "run":
        raise Refused(f"{run_dir}: not a run directory (no gd/ or svm/ of train-gd / fit-svm)")
    path = run_dir / "gd" / "config.yaml"
    try:
        raw = load_yaml(read_text_untrusted(path, MAX_CONFIG_BYTES))
    except Exception as exc:   # noqa: BLE001 (missing, a symlink, not a regular file, too large, not UTF-8 or YAML)
        raise Refused(f"{path}: cannot read the run's configuration ({why(exc)})") from None
    if not isinstance(raw, dict):
        raise Refused(f"{path}: not a configuration (a mapping of sections), got "
                      f"{'an empty file' if raw is None else type(raw).__name__}")
    try:
        cfg = validate(raw, str(path))
    except GbError:
        raise
    except Exception as exc:   # noqa: BLE001 (a validator that trips over a foreign value)
        raise Refused(f"{path}: not a valid configuration ({why(exc)})") from None
    tolerance(f"{path}: svm.certify_tol", cfg.svm.certify_tol)
    if obj not in cfg.svm.objectives:
        raise Refused(f"{obj}: not an objective of {run_dir}'s configuration "
                      f"(svm.objectives: {', '.join(cfg.svm.objectives) or 'none'})")
    return cfg


def check_cache(cache_dir: str | None) -> None:
    if cache_dir is not None and os.path.lexists(cache_dir) and not Path(cache_dir).is_dir():
        raise Refused(f"--cache: {cache_dir}: not a directory (a sweep's OUT/solves)")


def check_log(run_dir: Path) -> Path:
    """RUN_DIR/log.txt, absent or a regular file (never a symlink, which is not followed)."""
    log = run_dir / "log.txt"
    if os.path.lexists(log) and (log.is_symlink() or not stat.S_ISREG(os.lstat(log).st_mode)):
        raise Refused(f"{log}: not a regular file (gb appends its log to it and never writes through a symlink)")
    return log


def append_log(log: Path, line: str) -> None:
    """Append a line to the run's log: never through a symlink (O_NOFOLLOW), only to a regular file."""
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{log}: is a symlink; gb never writes through a symlink inside a run directory") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Refused(f"{log}: not a regular file (gb appends its log to it)")
        os.write(fd, (one_line(line, 100_000) + "\n").encode("utf-8", "replace"))
    finally:
        os.close(fd)


def array(z, name: str, path, ndim: int | None = None) -> np.ndarray:
    """Array `name` of an open .npz as finite float64 (a real numeric dtype; not object, bool, complex)."""
    if name not in z.files:
        raise Refused(f"{path}: has no array {name!r} (holds {', '.join(z.files)[:200] or 'nothing'})")
    a = z[name]
    if a.dtype.kind not in "fiu":
        raise Refused(f"{path}: {name} is of dtype {a.dtype}, not real numbers")
    if ndim is not None and a.ndim != ndim:
        raise Refused(f"{path}: {name} has shape {a.shape}, expected {ndim} dimension(s)")
    a = np.asarray(a, np.float64)
    if not np.isfinite(a).all():
        raise Refused(f"{path}: {name} holds non-finite values")
    return a


def open_npz(data: bytes, path):
    """An .npz archive from bytes, never with pickles (object arrays are refused)."""
    import io

    if not data.startswith((b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY")):   # a zip archive, or numpy's .npy
        raise Refused(f"{path}: not an .npz archive of arrays ({'an empty file' if not data else 'not a zip archive'})")
    try:
        z = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:   # noqa: BLE001 (empty, text, truncated, pickled: whatever the file is)
        raise Refused(f"{path}: not an .npz archive of arrays ({why(exc)})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise Refused(f"{path}: a single array, not an .npz archive of arrays")
    return z


# ------------------------------------------------------------------ the polish


def final_round(design, zeta: np.ndarray, lam: np.ndarray):
    """(W, its sub-design, its kernel problem, s) of a stored working-set answer: W the points with
    lam > 0, s the group multipliers with zeta = recover(V(lam), s) (up to zeta's rescaling)."""
    norm = norm_of(design)
    w = np.flatnonzero(lam > 0)
    sub = subset(design, w)
    grp = kernel_problem(sub)
    v = combination(sub, lam[w])
    if grp.e is None:   # one group: zeta = s recover(V, 1)
        r = norm.recover(sub, v, np.ones(1))
        s = np.array([float(np.sum(zeta * r) / np.sum(r * r))])
    else:
        s = np.array([float(np.linalg.norm(zeta[g]) / max(np.linalg.norm(v[g]), 1e-300)) for g in design.groups])
    return w, sub, grp, s


def read_stored(out: Path) -> tuple[dict, np.ndarray, np.ndarray]:
    """The stored result.json (checked: a stalled dual solve with sane fields) and solution.npz (both
    read, and a corrupt one reported as such, before the status is looked at)."""
    try:
        old = json.loads(read_untrusted(out / "result.json", 100_000_000))
    except Exception as exc:   # noqa: BLE001 (missing, not a regular file, not JSON)
        raise Refused(f"{out / 'result.json'}: cannot read the stored solve ({why(exc)})") from None
    if not isinstance(old, dict):
        raise Refused(f"{out / 'result.json'}: cannot read the stored solve (not a result record: a JSON object)")
    path = out / "solution.npz"
    try:
        with open_npz(read_untrusted(path), path) as z:
            zeta, lam = array(z, "zeta", path, 2), array(z, "lam", path, 1)
    except Refused as exc:   # the file's own words, said as the stored solve's
        said = str(exc)
        said = said[len(f"{path}: "):] if said.startswith(f"{path}: ") else said
        raise Refused(f"{path}: cannot read the stored solve: {said}") from None
    except Exception as exc:   # noqa: BLE001 (missing, not a regular file, object arrays, a corrupt member)
        raise Refused(f"{path}: cannot read the stored solve ({why(exc)})") from None
    status, solver = old.get("status"), old.get("solver")
    if status != "inaccurate" or solver != "dual":
        raise Refused(f"{out}: status {one_line(repr(status), 60)} of solver {one_line(repr(solver), 60)}; only a "
                      f"stalled dual solve (status 'inaccurate' of solver 'dual') is finished here")
    seconds, iterations = old.get("solve_seconds"), old.get("iterations")
    if not isinstance(old.get("message"), str) or isinstance(seconds, bool) \
            or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0 \
            or isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise Refused(f"{out / 'result.json'}: message, solve_seconds or iterations is not a text, a finite "
                      f"number of seconds >= 0 and a count")
    return old, zeta, lam


def main(argv: list[str]) -> int:
    ap = Parser(prog="finish_stalled.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path, help="a run directory (not a sweep directory)")
    ap.add_argument("objective", help="one of the run configuration's svm.objectives")
    ap.add_argument("--cache", default=None, help="a sweep's OUT/solves: a certified result enters it")
    args = ap.parse_args(argv)   # a wrong command line: one line, exit 2
    try:
        return finish(args.run_dir, args.objective, args.cache)
    except (Refused, GbError) as exc:
        error_line(exc)
        return 2
    except OSError as exc:   # a full disk, an unwritable directory: one line
        error_line(f"{exc.filename or args.run_dir}: cannot write ({exc.strerror or exc})")
        return 2


def finish(run_dir: Path, obj: str, cache_dir: str | None) -> int:
    limit_threads(1)   # as a sweep's worker
    cfg = open_run(run_dir, obj)
    check_cache(cache_dir)
    check_log(run_dir)
    out = run_dir / "svm" / obj
    old, zeta, lam = read_stored(out)   # a missing, truncated or foreign file: one line, exit 2, nothing written
    design, problem = rebuild_design(run_dir, cfg, obj)
    rows, dim, n = design.rows, design.x_train.shape[1], len(design.y_train)
    if zeta.shape != (rows, dim) or lam.shape != (n,):
        raise Refused(f"{out / 'solution.npz'}: zeta {zeta.shape} and lam {lam.shape} do not fit {obj} of {run_dir} "
                      f"({rows} x {dim}, {n} points)")
    if (lam < 0).any() or not (lam > 0).any():
        raise Refused(f"{out / 'solution.npz'}: lam must be nonnegative multipliers with at least one positive "
                      f"(the final working set)")
    norm = norm_of(design)
    start = time.perf_counter()
    try:
        w, sub, grp, s = final_round(design, zeta, lam)
        done = polish(grp, lam[w], s, norm.quadratic, primal_products(sub, grp))
    except Exception as exc:   # noqa: BLE001 (a foreign answer the polish cannot start from)
        raise Refused(f"{out}: cannot polish the stored answer ({why(exc)})") from None
    if done is None:
        print(f"{out}: the polish did not improve the stored answer; nothing written", file=sys.stderr)
        return 1
    lam_w, s, gap = done
    full = np.zeros(len(lam))
    full[w] = lam_w
    new = norm.predictor(sub, lam_w, s, precise=True)
    low = float(margins(design, new).min())
    if not low > 0:
        print(f"{out}: the polished predictor has no positive margin on all N points; nothing written", file=sys.stderr)
        return 1
    new = new / low   # every one of the N margins >= 1
    seconds = time.perf_counter() - start
    message = (f"finished by scripts/finish_stalled.py: the stored working-set answer ({old['message']}) polished on "
               f"its active set of {int((lam_w > 0).sum())} points to a relative gap of {gap:.1e} in {seconds:.1f} s")
    # the polish's own word; _record checks it: `optimal` is written only when certified on all N points
    sol = Solution(new, "optimal" if gap <= cfg.svm.certify_tol else "inaccurate", norm.value(design, new),
                   float(old["solve_seconds"]) + seconds, "dual", message, old["iterations"], full)
    r = record(run_dir, obj, cfg, design, problem, sol, cache_dir)
    return 0 if r["certified"] else 1


def record(run_dir: Path, obj: str, cfg, design, problem, sol: Solution, cache_dir: str | None) -> dict:
    """Certify sol on the point's design and record it as RUN_DIR/svm/OBJ/result.json (under the run's
    lock, which refuses a symlink anywhere in RUN_DIR; a line appended to its log.txt, never through a
    symlink); a certified optimum or infeasibility also enters the solve cache. The status recorded
    is the certificate's: `optimal` and `infeasible` only when certified at svm.certify_tol."""
    out = run_dir / "svm" / obj
    tolerance("svm.certify_tol", cfg.svm.certify_tol)
    check_cache(cache_dir)
    with run_lock(run_dir, key="RUN_DIR"):
        log = check_log(run_dir)
        r = _record(obj, cfg, design, sol, out, problem.dataset, svm_manifest(cfg, run_dir, False))
        append_log(log, f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {obj}: {sol.message}; {r['status']}, "
                        f"certified {r['certified']}")
    print(f"{out}: {r['status']}, certified {r['certified']}, relative gap {r['rel_gap']:.2e}, "
          f"min margin {r['min_margin']:.10f}, objective {r['objective']:.10g}, val error {r['val_error']:.4f}"
          + (f", relative margin bound {r['relative_margin_bound']:.2e}" if "relative_margin_bound" in r else ""))
    if cache_dir is not None and r["certified"] and r["status"] in ("optimal", "infeasible"):   # as a sweep caches
        sol.status = r["status"]   # the certified word, not the solver's
        cache = SolveCache(cache_dir)
        key = cache.key(design, "dual", cfg.svm.max_iters, cfg.svm.eps, cfg.svm.certify_tol)
        with cache.claim(key):
            cache.put(key, sol, f"{run_dir.name}/{obj}")
        print(f"cached as {key}")
    return r


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
