"""The run stages the CLI and a notebook call: prepare a problem, `train_gd`, `fit_svm`. A stage writes
its record (`gd/summary.json`, `svm/<objective>/result.json`) last: it is complete exactly when that exists."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from gbcli.config import Config, dump_config
from gbcli.config.schema import GB, machine_memory
from gbcli.data.sources import Dataset
from gbcli.errors import GbError
from gbcli.instruments.base import TrackContext
from gbcli.instruments.core import Tracker
from gbcli.fs.safe import (NotGbs, atomic_write_bytes, atomic_write_text, is_file, is_link, load_tensors_untrusted,
                           present, remove, write_csv, write_npz)
from gbcli.metrics import error
from gbcli.models.base import Problem, Program
from gbcli.programs.certify import NOT_SEPARABLE, certificate
from gbcli.logs import log, run_log
from gbcli.provenance import Clock
from gbcli.text import shorten
from gbcli.programs.design import GatedDesign, Solution, Stop, certified_status, decision, train_outputs
from gbcli.programs.solvers import SOLVERS, check_solver, default_solver
from gbcli.programs.solvers.dual import dual_memory
from gbcli.registry import INSTRUMENTS, program_of, spec_of
from gbcli.store.cache import Busy, SolveCache
from gbcli.store.identity import gd_manifest, svm_manifest
from gbcli.store.integrity import begin_gd, begin_svm, check_same_problem, check_trained, plan_gd, plan_svm
from gbcli.store.lock import check_run_target, run_lock
from gbcli.store.records import GdRecord, ProgramRecord, is_result
from gbcli.store.solutions import compact_arrays
from gbcli.store.labels import write_labels
from gbcli.fs.layout import RunDir
from gbcli.training.memory import check_memory
from gbcli.training.batched import batch_key, train_batched
from gbcli.training.loop import Checkpointing, check_device, read_checkpoint, train
from gbcli.runs.threads import threads_argument
from gbcli.fs import layout
from gbcli.runs import tracking
from gbcli.runs.tracking import Live, tracked

CHECKPOINT_FORMAT = 2   # tensors only (hyperplanes as tensors): loaded with torch.load(weights_only=True)


def dataset_of(cfg: Config) -> Dataset:
    """Load the configured dataset (raises GbError for missing files or impossible sizes)."""
    return cfg.dataset.load()


def prepare(cfg: Config) -> Problem:
    """Load the data and gate it as the model does (deterministic in the config's seeds)."""
    return spec_of(cfg).gating(cfg, dataset_of(cfg))


def build_model(cfg: Config, dim: int) -> nn.Module:
    """The configured network with its seeded initialization (float32)."""
    return spec_of(cfg).build(cfg, dim)


def build_design(objective: str, cfg: Config, problem: Problem, trained: nn.Module | None = None) -> GatedDesign:
    """The gated design of a convex `objective` for this run (protocol section 5)."""
    return program_of(cfg, objective).design(cfg, problem, trained)


def check_single(cfg: Config, command: str) -> None:
    """A sweep config (grid or zip axes) is refused rather than run at its base values."""
    for key in ("grid", "zip"):
        if axes := getattr(cfg, key):
            names = ", ".join(list(axes)[:3]) + (", ..." if len(axes) > 3 else "")
            raise GbError(f"{key}: a sweep config (axes {names}); {command} runs one configuration: run the grid "
                          f"with `gb sweep CONFIG`, or one point with --set and no grid/zip")


MAX_CHECKPOINT_BYTES = 2 ** 30   # gb's networks are megabytes; a larger file, or one that unpacks larger, is not read


def load_checkpoint(path: Path, kind: str | None = None, remedy: str = "; rerun `gb train-gd`") -> dict:
    """A `model.pt` as data (tensors only, never through a link): a real, dense network's state dict (of `kind`)."""
    try:
        state = load_tensors_untrusted(path, MAX_CHECKPOINT_BYTES)
    except NotGbs as exc:
        raise GbError(f"{exc}{remedy}") from None
    if not isinstance(state, dict) or not isinstance(state.get("state_dict"), dict) or \
            not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state["state_dict"].items()):
        raise GbError(f"{path}: not a gb checkpoint{remedy}")
    odd = [k for k, v in state["state_dict"].items() if v.is_complex() or v.layout != torch.strided]
    if odd:   # loading them would cast silently (with torch's warning) into a real, dense network
        raise GbError(f"{path}: holds complex or non-dense tensors ({shorten(', '.join(odd), 80)}), not a gb "
                      f"network's{remedy}")
    if kind is not None and state.get("kind") != kind:
        raise GbError(f"{path}: holds a gd-{shorten(str(state.get('kind')), 40)}, not a gd-{kind}{remedy}")
    return state


