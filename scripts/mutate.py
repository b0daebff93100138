#!/usr/bin/env python3
"""Hand-written mutation testing of the code that decides results.

Each mutation is a plausible one-line bug: a file, an exact substring of the original code and its
replacement (or several such sites: the places and forms the line may have taken as code moves). For each selected mutation the script applies
it in a private COPY of the repository (never in the working tree it is run from), runs a pytest
selection there and reports whether the tests noticed:

    killed    the tests failed (or could not even be collected) with the mutation
    survived  every selected test passed with the bug in place: a gap in the tests
    stale     the original substring is no longer in any of the mutation's files (the code moved or
              changed): update the mutation, so the list stays honest
    ambiguous the substring occurs more than once in the file: make it longer
    timeout   the tests ran longer than --timeout (counted as killed, shown apart)
    error     pytest could not run (exit code 3, 4 or 5, e.g. no test selected)

Before the mutations the same selection runs once on the unmutated copy (the baseline): when it
fails, nothing can be concluded and the script stops. Exit status 1 when any mutation survived,
is stale or ambiguous, or errored; 0 when every selected mutation was killed.

    .venv/bin/python scripts/mutate.py                                   # all, `make test-fast`'s selection
    .venv/bin/python scripts/mutate.py --only lr-milestone-late --pytest-args "tests/test_decisions.py -x -q"
    .venv/bin/python scripts/mutate.py --list

The copy leaves out .git, .venv, runs/ and caches; it is imported through PYTHONPATH (the editable
install of the working tree comes after it on the path, and the copy's gbcli is checked to be the
one imported). No dependency beyond the standard library.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PYTEST_ARGS = '-m "not slow and not slurm" -x -q'
TOP_IGNORED = {".git", ".venv", "venv", "runs"}   # left out of the copy at its top level only (gbcli/runs is code)
IGNORED = ("__pycache__", ".pytest_cache", "*.egg-info", ".mypy_cache", ".ruff_cache", "*.pyc")   # anywhere


@dataclass(frozen=True)
class Mutation:
    name: str
    why: str                              # the bug it stands for
    sites: tuple[tuple[str, str, str], ...]   # (file, exact original substring, replacement): where the
    # line is, or the forms it may have taken as the code moved; the first file holding its
    # original (exactly once) is mutated
    offset: int = -1                      # an --auto mutation: the original's place in its one file


def at(files: str | tuple[str, ...], original: str, replacement: str) -> tuple[tuple[str, str, str], ...]:
    """The same line in any of `files` (a module that is being moved)."""
    return tuple((f, original, replacement) for f in ((files,) if isinstance(files, str) else files))


def M(name: str, files, original: str, replacement: str, why: str) -> Mutation:
    return Mutation(name, why, at(files, original, replacement))


CACHE = ("gbcli/store/cache.py", "gbcli/runs/cache.py")
VERIFY = ("gbcli/runs/verify.py", "gbcli/store/verify.py")
CERTIFY = ("gbcli/programs/certify.py",)

MUTATIONS: list[Mutation] = [
    # ---- the seven of the hand mutation run (tests/test_decisions.py)
    M("certify-no-margin-check", CERTIFY,
             "certified=bool(abs(gap) <= tol and margins.min() >= 1 - tol)", "certified=bool(abs(gap) <= tol)",
             "a certificate that checks the gap only: a negated or permuted optimum certifies"),
    M("lr-milestone-late", ("gbcli/training/loop.py",),
             "sum(epoch >= m for m in t.lr_milestones)", "sum(epoch > m for m in t.lr_milestones)",
             "the learning rate decays one epoch after its milestone"),
    M("labels-0-5-vs-6-9", ("gbcli/data/sources.py",),
             "default_factory=lambda: [0, 1, 2, 3, 4]", "default_factory=lambda: [0, 1, 2, 3, 4, 5]",
             "the default binary labelling puts digit 5 in the positive class"),
    Mutation("id-drops-batch-seed", "a grid over training.batch_seed collapses to one point",
             # the keys left out of an id: a list in sweep.py, then in store/identity.py, then marks on the fields
             at("gbcli/runs/sweep.py", '{"training": ("validation", "checkpoint_seconds")',
                '{"training": ("validation", "checkpoint_seconds", "batch_seed")')
             + at("gbcli/store/identity.py", 'LOGGING_KEYS = {"training": ("validation",)}',
                  'LOGGING_KEYS = {"training": ("validation", "batch_seed")}')
             + at("gbcli/config/schema.py", "batch_seed: StrictInt = Field(1, **SEED,",
                  "batch_seed: StrictInt = Field(1, **SEED, json_schema_extra=LOGGING,")),
    M("uncorrelated-p-1-minus-p", ("gbcli/metrics.py",),
             "return 2 * p * (1 - p)", "return p * (1 - p)",
             "the expected inconsistency of an uncorrelated predictor without its factor 2"),
    M("gd-row-val-error-from-train", ("gbcli/runs/compare.py", "gbcli/reports/tables.py"),
             '"val_error": s["val_error"]', '"val_error": s["train_error"]',
             "the error table's GD row shows the training error as its validation error"),
    M("certify-tol-100x-looser", CERTIFY,
             "CERTIFY_TOL = 1e-6", "CERTIFY_TOL = 1e-4",
             "the certificate's default tolerance 100x looser"),
    # ---- more of the same kind
    M("gd-summary-val-error-from-train", ("gbcli/runs/stages.py",),
             '"val_error": error(res.val_out, ds.y_val)', '"val_error": error(res.train_out, ds.y_train)',
             "gd/summary.json's validation error measured on the training set"),
    M("config-certify-tol-100x-looser", ("gbcli/config/schema.py",),
             "certify_tol: StrictFloat = Field(1e-6,", "certify_tol: StrictFloat = Field(1e-4,",
             "svm.certify_tol's default 100x looser (what the stages use)"),
    M("certify-gap-check-100x-looser", CERTIFY,
             "abs(gap) <= tol and", "abs(gap) <= 100 * tol and",
             "the gap check 100x looser than the margin check"),
    M("certify-margin-check-100x-looser", CERTIFY,
             "margins.min() >= 1 - tol)", "margins.min() >= 1 - 100 * tol)",
             "the margin check 100x looser than the gap check"),
    M("dual-bound-not-squared", CERTIFY,
             "return float(bound ** 2 if norm.quadratic else bound)", "return float(bound)",
             "the quadratic norms' dual bound not squared"),
    M("l2-norm-without-C", ("gbcli/programs/norms.py",),
             "return float(s @ s + c * (dev ** 2).sum())", "return float(s @ s + (dev ** 2).sum())",
             "svm-l2's zeta' M zeta without the factor C on the within-unit part"),
    M("l2-pinv-times-C", ("gbcli/programs/norms.py",),
             "(np.eye(r) - context_mean(units, count).toarray()) / count\n",
             "(np.eye(r) - context_mean(units, count).toarray()) * count\n",
             "svm-l2's kernel Mt^+ with C instead of 1/C"),
    M("group-dual-norm-sum", ("gbcli/programs/norms.py",),
             "return float(max(np.linalg.norm(v[g]) for g in design.groups))",
             "return float(sum(np.linalg.norm(v[g]) for g in design.groups))",
             "the group norm's dual norm a sum instead of a max"),
    M("context-bits-lsb-first", ("gbcli/models/gating.py",),
             "<< np.arange(k - 1, -1, -1, dtype=np.int64)", "<< np.arange(k, dtype=np.int64)",
             "hyperplane 0 the least significant bit of the context index"),
    M("gate-side-ge", ("gbcli/models/gating.py",),
             "else proj > offsets", "else proj >= offsets",
             "a point on a hyperplane counted on its positive side ([w.x >= b] instead of [w.x > b])"),
    M("one-hot-column-major", ("gbcli/programs/design.py",),
             "np.arange(h) * count + ctx", "ctx * h + np.arange(h)",
             "the gates' columns ordered c*H + h instead of h*C + c"),
    M("median-offsets-mean", ("gbcli/models/gating.py",),
             "offsets = np.median(proj, axis=0)", "offsets = np.mean(proj, axis=0)",
             "median init with the mean of the projections"),
    M("error-ties-correct", ("gbcli/metrics.py",),
             "(np.isfinite(out) & (out * y > 0))", "(np.isfinite(out) & (out * y >= 0))",
             "a tie (out = 0) counted as correct"),
    M("split-val-after-train", ("gbcli/data/sources.py",),
             "perm[n_total - val_size :].copy()", "perm[train_size : train_size + val_size].copy()",
             "the validation set taken right after the training set, not the last indices"),
    M("paper-milestone-one-late", ("gbcli/config/schema.py",),
             'tr["lr_milestones"] = [epochs // 2]', 'tr["lr_milestones"] = [epochs // 2 + 1]',
             "the paper schedule decays one epoch after half"),
    Mutation("id-drops-svm", "points that differ only in their programs share one id",
             at(("gbcli/runs/sweep.py", "gbcli/store/identity.py"),
                '("name", "output", "grid", "zip", "preset", "sweep")',
                '("name", "output", "grid", "zip", "preset", "sweep", "svm")')
             + at("gbcli/config/schema.py", "svm: SvmConfig = Field(default_factory=SvmConfig, description=",
                  "svm: SvmConfig = Field(default_factory=SvmConfig, json_schema_extra=EXECUTION, description=")),
    M("verify-val-error-from-train", VERIFY,
             'out["val_error"] = error(out["val_out"], y_val)',
             'out["val_error"] = error(out["train_out"], design.y_train)',
             "gb verify recomputes the validation error on the training set"),
    M("verify-ignores-problems", VERIFY,
             'row["verified"] = got is not None and not row["problems"]', 'row["verified"] = got is not None',
             "gb verify calls a program verified whatever mismatches it found"),
    M("verify-status-always-optimal", VERIFY,
             'out["status"] = certified_status(Status.OPTIMAL, cert["certified"])', 'out["status"] = Status.OPTIMAL',
             "gb verify calls an uncertified predictor optimal"),
    M("cache-key-ignores-groups", CACHE,
             'NOT_SOLVED_FROM = ("x_val", "e_val", "classify")', 'NOT_SOLVED_FROM = ("x_val", "e_val", "classify", "groups")',
             "svm-gln and svm-gln-reference (same data, other groups) share a cached solution"),
    M("cache-key-ignores-certify-tol", CACHE,
             '"certify_tol": certify_tol, **({"device"', '**({"device"',
             "a solution certified at a looser tolerance reused under a tighter one"),
]


# --auto: every comparison, arithmetic and boolean operator, min/max call and True/False in the
# code of a module (docstrings aside), swapped for its nearest wrong neighbour, one at a time. Not
# every swap is a bug (an equivalent mutant survives by right): a survivor is a place to look.
SWAPS = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
         ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.Add: ("+", "-"), ast.Sub: ("-", "+"),
         ast.Mult: ("*", "/"), ast.Div: ("/", "*"), ast.And: ("and", "or"), ast.Or: ("or", "and")}
CALL_SWAPS = {"min": "max", "max": "min"}


def auto_mutations(repo: Path, rel: str) -> list[Mutation]:
    """One mutation per operator of `rel` (a path in the repository), named file:line:col:old>new."""
    text = (repo / rel).read_text(encoding="utf-8")
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
              if t.type in (tokenize.OP, tokenize.NAME)]
    offset = lambda row, col: starts[row - 1] + col   # noqa: E731 (tokenize's columns are characters)

    def between(word: str, lo: tuple[int, int], hi: tuple[int, int]) -> tuple[int, int] | None:
        """The first token `word` after position lo and before hi (an operator between two operands)."""
        return next((t.start for t in tokens if t.string == word and lo <= t.start < hi), None)

    found: dict[int, tuple[str, str, int]] = {}
    for node in ast.walk(ast.parse(text)):
        pairs = []   # (kind of op, the operand before it, the one after it)
        if isinstance(node, ast.BinOp):
            pairs = [(type(node.op), node.left, node.right)]
        elif isinstance(node, ast.Compare):
            pairs = list(zip((type(o) for o in node.ops), [node.left, *node.comparators[:-1]], node.comparators))
        elif isinstance(node, ast.BoolOp):
            pairs = [(type(node.op), a, b) for a, b in zip(node.values, node.values[1:])]
        for op, left, right in pairs:
            if op not in SWAPS:
                continue
            old, new = SWAPS[op]
            at_ = between(old, (left.end_lineno, left.end_col_offset), (right.lineno, right.col_offset))
            if at_:
                found[offset(*at_)] = (old, new, at_[0])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CALL_SWAPS:
            found[offset(node.func.lineno, node.func.col_offset)] = (node.func.id, CALL_SWAPS[node.func.id],
                                                                     node.func.lineno)
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            found[offset(node.lineno, node.col_offset)] = (str(node.value), str(not node.value), node.lineno)
    out = []
    for pos, (old, new, row) in sorted(found.items()):
        col = pos - starts[row - 1]
        out.append(Mutation(f"{rel}:{row}:{col}:{old}~{new}", f"{old} -> {new}", ((rel, old, new),), pos))
    return out


def locate(m: Mutation, tree: Path) -> tuple[str, Path | None, str, str]:
    """(status, file, its text, its mutated text): 'ok' for the first site whose file holds its
    original exactly once (an --auto mutation: at its offset); else 'ambiguous' (a site's original
    occurs more than once) or 'stale'."""
    ambiguous = None
    for rel, original, replacement in m.sites:
        path = tree / rel
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        if m.offset >= 0:
            if text[m.offset:m.offset + len(original)] == original:
                return "ok", path, text, text[:m.offset] + replacement + text[m.offset + len(original):]
            continue
        n = text.count(original)
        if n == 1:
            return "ok", path, text, text.replace(original, replacement)
        if n > 1 and ambiguous is None:
            ambiguous = path
    return ("ambiguous", ambiguous, "", "") if ambiguous else ("stale", None, "", "")


def copy_tree(src: Path, dst: Path) -> Path:
    target = dst / src.name
    anywhere = shutil.ignore_patterns(*IGNORED)

    def ignore(folder: str, names: list[str]) -> set[str]:
        return set(anywhere(folder, names)) | (TOP_IGNORED & set(names) if Path(folder) == src else set())

    shutil.copytree(src, target, symlinks=True, ignore=ignore)
    return target


def environment(tree: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def check_import(tree: Path, python: str) -> None:
    """The copy's gbcli must be the one imported (not the working tree's editable install)."""
    out = subprocess.run([python, "-c", "import gbcli, pathlib; print(pathlib.Path(gbcli.__file__).resolve())"],
                         cwd=tree, env=environment(tree), capture_output=True, text=True)
    where = out.stdout.strip()
    if out.returncode != 0 or not where.startswith(str(tree.resolve())):
        sys.exit(f"mutate: the copy's gbcli is not the one imported ({where or out.stderr.strip()[-300:]})")


def run_pytest(tree: Path, python: str, args: list[str], timeout: float) -> tuple[str, float, str]:
    """('passed' | 'failed' | 'timeout' | 'error', seconds, last lines of the output)."""
    start = time.monotonic()
    try:
        out = subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=tree,
                             env=environment(tree), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - start, ""
    lines = (out.stdout + out.stderr).strip().splitlines()
    first = next((ln for ln in lines if ln.startswith(("FAILED ", "ERROR "))), "")   # what noticed it
    tail = "\n".join(([first] if first else []) + lines[-1:])
    # 0: all passed; 1: some failed; 2: interrupted (e.g. an import error at collection: the mutation broke it)
    outcome = {0: "passed", 1: "failed", 2: "failed"}.get(out.returncode, "error")
    return outcome, time.monotonic() - start, tail


def table(rows: list[dict]) -> str:
    cols = ["mutation", "file", "result", "seconds"]
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    line = lambda r: "| " + " | ".join(str(r[c]).ljust(width[c]) for c in cols) + " |"   # noqa: E731
    return "\n".join([line({c: c for c in cols}), "|" + "|".join("-" * (width[c] + 2) for c in cols) + "|",
                      *(line(r) for r in rows)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="run only this mutation (repeatable, or comma-separated)")
    ap.add_argument("--pytest-args", default=DEFAULT_PYTEST_ARGS,
                    help=f"the pytest selection run for each mutation (default: {DEFAULT_PYTEST_ARGS!r})")
    ap.add_argument("--repo", type=Path, default=ROOT, help="the repository to copy (default: this script's)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per pytest run (default 1800)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the run on the unmutated copy")
    ap.add_argument("--list", action="store_true", help="list the mutations and whether each is current")
    ap.add_argument("--auto", action="append", default=[], metavar="FILE",
                    help="instead of the hand-written list: every operator of FILE (a path in the repository; "
                         "repeatable), swapped one at a time (see SWAPS)")
    a = ap.parse_args(argv)

    repo = a.repo.resolve()
    for rel in a.auto:
        if not (repo / rel).is_file() or not rel.endswith(".py"):
            ap.error(f"--auto {rel}: not a Python file of {repo}")
    pool = [m for rel in a.auto for m in auto_mutations(repo, rel)] if a.auto else MUTATIONS
    wanted = [n for item in a.only for n in item.split(",") if n]
    unknown = sorted(set(wanted) - {m.name for m in pool})
    if unknown:
        ap.error(f"unknown mutation(s): {', '.join(unknown)} (see --list)")
    selected = [m for m in pool if not wanted or m.name in wanted]

    if a.list:
        for m in selected:
            status, path, *_ = locate(m, repo)
            where = path.relative_to(repo) if path else " or ".join(dict.fromkeys(f for f, _, _ in m.sites))
            print(f"{m.name:36s} {status:9s} {where}  ({m.why})")
        return 0

    args = shlex.split(a.pytest_args)
    python = sys.executable
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="gb-mutate-") as tmp:
        tree = copy_tree(repo, Path(tmp))
        check_import(tree, python)
        print(f"mutate: {len(selected)} mutation(s), pytest {' '.join(args)} in a copy at {tree}", flush=True)
        if not a.no_baseline:
            outcome, secs, tail = run_pytest(tree, python, args, a.timeout)
            print(f"mutate: baseline {outcome} in {secs:.1f} s", flush=True)
            if outcome != "passed":
                print(tail, file=sys.stderr)
                sys.exit("mutate: the selection does not pass on the unmutated code; nothing can be concluded")
        for m in selected:
            status, path, text, mutated = locate(m, tree)
            row = {"mutation": m.name, "file": str(path.relative_to(tree)) if path else m.sites[0][0], "seconds": ""}
            if status != "ok":
                rows.append({**row, "result": status})
                print(f"mutate: {m.name}: {status}", flush=True)
                continue
            path.write_text(mutated, encoding="utf-8")
            try:
                outcome, secs, tail = run_pytest(tree, python, args, a.timeout)
            finally:
                path.write_text(text, encoding="utf-8")   # restored before the next mutation
            result = {"failed": "killed", "passed": "survived"}.get(outcome, outcome)
            rows.append({**row, "result": result, "seconds": f"{secs:.1f}"})
            print(f"mutate: {m.name}: {result} ({secs:.1f} s)" + "".join(f"\n    {ln}" for ln in tail.splitlines()),
                  flush=True)
    print()
    print(table(rows))
    bad = [r for r in rows if r["result"] not in ("killed", "timeout")]
    print(f"\n{sum(r['result'] in ('killed', 'timeout') for r in rows)} of {len(rows)} killed"
          + (f"; not killed: {', '.join(r['mutation'] + ' (' + r['result'] + ')' for r in bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
