"""Training the networks of one Figure 2 group: the plain loop, validation only at the end, and
batched training (issue 13).

    GB_DATA_DIR=../shared/data python benchmarks/grid_training.py [--sizes 10,2 20,4] [--n 500]

For each (H, C) it trains the four networks of one batch group of configs/paper/fig2.yaml (context
seeds 1 and 2 x momentum 0 and 0.9, median init, the paper schedule: 3200 steps at N = 500) three
ways and prints CPU seconds (process time: robust to other processes on the machine, and to this
one being paused) and wall seconds:

- `plain, validation logged`: today's loop, 50 validation passes (12,000 MNIST points each);
- `plain, validation final`: `training.validation: final`;
- `batched, validation final`: the four as one computation (`gbcli.training.batched`).

It checks that the batched networks equal the plain ones (largest weight difference).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from gbcli.config import apply_preset, validate
from gbcli.runs.stages import prepare, train_gd, train_gd_group


def group(h: int, c: int, n: int, validation: str):
    cfgs = []
    for seed in (1, 2):
        for m in (0.0, 0.9):
            raw = {"name": "bench", "preset": "paper", "model": {"kind": "gln", "hidden_units": h},
                   "dataset": {"train_size": n}, "contexts": {"count": c, "seed": seed, "median_init": True},
                   "training": {"momentum": m, "validation": validation}}
            cfgs.append(validate(apply_preset(raw)))
    return cfgs


def timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["10,2", "20,4"], help="H,C pairs")
    ap.add_argument("--n", type=int, default=500)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| H, C | way | CPU s (4 networks) | wall s | CPU vs plain |")
    print("|---|---|---|---|---|")
    for size in args.sizes:
        h, c = map(int, size.split(","))
        logged, final = group(h, c, args.n, "logged"), group(h, c, args.n, "final")
        problems = [prepare(cfg) for cfg in logged]
        with tempfile.TemporaryDirectory() as tmp:
            ways = {
                "plain, validation logged": lambda: [train_gd(cfg, f"{tmp}/a{k}", False, p)
                                                     for k, (cfg, p) in enumerate(zip(logged, problems))],
                "plain, validation final": lambda: [train_gd(cfg, f"{tmp}/b{k}", False, p)
                                                    for k, (cfg, p) in enumerate(zip(final, problems))],
                "batched, validation final": lambda: train_gd_group(final, [f"{tmp}/c{k}" for k in range(4)], problems),
            }
            base = None
            for way, fn in ways.items():
                cpu, wall = timed(fn)
                base = base or cpu
                print(f"| {h}, {c} | {way} | {cpu:.1f} | {wall:.1f} | {cpu / base:.2f} |", flush=True)
            diff = max(float((torch.load(f"{tmp}/b{k}/gd/model.pt", weights_only=False)["state_dict"][w]
                              - torch.load(f"{tmp}/c{k}/gd/model.pt", weights_only=False)["state_dict"][w]).abs().max())
                       for k in range(4) for w in ("w1", "w2", "bias"))
            print(f"| {h}, {c} | batched vs plain: largest weight difference | {diff:.1e} | | |", flush=True)


if __name__ == "__main__":
    main()