def load_trained(run_dir: str | Path, cfg: Config, dim: int, needed_by: str = "this stage") -> nn.Module:
    """The trained network of `run_dir/gd/model.pt` (float64), checked against the config."""
    check_trained(run_dir, cfg, needed_by)
    path = RunDir(run_dir).model
    return spec_of(cfg).load(load_checkpoint(path, cfg.model.kind), cfg, dim, path)


def _initial_model(cfg: Config, problem: Problem) -> nn.Module:
    """The configured network, seeded, with `training.init_from`'s weights (checked: untrusted) if set."""
    torch.manual_seed(cfg.init_seed)  # nothing should draw from the global generator; belt and braces
    model = spec_of(cfg).build(cfg, problem.dataset.dim)
    if cfg.training.init_from is None:
        return model
    path = Path(cfg.training.init_from)
    try:
        state = load_checkpoint(path, cfg.model.kind, remedy="")
    except GbError as exc:
        raise GbError(f"training.init_from: {exc}") from None
    own, theirs = model.state_dict(), state["state_dict"]
    for name, tensor in own.items():
        if name not in theirs or tuple(theirs[name].shape) != tuple(tensor.shape):
            got = "missing" if name not in theirs else f"shape {tuple(theirs[name].shape)}"
            raise GbError(f"training.init_from: {path}: parameter {name} is {got}, this model's is "
                          f"{tuple(tensor.shape)} (another model size)")
    if set(theirs) != set(own):
        raise GbError(f"training.init_from: {path}: parameters {sorted(set(theirs) - set(own))[:3]} are not this "
                      f"model's")
    if not all(torch.isfinite(v).all() for v in theirs.values() if v.is_floating_point()):
        raise GbError(f"training.init_from: {path}: holds non-finite weights")
    mine = None if problem.hyperplanes is None else problem.hyperplanes.to_arrays()
    saved = state.get("hyperplanes")
    if mine is not None and (not isinstance(saved, dict) or set(saved) != set(mine) or not all(
            isinstance(saved[k], torch.Tensor) and np.array_equal(saved[k].numpy(), np.asarray(v)) for k, v in mine.items())):
        raise GbError(f"training.init_from: {path}: its network was gated by other hyperplanes than this config's "
                      f"(contexts or data differ)")
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in theirs.items()})
    return model


def _refuse_lost(run_dir: Path, lost: list[str], what: str, remedy: str) -> None:
    if lost:
        raise GbError(f"--out {run_dir}: holds finished results that {what} would replace: {'; '.join(lost[:4])}"
                      f"{f' and {len(lost) - 4} more' if len(lost) > 4 else ''}; use another --out, or --force to "
                      f"{remedy}")


def check_gd(cfg: Config, run_dir: str | Path, force: bool = False) -> dict | None:
    """Everything `train_gd` refuses, before any write; the finished record of this very config, or None."""
    check_single(cfg, "train-gd")
    check_device(cfg)
    check_memory(cfg)
    run_dir = Path(run_dir)
    check_run_target(run_dir, "train-gd")   # never a folder of the user's: gb would remove its tables/ and figures/
    same, lost = plan_gd(run_dir, cfg)
    if same is None and not force:
        _refuse_lost(run_dir, lost, "training this config", "replace them")
    return None if force else same


