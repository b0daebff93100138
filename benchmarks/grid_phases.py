"""Where a Figure 2 point's time goes: 32 points (one batch group of each (H, C, N) with H in
{10, 100}, C in {2, 4}, N in {500, 2000}) run in this process under cProfile, one thread.

    GB_DATA_DIR=../shared/data python benchmarks/grid_phases.py [--batch 4] [--out DIR] [--top 40]

Prints wall and CPU seconds, then the profile sorted by cumulative time (training, solving,
gating, records, compare). The pool is loaded and rounded before the clock starts, as a sweep
worker does once. Run it on two commits to see what a change to the per-point work bought.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import tempfile
import time
from pathlib import Path

import torch

from gbcli.runs.stages import prepare
from gbcli.runs.sweep import expand, group_points, point_id, run_group, spread_twins

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None, help="keep the points here (default: a temporary folder)")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(1)
    _, points = expand(ROOT / "configs" / "paper" / "fig2.yaml")
    seen, groups = set(), []
    for g in spread_twins(group_points(points, args.batch)):
        p = g[0]
        key = (p.model.hidden_units, p.contexts.count, p.dataset.train_size)
        if p.model.hidden_units in (10, 100) and p.dataset.train_size in (500, 2000) and key not in seen:
            seen.add(key)
            groups.append(g)
    out = args.out or Path(tempfile.mkdtemp(prefix="gb-phases-"))
    shutil.rmtree(out, ignore_errors=True)
    prepare(groups[0][0])
    wall, cpu = time.perf_counter(), os.times()
    prof = cProfile.Profile()
    prof.enable()
    for g in groups:
        run_group([p.to_dict() for p in g], [str(out / "points" / point_id(p)) for p in g], str(out / "solves"), 1)
    prof.disable()
    end = os.times()
    print(f"{sum(map(len, groups))} points: {time.perf_counter() - wall:.1f} s wall, "
          f"{end.user - cpu.user + end.system - cpu.system:.1f} CPU s")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(args.top)
    if args.out is None:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
