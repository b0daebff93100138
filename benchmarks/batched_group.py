"""Batched training of one Figure 2 cell: its 12 networks (context seeds 1-3 x both inits x both
momenta) in groups of --batch, CPU seconds, and whether the result is bit for bit a saved one.

    GB_DATA_DIR=../shared/data python benchmarks/batched_group.py 10 2 500 --batch 4 --save ref.pt
    GB_DATA_DIR=../shared/data python benchmarks/batched_group.py 10 2 500 --batch 12 --check ref.pt

`--save` stores every network's weights, final outputs and metric log; `--check` compares with
them exactly (torch.equal, ==): run --save on one commit and --check on another to see that a
change to the batched loop leaves the trajectories alone (issue 13).
"""

from __future__ import annotations

import argparse
import time

import torch

from gbcli.config import apply_preset, validate
from gbcli.runs.stages import build_model, prepare
from gbcli.training.batched import train_batched


def cell(h: int, c: int, n: int) -> list:
    return [validate(apply_preset({
        "name": "bench", "preset": "paper", "model": {"kind": "gln", "hidden_units": h},
        "dataset": {"train_size": n}, "contexts": {"count": c, "seed": seed, "median_init": mi, "draws": "published"},
        "training": {"momentum": m, "validation": "final"}}))
        for seed in (1, 2, 3) for mi in (True, False) for m in (0.0, 0.9)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("units", type=int)
    ap.add_argument("contexts", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--save")
    ap.add_argument("--check")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfgs = cell(args.units, args.contexts, args.n)
    problems = [prepare(c) for c in cfgs]
    start, out = time.process_time(), []
    for i in range(0, len(cfgs), args.batch):
        nets = [build_model(c, problems[0].dataset.dim) for c in cfgs[i:i + args.batch]]
        results = train_batched(nets, cfgs[i:i + args.batch], problems[i:i + args.batch])
        out += [([p.detach().clone() for p in m.parameters()], r.train_out, r.val_out, r.metrics)
                for m, r in zip(nets, results)]
    print(f"H={args.units} C={args.contexts} N={args.n}, groups of {args.batch}: "
          f"{time.process_time() - start:.2f} CPU s for {len(cfgs)} networks")
    if args.save:
        torch.save(out, args.save)
    if args.check:
        ref = torch.load(args.check, weights_only=False)
        same = all(len(a[0]) == len(b[0]) and all(torch.equal(x, y) for x, y in zip(a[0], b[0]))
                   and (a[1] == b[1]).all() and (a[2] == b[2]).all() and a[3].equals(b[3]) for a, b in zip(ref, out))
        print("bit for bit the saved networks:", same)


if __name__ == "__main__":
    main()