def gd_checkpointing(cfg: Config, run_dir: Path, problem: Problem, discard: bool = False,
                     tracker: Tracker | None = None) -> Checkpointing | None:
    """The training's checkpoints (None: off, or instruments a resume would change), resuming one of this very
    config and data unless `discard`; any other is warned about and removed. Under the run lock."""
    path = RunDir(run_dir).checkpoint
    if cfg.training.checkpoint_seconds <= 0 or (cfg.training.track and (tracker is None or not tracker.resumable)):
        return None
    ds, digest = problem.dataset, hashlib.sha256()
    for a in (ds.x_train, ds.y_train, problem.ctx_train):   # the data itself: a file replaced in place is other data
        if a is not None:
            digest.update(np.ascontiguousarray(a).tobytes())
    identity = {"config": gd_manifest(cfg)["config"], "data": digest.hexdigest()[:32],
                "shape": [int(ds.x_train.shape[0]), int(ds.dim), int(ds.x_val.shape[0])]}
    state, why = (None, "") if discard else read_checkpoint(path, identity)
    if why:
        log.warning(f"{path}: {why}; not resumed, training from step 0")
    if state is None and present(path):
        remove(path)
    if state is not None:
        log.info(f"resuming from {path} at step {state['step']}")
        if state.get("torch") != str(torch.__version__):   # still the same computation, but other kernels
            log.warning(f"{path}: written under torch {str(state.get('torch'))[:40]}, resumed under "
                        f"{torch.__version__}: the result may differ in the last bits from an uninterrupted run")
    return Checkpointing(path, identity, cfg.training.checkpoint_seconds, state)


@threads_argument   # threads=: torch's and BLAS's count for the call (default 1, as gb train-gd)
def train_gd(cfg: Config, run_dir: str | Path, progress: bool = True, problem: Problem | None = None,
             force: bool = False, labels: dict | None = None, cache: SolveCache | None = None) -> dict:
    """Train into `run_dir/gd/`; unless `force`, a network of this very config is kept (`skipped`), others refused."""
    same = check_gd(cfg, run_dir, force)
    tracking.check(cfg)
    if same is not None:   # nothing to train; tracked, the records are logged as `gb runs export mlflow` does
        lead = f"{RunDir(run_dir).gd}: already trained from this config ({same.get('status')}; --force retrains)"
        return {**same, "skipped": True, "tracked": tracking.replay_done(cfg, run_dir, lead)}
    clock = Clock()
    problem = problem or prepare(cfg)
    ds = problem.dataset
    model = _initial_model(cfg, problem)
    tracker = make_tracker(cfg, problem, cache, Path(run_dir).name)
    with run_lock(run_dir), run_log(run_dir):
        begin_gd(Path(run_dir), cfg)   # the old stage and what depended on it go before anything new is written
        write_labels(run_dir, labels or {})
        log.info(f"train-gd {cfg.model.predictor}: {ds.x_train.shape[0]} training points, {ds.dim} features "
                 f"({'forced: ' if force else ''}{clock.started})")
        checkpoint = gd_checkpointing(cfg, Path(run_dir), problem, discard=force, tracker=tracker)
        live = Live.start(cfg, run_dir, "train-gd", fresh=checkpoint is None or checkpoint.resume is None)
        with tracked(live):
            res = train(model, cfg, ds.x_train, ds.y_train, problem.ctx_train, ds.x_val, ds.y_val, problem.ctx_val,
                        progress=progress, tracker=tracker, checkpoint=checkpoint, on_row=live and live.row)
            summary = _write_gd(cfg, Path(run_dir), problem, model, res, tracker, clock)
        log.info(f"train-gd {summary['predictor']}: {summary['status']}, train error {summary['train_error']:.4f}, "
                 f"val error {summary['val_error']:.4f}, {summary['steps']} steps in {summary['seconds']:.1f} s "
                 f"-> {RunDir(run_dir).gd}")
        return summary


def train_gd_group(cfgs: list[Config], run_dirs: list[str | Path], problems: list[Problem] | None = None) -> list[dict]:
    """Networks that share a batch key trained as one computation (else each by `train_gd`), written as it would."""
    finished = any(check_gd(c, d) is not None for c, d in zip(cfgs, run_dirs))   # each alone (skips)
    clock = Clock()
    problems = problems or ([None] * len(cfgs) if finished else [prepare(c) for c in cfgs])
    resuming = any(present(RunDir(d).checkpoint) for d in run_dirs)
    if not finished and len(cfgs) > 1 and batch_key(cfgs[0]) is not None and not resuming:
        models = [_initial_model(c, p) for c, p in zip(cfgs, problems)]
        with contextlib.ExitStack() as stack:   # the locks, then the tracked runs (closed first)
            for d in run_dirs:
                stack.enter_context(run_lock(d))
            checkpoints = [gd_checkpointing(c, Path(d), p, discard=True) for c, d, p in zip(cfgs, run_dirs, problems)]
            for cfg in cfgs:
                tracking.check(cfg)
            lives = [Live.start(c, d, "train-gd", fresh=True) for c, d in zip(cfgs, run_dirs)]
            for live in lives:
                stack.enter_context(tracked(live))
            results = train_batched(models, cfgs, problems, checkpoints, [live and live.row for live in lives])
            if results is not None:
                out = []
                for cfg, d, problem, model, res in zip(cfgs, run_dirs, problems, models, results):
                    begin_gd(Path(d), cfg)
                    out.append(_write_gd(cfg, Path(d), problem, model, res, None, clock,
                                         batched=f"trained as one computation with {len(cfgs)} networks"))
                return out
    return [train_gd(c, d, progress=False, problem=p) for c, d, p in zip(cfgs, run_dirs, problems)]


