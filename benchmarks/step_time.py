"""Benchmark: milliseconds a training step, against the FLOP floor of the step (issue 47).

    GB_DATA_DIR=../shared/data .venv/bin/python benchmarks/step_time.py [--steps 7] [--threads 1 2] [--cases ...]

Cases: the N = 48,000 GLN of configs/conjecture-*.yaml (MNIST, H = 50, C = 2, median init, published
draws) trained full batch with the homogeneous-normalized step (configs/conjecture-normalized.yaml)
and by SGD with batch 128 (configs/conjecture-sgd.yaml), and Figure 2's largest point
(configs/paper/fig2.yaml: N = 2000, H = 100, C = 4, median init) both ways.

Each step is the plain loop's own step (`gbcli.training.step.Step`, the object `loop.train` takes its
steps with, on the network `train_gd` builds from the config): the minibatch, the objective, the
finiteness check (a host sync), the gradient, the step size, `opt.step()`. What the loop adds
around it is a set lookup (`step in log_at`) and the interrupt guard; logged steps (metrics on the
full training and validation sets) are not steps and not timed.

The floor of a step is its FLOP count over the machine's fp32 GEMM rate, measured here with a
large torch matmul (4096 x 4096, the fastest of 3) at the same thread count. FLOPs: the forward
product (B x d) @ (d x HC) and the weight gradient's (HC x B) @ (B x d): 2 x 2 B d HC for a batch
of B rows, d = 785 with the bias feature; the rest of the step (the gather, the loss, the scatter
of the gradient, the update) is O(B H + HC d) and counted as overhead. On cpu the times are the
median of `--steps` steps after 2 warm-up steps; with one thread also in CPU seconds of the process
(time.process_time), which a busy shared machine distorts less than the wall clock. On cuda the
wall clock of blocks of 20 steps, synchronized at the ends (the floor there: the same FLOPs at the
measured matmul rate).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

CASES = {  # name: (config, overrides)
    "N=48000 H=50 C=2 full batch": ("conjecture-normalized.yaml", ["contexts.seed=1"]),
    "N=48000 H=50 C=2 SGD b=128": ("conjecture-sgd.yaml", ["contexts.seed=1"]),
    "fig2 N=2000 H=100 C=4 full batch": ("conjecture-fig2-warm.yaml", [
        "model.hidden_units=100", "contexts.count=4", "contexts.seed=1", "training.init_from=null"]),
    "fig2 N=2000 H=100 C=4 SGD b=128": ("conjecture-fig2.yaml", [
        "model.hidden_units=100", "contexts.count=4", "contexts.seed=1"]),
}
SINGLE = ["training.track=[]", "training.checkpoint_seconds=0", "training.epochs=100", "training.lr_milestones=[]"]


def setup(case: str, device: str):
    """The network, optimizer and step of `loop.train` for the case's config (grid removed)."""
    from gbcli.config.loading import apply_preset, read_config, validate
    from gbcli.runs.stages import build_model, prepare
    from gbcli.training.loop import tensors
    from gbcli.optimizers import SGD
    from gbcli.training.step import Step

    name, sets = CASES[case]
    raw = read_config(ROOT / "configs" / name, [*SINGLE, *sets, f"training.device={device}"])
    for key in ("grid", "zip", "sweep"):
        raw.pop(key, None)
    cfg = validate(apply_preset(raw, name), name)
    problem = prepare(cfg)
    ds = problem.dataset
    torch.manual_seed(cfg.init_seed)
    model = build_model(cfg, ds.dim).to(device)
    xt, yt = tensors(torch.device(device), ds.x_train, ds.y_train)
    ct = tensors(torch.device(device), problem.ctx_train, dtype=torch.long)[0]
    opt = SGD(model.parameters(), lr=cfg.training.lr, momentum=cfg.training.momentum)
    batch = min(cfg.training.batch_size or xt.shape[0], xt.shape[0])
    flops = 2 * 2 * batch * xt.shape[1] * cfg.model.hidden_units * cfg.contexts.count
    return cfg, Step(model, cfg, xt, yt, ct, opt, batch), opt, flops


