"""CPU seconds of the commands that only read (issue 49, item 7): `gb --help`, `gb runs`,
`gb compare RUN`, `gb runs show NAME` on the tour's run, and a config error; each under 1 CPU second
(no torch, MLflow or matplotlib import on their way: tests/test_first_hour.py checks that).

    .venv/bin/python benchmarks/startup.py [--repeat 5] [--markdown FILE] [--tree DIR]

Builds the tour's run (configs/quickstart.yaml: `gb train-gd`, `gb fit-svm`, scikit-learn's digits,
a few seconds) in a temporary folder, then runs each command `--repeat` times as a new process and
prints the median CPU time (user + system, of the process and its children) and wall time.
`--tree DIR`: run the gbcli of another source tree (e.g. `git archive fe1f6b5 | tar -x -C DIR`, for
a before/after) with this venv's libraries.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GB = [str(Path(sys.executable).with_name("gb"))]
FROM_TREE = "import sys; sys.path.insert(0, {tree!r}); sys.argv[0] = 'gb'; from gbcli.cli import main; main()"
COMMANDS = [
    ("gb --help", ["--help"], 0),
    ("gb runs", ["runs"], 0),
    ("gb compare runs/quickstart", ["compare", "runs/quickstart"], 0),
    ("gb runs show quickstart", ["runs", "show", "quickstart"], 0),
    ("gb train-gd typo.yaml (a config error)", ["train-gd", "typo.yaml"], 2),
]


def timed(args: list[str], cwd: Path, expect: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one `gb ARGS` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    p = subprocess.run(GB + args, cwd=cwd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "160"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != expect:
        raise SystemExit(f"gb {' '.join(args)}: exit {p.returncode} (expected {expect}): {p.stderr.strip()[-300:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def tour(folder: Path) -> None:
    shutil.copy(ROOT / "configs" / "quickstart.yaml", folder / "quickstart.yaml")
    (folder / "typo.yaml").write_text((ROOT / "configs" / "quickstart.yaml").read_text()
                                      .replace("lr: 0.04", "lr: 0.04\n  momentun: 0.9"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for stage in ("train-gd", "fit-svm"):
        subprocess.run(GB + [stage, "quickstart.yaml", "-q"], cwd=folder, env=env, check=True, capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--markdown", type=Path, help="also write the table here")
    ap.add_argument("--tree", type=Path, help="the source tree whose gbcli runs (default: the installed one)")
    a = ap.parse_args()
    if a.tree:
        GB[:] = [sys.executable, "-c", FROM_TREE.format(tree=str(a.tree.resolve()))]
    with tempfile.TemporaryDirectory(prefix="gb-startup-") as tmp:
        folder = Path(tmp)
        tour(folder)
        for _, args, expect in COMMANDS:   # once, unmeasured: the files' and the interpreter's caches are warm
            timed(args, folder, expect)
        rows = []
        for label, args, expect in COMMANDS:
            runs = [timed(args, folder, expect) for _ in range(a.repeat)]
            rows.append((label, statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs)))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    where = f"the tree {a.tree}" if a.tree else f"{commit or '?'}"
    lines = [f"`python benchmarks/startup.py --repeat {a.repeat}` at {where}, "
             f"{dt.date.today().isoformat()}, {platform.machine()} with {os.cpu_count()} cores, Python "
             f"{platform.python_version()} (median of {a.repeat} processes)", "",
             "| command | CPU seconds | wall seconds |", "|---|---:|---:|"]
    lines += [f"| `{label}` | {cpu:.2f} | {wall:.2f} |" for label, cpu, wall in rows]
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        a.markdown.parent.mkdir(parents=True, exist_ok=True)
        a.markdown.write_text(text + "\n")
    slow = [label for label, cpu, _ in rows if cpu >= 1.0]
    if slow:
        print(f"over 1 CPU second: {', '.join(slow)}", file=sys.stderr)


if __name__ == "__main__":
    main()