def _write_gd(cfg: Config, run_dir: Path, problem: Problem, model: nn.Module, res, tracker, clock: Clock,
              batched: str | None = None) -> dict:
    ds = problem.dataset
    run = RunDir(run_dir)
    atomic_write_text(run.gd_config, dump_config(cfg))
    write_csv(run.metrics, res.metrics)
    buf = io.BytesIO()
    hyperplanes = None if problem.hyperplanes is None else \
        {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in problem.hyperplanes.to_arrays().items()}
    torch.save({"kind": cfg.model.kind, "format": CHECKPOINT_FORMAT, "state_dict": model.cpu().state_dict(),
                "hyperplanes": hyperplanes}, buf)
    atomic_write_bytes(run.model, buf.getvalue())
    published = spec_of(cfg).published_outputs(model, cfg, problem) if not res.diverged else None
    write_npz(run.gd_predictions, train_out=res.train_out, val_out=res.val_out,
              **({} if published is None else {"val_out_published": published}))
    last = res.metrics.iloc[-1]
    summary = {"predictor": cfg.model.predictor, "train_error": error(res.train_out, ds.y_train),
               "val_error": error(res.val_out, ds.y_val), "train_loss": float(last["train_loss"]),
               "weight_norm": float(last["weight_norm"]), "normalized_margin": float(last["normalized_margin"]),
               "steps": res.steps, "seconds": res.seconds,
               "status": "diverged" if res.diverged or not np.isfinite(last["train_loss"]) else "ok"}
    if summary["status"] != "ok":
        summary["message"] = res.diverged or f"the training loss is {last['train_loss']}"
    if res.resumed_from is not None:   # continued from gd/checkpoint.pt: the same result as one run
        summary["resumed_from_step"] = res.resumed_from
    summary["manifest"] = gd_manifest(cfg)
    summary["provenance"] = {**clock.stamp(), **({"batched": batched} if batched else {})}
    if tracker is not None:
        summary["track"] = {**tracker.info, **{k: float(last[k]) for k in tracker.columns if k in last}}
    if tracker is not None and summary["status"] == "ok":
        for stem, table in tracker.final_tables(model.cpu()).items():   # e.g. paper 001's neurons.csv
            write_csv(run.gd / f"{stem}.csv", table)
    GdRecord(run.summary, summary).write()
    remove(run.checkpoint)   # finished: nothing to resume
    return summary


def make_tracker(cfg: Config, problem: Problem, cache: SolveCache | None = None,
                 origin: str = "track") -> Tracker | None:
    """The instruments of `training.track`, sharing one solve of each program (with `cache`: fit-svm's too)."""
    if not cfg.training.track:
        return None

    def solve(objective: str, trained: nn.Module | None = None):
        design = build_design(objective, cfg, problem, trained)
        use, tol = cfg.svm.solver or default_solver(design.norm), cfg.svm.certify_tol
        # fit-svm's key (a reference solved here is fit-svm's answer too, and the reverse); none for a program
        # of the trained network, this run's own
        key = None if cache is None or trained is not None else _solve_key(cfg, cache, design, use)
        with contextlib.nullcontext() if key is None else cache.claim(key):   # a twin solving it: wait, take it
            hit = None if key is None else cache.get(key, design)
            sol, cert = (None, None) if hit is None else (hit[0], certificate(design, hit[0], tol))
            if sol is None or not cert["certified"]:
                sol = SOLVERS[use].solve(design, cfg.svm.max_iters, cfg.svm.eps,
                                         **solve_options(cfg, use, None if key is None else (cache.rounds(key), key)))
                cert = certificate(design, sol, tol)
                if key is not None and sol.status == "optimal" and cert["certified"]:
                    cache.put(key, sol, f"{origin}/{objective}")
        if sol.zeta is None:
            raise GbError(f"training.track: the program {objective} has no solution ({sol.status}: {sol.message})")
        if not cert["certified"]:   # an uncertified optimum measures against a point nobody vouches for
            raise GbError(f"training.track: the program {objective} is not certified (relative gap "
                          f"{cert['rel_gap']:.1e}, smallest margin {cert['min_margin']:.6g}; svm.certify_tol "
                          f"{tol:g}): its solution cannot be a reference (svm.eps, svm.max_iters)")
        return design, sol

    instruments = [ins for name, ins in INSTRUMENTS.items() if name in cfg.training.track]
    return Tracker(instruments, TrackContext(cfg, spec_of(cfg), problem, solve), cfg.model.homogeneity)