def one_step(step, opt, perm, i: int, lr: float) -> None:
    """`loop.train`'s step, in its order."""
    step.adapt(i)
    loss = step.loss(perm, i)
    if not bool(torch.isfinite(loss)):
        raise RuntimeError(f"the loss is not finite ({float(loss.detach())})")
    step.prepare(loss, lr)
    opt.step()


def time_cpu(case: str, steps: int) -> tuple[float, float, int]:
    """(median wall ms, median CPU ms, FLOPs) of the case's step on cpu at the current thread count."""
    cfg, step, opt, flops = setup(case, "cpu")
    n = step.xt.shape[0]
    per_epoch = -(-n // step.batch)
    gen = torch.Generator().manual_seed(1)
    perm = torch.randperm(n, generator=gen)
    walls, cpus = [], []
    for k in range(steps + 2):
        i = k % per_epoch
        w0, c0 = time.perf_counter(), time.process_time()
        one_step(step, opt, perm, i, cfg.training.lr)
        if k >= 2:
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
    return 1e3 * statistics.median(walls), 1e3 * statistics.median(cpus), flops


def time_cuda(case: str, blocks: int) -> tuple[float, int]:
    cfg, step, opt, flops = setup(case, "cuda")
    n = step.xt.shape[0]
    per_epoch = -(-n // step.batch)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(1)).cuda()
    for k in range(10):
        one_step(step, opt, perm, k % per_epoch, cfg.training.lr)
    torch.cuda.synchronize()
    times = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for k in range(20):
            one_step(step, opt, perm, k % per_epoch, cfg.training.lr)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / 20)
    return 1e3 * statistics.median(times), flops


def gemm_rate(device: str, size: int = 4096) -> tuple[float, float]:
    """fp32 FLOP/s of a size^3 torch matmul, the fastest of 3 after a warm-up: by the wall clock and
    by the process's CPU time (the one to compare CPU times with: one thread on a busy machine)."""
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    wall = cpu = float("inf")
    for k in range(4):
        if device == "cuda":
            torch.cuda.synchronize()
        w0, c0 = time.perf_counter(), time.process_time()
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        if k:
            wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
    return 2 * size ** 3 / wall, 2 * size ** 3 / cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=7, help="timed steps per case (after 2 warm-up steps)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES), metavar="CASE")
    args = ap.parse_args(argv)

    rows = []   # case, device, FLOPs, wall peak, wall ms, CPU peak, CPU ms (NaN: not measured)
    for threads in args.threads:
        torch.set_num_threads(threads)
        peak, cpu_peak = gemm_rate("cpu")
        for case in args.cases:
            wall, cpu, flops = time_cpu(case, args.steps)
            rows.append((case, f"cpu x{threads}", flops, peak, wall, cpu_peak if threads == 1 else float("nan"), cpu))
    if torch.cuda.is_available():
        peak = gemm_rate("cuda", 8192)[0]
        for case in args.cases:
            ms, flops = time_cuda(case, max(3, args.steps))
            rows.append((case, torch.cuda.get_device_name(), flops, peak, ms, float("nan"), float("nan")))
    print(f"torch {torch.__version__}; {args.steps} timed steps a case (median); floor = FLOPs / peak; the CPU "
          f"columns (one thread): process CPU time, against the peak measured the same way\n")
    print("| step | device | GFLOP | peak GFLOP/s | floor ms | ms | ms / floor | CPU peak GFLOP/s | CPU floor ms "
          "| CPU ms | CPU ms / floor |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for case, dev, flops, peak, wall, cpu_peak, cpu in rows:
        floor, cpu_floor = 1e3 * flops / peak, 1e3 * flops / cpu_peak
        cpu_cols = (f"{cpu_peak / 1e9:.1f} | {cpu_floor:.2f} | {cpu:.2f} | {cpu / cpu_floor:.2f}" if cpu_peak == cpu_peak
                    else "- | - | - | -")
        print(f"| {case} | {dev} | {flops / 1e9:.3f} | {peak / 1e9:.1f} | {floor:.2f} | {wall:.2f} | {wall / floor:.2f} "
              f"| {cpu_cols} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