def check_svm_request(cfg: Config, objectives: list[str], solver: str | None) -> dict[str, Program]:
    """Refuse impossible requests before anything is computed or written; returns the programs."""
    if not objectives:
        raise GbError("svm.objectives: nothing to solve (list objectives in the config or pass --objective)")
    programs = {o: program_of(cfg, o) for o in objectives}
    n, ram = cfg.dataset.train_size, machine_memory()
    asked = {"time_limit": cfg.svm.time_limit is not None, "device": cfg.svm.device != "cpu"}
    for o, p in programs.items():
        use = None if p.norm is None else (solver or default_solver(p.norm))
        if use == "dual" and dual_memory(n, p.norm) > ram:   # three N x N float64 arrays (|W| x |W|: a working set)
            raise GbError(f"dataset.train_size: {o} through the dual solver needs about {dual_memory(n, p.norm) / GB:.1f} "
                          f"GB for N = {n:,} (three N x N arrays), more than this machine's {ram / GB:.0f} GB")
        if solver is not None and p.norm is not None:
            check_solver(solver, o, p.norm)
        for opt in [k for k, v in asked.items() if v]:
            if use is None or opt not in SOLVERS[use].honours:
                raise GbError(f"svm.{opt}: {o} is solved by {use or 'its own non-convex search'}, which does not "
                              f"honour it (only the dual solver does)")
    if cfg.svm.device == "cuda" and not torch.cuda.is_available():
        raise GbError("svm.device: cuda was asked for, but torch sees no CUDA device (use cpu)")
    return programs


def solve_options(cfg: Config, solver: str, checkpoint: tuple | None = None, stop=None) -> dict:
    """The options of a solve beyond max_iters and eps that `solver` honours."""
    wanted = {"device": cfg.svm.device, "time_limit": cfg.svm.time_limit, "checkpoint": checkpoint, "stop": stop}
    return {k: v for k, v in wanted.items() if k in SOLVERS[solver].honours}


def _solve_key(cfg: Config, cache: SolveCache, design: GatedDesign, solver: str) -> str:
    """fit-svm's key of the program `design` solved by `solver` in the solve cache."""
    return cache.key(design, solver, cfg.svm.max_iters, cfg.svm.eps, cfg.svm.certify_tol,
                     solve_options(cfg, solver).get("device", "cpu"))


@threads_argument   # as train_gd
def fit_svm(cfg: Config, run_dir: str | Path, objectives: list[str] | None = None, solver: str | None = None,
            progress: bool = True, problem: Problem | None = None, echo=None,
            cache: SolveCache | None = None, force: bool = False, defer: bool = False,
            labels: dict | None = None) -> list[dict]:
    """Solve each objective into `run_dir/svm/<objective>/` (a failure is recorded, not raised); unless `force`,
    one solved from this config is kept (`skipped`), others refused. `defer`: one solved elsewhere: `Deferred`."""
    run_dir = Path(run_dir)
    objectives = list(objectives or cfg.svm.objectives)
    solver = solver or cfg.svm.solver
    check_single(cfg, "fit-svm")
    programs = check_svm_request(cfg, objectives, solver)
    check_run_target(run_dir, "fit-svm")
    check_same_problem(run_dir, cfg)   # one run directory holds one problem
    needing = [o for o, p in programs.items() if p.needs_trained]
    if needing:   # before loading any data
        check_trained(run_dir, cfg, " and ".join(needing))
    done, lost = {}, []
    for o, p in programs.items():
        same, loss = plan_svm(run_dir, cfg, o, p.needs_trained)
        if same is not None and not force:
            done[o] = {**same, "skipped": True}
        elif loss is not None and not force:
            lost.append(loss)
    _refuse_lost(run_dir, lost, "this fit-svm", "solve again")
    todo = {o: p for o, p in programs.items() if o not in done}
    tracking.check(cfg)
    if not todo:   # nothing to solve; tracked, the records are logged as `gb runs export mlflow` does
        lead = f"{RunDir(run_dir).svm}: {', '.join(programs)} already solved from this config (--force solves again)"
        said = tracking.replay_done(cfg, run_dir, lead)
        return [{**done[o], "tracked": said} for o in programs]
    problem = problem or prepare(cfg)
    needing = [o for o, p in todo.items() if p.needs_trained]
    trained = load_trained(run_dir, cfg, problem.dataset.dim, " and ".join(needing)) if needing else None
    with run_lock(run_dir), run_log(run_dir):
        write_labels(run_dir, labels or {})
        live = Live.start(cfg, run_dir, "fit-svm")
        cache, solved = cache or SolveCache(), {}

        def say(msg: str, shown=echo) -> None:   # the run's log.txt and the caller's echo
            log.info(msg)
            if shown is not None:
                shown(msg)

        with tracked(live):
            for obj, prog in todo.items():
                try:
                    solved[obj] = _solve_one(cfg, run_dir, obj, prog, solver, problem, say, cache, trained, defer)
                except Busy:   # with `defer`: its claim is held elsewhere; nothing of it written
                    say(f"  {obj}: the same program is being solved by another point; this point comes back to "
                        f"it later")
    if len(solved) < len(todo):
        raise Deferred([o for o in todo if o not in solved])
    return [done.get(o) or solved[o] for o in programs]


class Deferred(Exception):
    """fit_svm(defer=True): these objectives' programs are being solved by another process."""

    def __init__(self, objectives: list[str]):
        super().__init__(", ".join(objectives))
        self.objectives = objectives


def _solve_one(cfg: Config, run_dir: Path, obj: str, prog: Program, solver: str | None, problem: Problem,
               echo, cache: SolveCache, trained: nn.Module | None, defer: bool) -> dict:
    clock = Clock()
    out = RunDir(run_dir).program(obj)
    begin_svm(run_dir, obj)
    manifest = svm_manifest(cfg, run_dir, prog.needs_trained)
    if prog.fit is not None:   # a non-convex program (paper 003): its own solver
        result, arrays = prog.fit(obj, cfg, spec_of(cfg), problem, trained if prog.needs_trained else None, echo)
        return _write_result(cfg, out, {**result, "manifest": manifest, "provenance": clock.stamp()}, arrays)
    design = prog.design(cfg, problem, trained if prog.needs_trained else None)
    use = solver or default_solver(design.norm)
    echo(f"fit-svm {obj}: {design.rows} x {design.x_train.shape[1]} variables, "
         f"{len(design.y_train)} margins, solver {use} ...")
    job = _ProgramSolve(cfg, obj, design, problem, manifest, cache, out, echo, use)
    with cache.claim(job.key, wait=not defer):   # a twin program being solved elsewhere: wait (or Busy)
        found = job.lookup()
        sol, origin = found or job.solve()
        r = job.record(sol, origin, clock)
        if found is None and not r["certified"] and (sol.status != "inaccurate" or job.arrived):
            late = job.arrived[0] if job.arrived else job.shared_ray()   # a ray another worker certified meanwhile
            if late is not None:
                found, (sol, origin) = late, late
                r = job.record(sol, origin, clock)
        if is_result(r["status"], r["certified"]):
            job.keep(sol, r, origin if found is not None else None, f"{run_dir.name}/{obj}")
    job.report(r, sol, origin)
    return r


class _ProgramSolve:
    """Solving one convex program: look it up (cache, shared ray), solve, take a late ray, record, keep, report."""

    def __init__(self, cfg: Config, obj: str, design: GatedDesign, problem: Problem, manifest: dict,
                 cache: SolveCache, out: Path, echo, use: str):
        self.cfg, self.obj, self.design, self.problem, self.manifest = cfg, obj, design, problem, manifest
        self.cache, self.out, self.echo, self.use = cache, out, echo, use
        self.key = _solve_key(cfg, cache, design, use)
        self.ckey = cache.constraints_key(design)
        self.arrived: list = []   # a ray another worker certified while this program was solved
        self.rounds = out / layout.ROUNDS

    def record(self, sol, origin: str | None, clock: Clock | None = None, write: bool = True) -> dict:
        return _record(self.obj, self.cfg, self.design, sol, self.out, self.problem.dataset, self.manifest, origin,
                       write=write, clock=clock)

    def lookup(self) -> tuple[Solution, str] | None:
        """A certified answer already there: the cache's entry (certified here again), or a shared ray."""
        hit = self.cache.get(self.key, self.design, warn=self.echo)
        if hit is not None:
            r = self.record(hit[0], hit[1], write=False)
            if not is_result(r["status"], r["certified"]):
                self.echo(f"  warning: solve cache entry {self.cache.entry(self.key)} does not certify this program "
                          f"({r['status']}, rel gap {r.get('rel_gap')}); solving again and replacing it")
                hit = None
        return hit or self.shared_ray()

    def shared_ray(self) -> tuple[Solution, str] | None:
        """A dual ray stored for these constraints by another program, if it certifies this one infeasible."""
        found = self.cache.get(self.ckey, self.design, warn=self.echo)
        if found is None or found[0].status != "infeasible" or found[0].lam is None:
            return None
        ray, origin = found
        sol = Solution(None, "infeasible", float("nan"), 0.0, ray.solver,
                       f"the dual ray of {origin}, a program with the same constraints (training inputs, labels "
                       f"and gates): {ray.message}", ray.iterations, ray.lam, Stop.SHARED_RAY)
        r = self.record(sol, origin, write=False)
        if not (r["certified"] and r["status"] == "infeasible"):
            self.echo(f"  the dual ray of {origin} (the same constraints) does not certify this program "
                      f"(relative margin bound {r.get('relative_margin_bound')}); solving it")
            return None
        self.echo(f"  certified infeasible by the dual ray of {origin}, a program with the same constraints")
        return sol, origin

    def solve(self) -> tuple[Solution, None]:
        """The solver's answer; rounds resume from the sweep cache's checkpoint (any twin's), else the point's."""
        local, shared = self.out / layout.ROUNDS, self.cache.rounds(self.key)
        if shared is not None and not present(shared) and is_file(local):   # the point's own (not a link), taken over
            os.replace(local, shared)
        self.rounds = local if shared is None else shared

        def ray_arrived() -> str | None:   # asked between working-set rounds
            if self.cache.folder is not None and not self.arrived:
                self.arrived.extend(filter(None, [self.shared_ray()]))
            return f"the dual ray of {self.arrived[0][1]} certifies this program infeasible" if self.arrived else None

        return SOLVERS[self.use].solve(self.design, self.cfg.svm.max_iters, self.cfg.svm.eps,
                                       **solve_options(self.cfg, self.use, (self.rounds, self.key), ray_arrived)), None

    def keep(self, sol: Solution, r: dict, origin: str | None, here: str) -> None:
        """A certified answer into the cache (a ray also under its constraints); the round checkpoints removed."""
        if origin is None:
            self.cache.put(self.key, sol, here)
            if r["status"] == "infeasible":
                self.cache.put(self.ckey, sol, here)
        elif r["status"] == "infeasible" and self.cache.get(self.key) is None:
            self.cache.put(self.key, sol, origin)
        for done_with in {self.rounds, self.out / layout.ROUNDS}:
            if not is_link(done_with):
                remove(done_with)

    def report(self, r: dict, sol: Solution, origin: str | None) -> None:
        echo, bound = self.echo, r.get("relative_margin_bound")
        if origin is not None and sol.stop is not Stop.SHARED_RAY:
            echo(f"  the same program as {origin}: its solution reused, certified here on this design")
        if r["status"] == "infeasible" and r["certified"]:
            echo(f"  infeasible, certified by a dual ray (every predictor's relative margin <= "
                 f"{r['relative_margin_bound']:.1e}): {r['message']} ({r['solve_seconds']:.1f} s)")
        elif r["status"] == "infeasible":   # the solver's ray, which the certificate did not bear out
            echo(f"  uncertified: the solver took the dual for unbounded, but its ray bounds every predictor's "
                 f"relative margin only by {bound:.1e}, not below the {NOT_SEPARABLE:g} that certifies infeasibility "
                 f"(the data may be separable with a margin that small) ({r['solve_seconds']:.1f} s)")
        elif r["status"] == "failed":
            echo(f"  {r['status']}: {r['message']} ({r['solve_seconds']:.1f} s)"
                 + ("" if bound is None else f"; by weak duality every predictor's relative margin <= {bound:.1e}"))
        else:
            cert = "certified" if r["certified"] else "NOT certified"
            echo(f"  {r['status']}: objective {r['objective']:.6g}, val error {r['val_error']:.4f}, "
                 f"{r['solve_seconds']:.1f} s; {cert} (rel gap {r['rel_gap']:.1e}, min margin {r['min_margin']:.7f})"
                 + (f"; {r['message']}" if r["message"] else ""))


def _write_result(cfg: Config, out: Path, result: dict, arrays: dict) -> dict:
    """config.yaml, the arrays (stale ones removed), result.json last."""
    atomic_write_text(out / layout.CONFIG, dump_config(cfg))
    for stem, name in (("predictions", layout.PREDICTIONS), ("compact", layout.COMPACT), ("theta", layout.THETA)):
        if stem in arrays:
            write_npz(out / name, **arrays[stem])
        else:
            remove(out / name)
    ProgramRecord(out / layout.RESULT, result).write()
    return result


def _record(obj: str, cfg: Config, design: GatedDesign, sol, out: Path, ds: Dataset, manifest: dict,
            cached_from: str | None = None, write: bool = True, clock: Clock | None = None) -> dict:
    """The certified record of a solution on `design` (written to `out` unless `write` is False)."""
    result = {"predictor": obj, "solver": sol.solver, "status": sol.status, "objective": sol.value,
              "solve_seconds": sol.seconds, "message": sol.message, "train_error": float("nan"),
              "val_error": float("nan"), **certificate(design, sol, cfg.svm.certify_tol), "manifest": manifest}
    if (demoted := certified_status(result["status"], result["certified"])) != result["status"]:
        result["status"] = demoted
        why = (f"not certified at svm.certify_tol = {cfg.svm.certify_tol:g} (relative gap {result['rel_gap']:.1e}, "
               f"smallest margin {result['min_margin']:.7f})")
        result["message"] = f"{why}; {result['message']}" if result["message"] else why
    elif result["status"] == "inaccurate" and result["certified"]:   # the certificate proves it within the tol
        result["status"] = "optimal"
        result["message"] = (f"certified at svm.certify_tol = {cfg.svm.certify_tol:g} (relative gap "
                             f"{result['rel_gap']:.1e}) although the solver stopped short: {result['message']}")
    if cached_from is not None:   # the solution of an identical program, certified again on this design
        result["cached_from"] = cached_from
    result["device"] = cfg.svm.device if "device" in getattr(SOLVERS.get(sol.solver), "honours", ()) else "cpu"
    result["stop"] = Stop(sol.stop).value
    if sol.stop is Stop.TIME_LIMIT and not result["certified"]:   # `fit-svm` / a sweep's rerun solves it again
        result["time_limited"] = True
    if clock is not None:
        result["provenance"] = clock.stamp()
    arrays = {}
    if sol.zeta is not None:
        train_out, train_y = train_outputs(design, sol.zeta)   # svm-pos / svm-neg: every training point
        val_out = decision(sol.zeta, design.x_val, design.e_val)
        result.update(train_error=error(train_out, train_y), val_error=error(val_out, ds.y_val))
        arrays = {"predictions": {"train_out": train_out, "val_out": val_out}}
    has_lam = sol.lam is not None and np.all(np.isfinite(sol.lam))   # a dual certificate, a ray, or a bound
    if write and (sol.zeta is not None or has_lam):   # the compact file that `gb verify` checks
        arrays["compact"] = compact_arrays(obj, design, sol.zeta, sol.lam, arrays.get("predictions", {}).get("val_out"),
                                           result, cfg.svm.certify_tol)
    return _write_result(cfg, out, result, arrays) if write else result
