"""The run-level API: prepare a problem, train the GD network, solve the convex programs.

These functions are what the CLI calls; a notebook user can call them directly:

    cfg = load_config("configs/quickstart.yaml")
    train_gd(cfg, "runs/quickstart")
    fit_svm(cfg, "runs/quickstart")
    errors, inconsistency = tables.compare("runs/quickstart")

Run directory layout: `gd/` (config.yaml, metrics.csv, model.pt, predictions.npz,
summary.json) and `svm/<objective>/` (config.yaml, result.json, predictions.npz,
solution.npz). `summary.json` / `result.json` are written last: a stage is complete exactly
when that file exists.
"""

from __future__ import annotations

import dataclasses
import io
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import contexts as ctxs
from .config import Config, dump_config
from .data import Dataset, load_dataset
from .errors import GbError
from .io import atomic_write_bytes, atomic_write_text, read_json, write_csv, write_json, write_npz
from .models import ReLUNet, build_model
from .dual import solve_dual
from .programs import (DEFAULT_SOLVER, NORM_OF, QUADRATIC, GatedDesign, certificate, decision,
                       reference_groups, solve_primal, unit_groups)
from .theory import TRACKED_COLUMNS, Tracker, matching_objective
from .nonconvex import NONCONVEX, fit_nonconvex
from .training import error, train

NEEDS_TRAINED_RELU = ("svm-lc", "svm-hl", "svm-gates")


@dataclass
class Problem:
    """A dataset with the gating of the configured architecture."""

    dataset: Dataset
    hyperplanes: ctxs.Hyperplanes | None   # GLN / shallow contexts
    ctx_train: np.ndarray | None           # (N, H) local contexts
    ctx_val: np.ndarray | None


def dataset_of(cfg: Config) -> Dataset:
    """Load the configured dataset (raises GbError for missing files or impossible sizes)."""
    d = cfg.dataset
    if d.name == "points":   # paper 003's explicit points (gbcli.nonconvex)
        from .nonconvex import points_dataset

        return points_dataset(d.x, d.y)
    ds = load_dataset(d.name, train_size=d.train_size, val_size=d.val_size, data_seed=d.data_seed,
                      data_dir=d.data_dir, positive_classes=d.positive_classes, n_samples=d.n_samples,
                      dim=d.dim, synthetic_seed=d.synthetic_seed, margin=d.margin, bias=d.bias,
                      classes=d.classes)
    if d.max_norm is None:
        return ds
    # one constant for every point, so the geometry (and separability) is unchanged
    s = d.max_norm / np.linalg.norm(ds.x_pool, axis=1).max()
    return dataclasses.replace(ds, x_train=ds.x_train * s, x_val=ds.x_val * s, x_pool=ds.x_pool * s)


def prepare(cfg: Config) -> Problem:
    """Load the data and sample the contexts (deterministic in the config's seeds)."""
    ds = dataset_of(cfg)
    if cfg.model.kind not in ("gln", "shallow"):
        return Problem(ds, None, None, None)
    c = cfg.contexts
    hp = ctxs.sample_hyperplanes(cfg.units, c.count, ds.x_pool, c.seed, c.median_init, c.normal_std, c.offset_std)
    return Problem(ds, hp, hp.local_contexts(ds.x_train), hp.local_contexts(ds.x_val))


# ------------------------------------------------------------------ GD


def train_gd(cfg: Config, run_dir: str | Path, progress: bool = True, problem: Problem | None = None) -> dict:
    """Train the configured network and write `run_dir/gd/`; returns the summary."""
    problem = problem or prepare(cfg)
    ds = problem.dataset
    torch.manual_seed(cfg.init_seed)  # nothing should draw from the global generator; belt and braces
    model = build_model(cfg, ds.dim)
    tracker = make_tracker(cfg, problem)
    res = train(model, cfg, ds.x_train, ds.y_train, problem.ctx_train, ds.x_val, ds.y_val, problem.ctx_val,
                progress=progress, tracker=tracker)
    out = Path(run_dir) / "gd"
    atomic_write_text(out / "config.yaml", dump_config(cfg))
    write_csv(out / "metrics.csv", res.metrics)
    buf = io.BytesIO()
    torch.save({"kind": cfg.model.kind, "state_dict": model.cpu().state_dict(),
                "hyperplanes": None if problem.hyperplanes is None else problem.hyperplanes.to_arrays()}, buf)
    atomic_write_bytes(out / "model.pt", buf.getvalue())
    write_npz(out / "predictions.npz", train_out=res.train_out, val_out=res.val_out)
    last = res.metrics.iloc[-1]
    summary = {
        "predictor": cfg.model.predictor, "train_error": error(res.train_out, ds.y_train),
        "val_error": error(res.val_out, ds.y_val), "train_loss": float(last["train_loss"]),
        "weight_norm": float(last["weight_norm"]), "normalized_margin": float(last["normalized_margin"]),
        "steps": res.steps, "seconds": res.seconds, "status": "ok" if np.isfinite(last["train_loss"]) else "nan",
    }
    if tracker is not None:
        summary["track"] = {**tracker.info, **{k: float(last[k]) for k in TRACKED_COLUMNS if k in last}}
        neurons = tracker.neurons(model.cpu())
        if neurons is not None:   # paper 001: the final per-neuron alignments
            write_csv(out / "neurons.csv", neurons)
    write_json(out / "summary.json", summary)
    return summary


def make_tracker(cfg: Config, problem: Problem) -> Tracker | None:
    """The instruments of `training.track`; margin and agreement solve the matching program once here."""
    t = cfg.training
    if not t.track:
        return None
    solution = design = None
    if {"margin", "agreement"} & set(t.track) or "clusters" in t.track:
        objective = matching_objective(cfg.model.kind, t.descent)
        design = build_design(objective, cfg, problem)
        use = DEFAULT_SOLVER[design.norm]
        solution = (solve_dual(design, cfg.svm.eps, cfg.svm.max_iters) if use == "dual"
                    else solve_primal(design, use, cfg.svm.max_iters, cfg.svm.eps))
        if solution.zeta is None:
            raise GbError(f"training.track: the matching program {objective} has no solution "
                          f"({solution.status}: {solution.message})")
    tracker = Tracker(t.track, cfg.model.homogeneity, t.descent, design, solution,
                      references=alignment_references(cfg, problem) if "alignment" in t.track else None,
                      x_val=problem.dataset.x_val)
    if cfg.model.kind == "leaky":   # svm-par's optimum bounds only perfectly clustered nets in the PAR
        k, v = cfg.model.hidden_units // 2, cfg.model.output_weight
        del tracker.info["best_normalized_margin"]
        tracker.info["par_normalized_margin"] = v * np.sqrt(k) / np.sqrt(solution.value)
        # the PAR's gate signs at the svm-par solution (the theorem's limit only if they hold):
        # positives <w,x> > 0 > <u,x>, negatives <w,x> < 0 < <u,x>
        yx = problem.dataset.y_train[:, None] * (problem.dataset.x_train @ solution.zeta.T)
        tracker.info["par_consistent"] = float(np.mean((yx[:, 0] > 0) & (yx[:, 1] < 0)))
        tracker.best = None
    if tracker.references is not None:
        tracker.info.update(tracker.references.pop("info"))
    return tracker


def alignment_references(cfg: Config, problem: Problem) -> dict:
    """Paper 001's reference directions: w+ (svm-pos), w- (svm-neg) and the class means mu+, mu-."""
    ds, refs, info = problem.dataset, {}, {}
    for obj, key in (("svm-pos", "pos"), ("svm-neg", "neg")):
        sol = solve_dual(build_design(obj, cfg, problem), cfg.svm.eps, cfg.svm.max_iters)
        if sol.zeta is None:
            raise GbError(f"training.track: alignment needs {obj}, which has no solution ({sol.status}: {sol.message})")
        s = 1.0 if key == "pos" else -1.0
        refs[f"w_{key}"], refs[f"mean_{key}"] = sol.zeta[0], ds.x_train[ds.y_train == s].mean(0)
        info[f"{obj}_objective"] = sol.value
        info[f"cos_w_{key}_mean_{key}"] = float(refs[f"w_{key}"] @ refs[f"mean_{key}"] / (
            np.linalg.norm(refs[f"w_{key}"]) * np.linalg.norm(refs[f"mean_{key}"])))
    return {**refs, "info": info}


def compare_run(run_dir: str | Path):
    """`gb compare`: the run's error and inconsistency tables, and, when the run has them, the
    tracked instruments' figure (figures/training.png) and paper 003's tables/kkt.csv.
    errors.csv is written last: a sweep counts the point as done when it exists."""
    from .figures import plot_run_training
    from .nonconvex import write_kkt_table
    from .tables import compare, write_tables

    errors, incons = compare(run_dir)
    plot_run_training(run_dir)
    write_kkt_table(run_dir)
    write_tables(run_dir, errors, incons)
    return errors, incons


def load_relu(run_dir: str | Path, cfg: Config) -> ReLUNet:
    """The trained gd-relu / gd-frelu of a run directory (for svm-lc, svm-hl, svm-gates)."""
    path = Path(run_dir) / "gd" / "model.pt"
    if not (Path(run_dir) / "gd" / "summary.json").is_file():
        raise GbError(f"{path}: svm-lc, svm-hl and svm-gates need the trained {cfg.model.predictor} "
                      f"of this run (run `gb train-gd` first)")
    state = torch.load(path, weights_only=False)
    if state["kind"] != cfg.model.kind:
        raise GbError(f"{path}: holds a gd-{state['kind']}, but the config's model.kind is {cfg.model.kind}")
    sd = state["state_dict"]
    if sd["w1"].shape[0] != cfg.units:
        raise GbError(f"{path}: has {sd['w1'].shape[0]} hidden units, the config has model.hidden_units = {cfg.units}")
    net = ReLUNet(sd["w1"].shape[0], sd["w1"].shape[1])
    net.w_gate = sd["w_gate"]
    net.load_state_dict(sd)
    return net.double()


# ------------------------------------------------------------------ convex programs


def build_design(objective: str, cfg: Config, problem: Problem, relu: ReLUNet | None = None) -> GatedDesign:
    """The gated design of `objective` for this run (protocol section 5)."""
    ds, norm = problem.dataset, NORM_OF[objective]
    if objective in PAPER_OBJECTIVES:
        return paper_design(objective, cfg, ds)
    xt, xv = ds.x_train, ds.x_val
    h, c = cfg.units, cfg.contexts.count
    if objective in ("svm-shallow", "svm-l2", "svm-gln", "svm-l2-reference", "svm-gln-reference"):
        if problem.ctx_train is None:  # linear model: one context
            et, ev = np.ones((len(xt), 1)), np.ones((len(xv), 1))
        elif objective == "svm-shallow":
            # one predictor per global context; a context without training points gets zero weights,
            # so only the used ones are columns (C = 2^15 would make a 12000 x 32768 one-hot)
            used = np.unique(problem.ctx_train[:, 0])
            col = np.full(c, -1)
            col[used] = np.arange(len(used))
            et = ctxs.one_hot(col[problem.ctx_train[:, :1]], len(used))
            ev = np.zeros((len(xv), len(used)))
            seen = col[problem.ctx_val[:, 0]] >= 0
            ev[np.flatnonzero(seen), col[problem.ctx_val[seen, 0]]] = 1.0
        else:
            et, ev = ctxs.one_hot(problem.ctx_train, c), ctxs.one_hot(problem.ctx_val, c)
        if objective == "svm-shallow":
            return GatedDesign(xt, ds.y_train, et, xv, ev, norm, [], h, c)
        groups = reference_groups(h, c) if objective == "svm-gln-reference" else unit_groups(h, c)
        return GatedDesign(xt, ds.y_train, et, xv, ev, norm, groups, h, c)
    if objective == "svm-l1":   # linear model: one always-on context
        return GatedDesign(xt, ds.y_train, np.ones((len(xt), 1)), xv, np.ones((len(xv), 1)), norm)
    if objective == "svm-rc":
        gates = ctxs.random_relu_gates(h, ds.x_pool, cfg.contexts.seed)
        gt, gv = gates.local_contexts(xt), gates.local_contexts(xv)
    else:
        with torch.no_grad():
            to = lambda a: torch.as_tensor(a, dtype=torch.float64)
            gt, gv = relu.gates(to(xt)).numpy(), relu.gates(to(xv)).numpy()
            if objective == "svm-hl":
                ft, fv = relu.hidden(to(xt)).numpy(), relu.hidden(to(xv)).numpy()
                return GatedDesign(ft, ds.y_train, np.ones((len(ft), 1)), fv, np.ones((len(fv), 1)), norm)
        if objective == "svm-gates":
            return GatedDesign(gt.astype(float), ds.y_train, np.ones((len(gt), 1)), gv.astype(float),
                               np.ones((len(gv), 1)), norm)
    # FReLU design: an always-on unit plus one unit per gate, each its own group
    et = np.hstack([np.ones((len(xt), 1)), gt]).astype(float)
    ev = np.hstack([np.ones((len(xv), 1)), gv]).astype(float)
    return GatedDesign(xt, ds.y_train, et, xv, ev, norm, [np.array([r]) for r in range(h + 1)], h + 1, 1)


PAPER_OBJECTIVES = ("svm-pos", "svm-neg", "svm-par")


def paper_design(objective: str, cfg: Config, ds: Dataset) -> GatedDesign:
    """Linear SVMs (norm sq) of papers 001 and 002 as gated designs.

    - svm-pos (001): w+ = argmin ||w|| s.t. <w, x_n> >= 1 on the positives only. svm-neg: w- the
      same on the negatives, written with label -1 and gate -1 so that the design's decision
      -<w-, x> is a classifier of the task (positive on the positives), like svm-pos's <w+, x>.
    - svm-par (002): min ||w||^2 + ||u||^2 s.t. <w,x> - alpha<u,x> >= 1 (positives),
      alpha<w,x> - <u,x> <= -1 (negatives): a linear SVM in the lifted feature, rows zeta = (w, u)
      with gates (1, -alpha) on positives and (alpha, -1) on negatives. On new points the limit
      net sigma(<w,x>) - sigma(<u,x>) has the sign of <w - u, x> (sigma is increasing), so the
      validation gates are (1, -1): signs (errors, inconsistency) are exact, magnitudes are not."""
    x, y, xv = ds.x_train, ds.y_train, ds.x_val
    if objective in ("svm-pos", "svm-neg"):
        s = 1.0 if objective == "svm-pos" else -1.0
        xs = x[y == s]
        if not len(xs):
            raise GbError(f"svm.objectives: {objective} needs training points with label {s:+.0f}, there are none")
        return GatedDesign(xs, np.full(len(xs), s), np.full((len(xs), 1), s), xv, np.full((len(xv), 1), s), "sq")
    a = cfg.model.leaky_alpha
    et = np.where(y[:, None] > 0, [1.0, -a], [a, -1.0])
    return GatedDesign(x, y, et, xv, np.tile([1.0, -1.0], (len(xv), 1)), "sq")


def check_svm_request(cfg: Config, objectives: list[str], solver: str | None, run_dir: Path) -> ReLUNet | None:
    """Refuse impossible requests before anything is computed or written; returns the trained
    ReLU net when an objective needs it."""
    if not objectives:
        raise GbError("svm.objectives: nothing to solve (list objectives in the config or pass --objective)")
    if solver == "dual" and "svm-l1" in objectives:
        raise GbError("--solver dual: svm-l1 is a linear program, which the dual solver does not cover "
                      "(use clarabel, ecos or scs)")
    if solver == "osqp":
        cones = [o for o in objectives if NORM_OF[o] not in QUADRATIC]
        if cones:
            raise GbError(f"--solver osqp: {', '.join(cones)} minimizes a group norm, which OSQP cannot "
                          f"solve (use ecos, clarabel or scs)")
    return load_relu(run_dir, cfg) if any(o in NEEDS_TRAINED_RELU for o in objectives) else None


def fit_svm(cfg: Config, run_dir: str | Path, objectives: list[str] | None = None, solver: str | None = None,
            progress: bool = True, problem: Problem | None = None, echo=print) -> list[dict]:
    """Solve each objective and write `run_dir/svm/<objective>/`; a failed solve is recorded, not raised."""
    run_dir = Path(run_dir)
    objectives = list(objectives or cfg.svm.objectives)
    solver = solver or cfg.svm.solver
    relu = check_svm_request(cfg, objectives, solver, run_dir)
    problem = problem or prepare(cfg)
    results = []
    if "local-search" in objectives and not (run_dir / "gd" / "summary.json").is_file():
        raise GbError(f"{run_dir / 'gd'}: local-search starts from GD's limit: run `gb train-gd` first")
    for obj in objectives:
        if obj in NONCONVEX:   # paper 003: Problem 2 in parameter space, not a convex program
            results.append(fit_nonconvex(obj, cfg, run_dir, problem, echo))
            continue
        design = build_design(obj, cfg, problem, relu)
        use = solver or DEFAULT_SOLVER[design.norm]
        echo(f"fit-svm {obj}: {design.rows} x {design.x_train.shape[1]} variables, "
             f"{len(design.y_train)} margins, solver {use} ...")
        if use == "dual":
            sol = solve_dual(design, cfg.svm.eps, cfg.svm.max_iters)
        else:
            sol = solve_primal(design, use, cfg.svm.max_iters, cfg.svm.eps)
        results.append(_record(obj, cfg, design, sol, run_dir / "svm" / obj, problem.dataset))
        r = results[-1]
        if r["status"] == "infeasible" and r["certified"]:
            echo(f"  infeasible, certified by a dual ray (every predictor's relative margin <= "
                 f"{r['relative_margin_bound']:.1e}): {r['message']} ({r['solve_seconds']:.1f} s)")
        elif r["status"] in ("infeasible", "failed"):
            echo(f"  {r['status']}: {r['message']} ({r['solve_seconds']:.1f} s)")
        else:
            cert = "certified" if r["certified"] else "NOT certified"
            echo(f"  {r['status']}: objective {r['objective']:.6g}, val error {r['val_error']:.4f}, "
                 f"{r['solve_seconds']:.1f} s; {cert} (rel gap {r['rel_gap']:.1e}, min margin {r['min_margin']:.7f})"
                 + (f"; {r['message']}" if r["message"] else ""))
    return results


def _record(obj: str, cfg: Config, design: GatedDesign, sol, out: Path, ds: Dataset) -> dict:
    result = {"predictor": obj, "solver": sol.solver, "status": sol.status, "objective": sol.value,
              "solve_seconds": sol.seconds, "message": sol.message, "train_error": float("nan"),
              "val_error": float("nan"), **certificate(design, sol, cfg.svm.certify_tol)}
    atomic_write_text(out / "config.yaml", dump_config(cfg))
    if sol.zeta is not None:
        train_out = decision(sol.zeta, design.x_train, design.e_train)
        val_out = decision(sol.zeta, design.x_val, design.e_val)
        # design.y_train: svm-pos / svm-neg constrain one class only (the same as ds.y_train otherwise)
        result.update(train_error=error(train_out, design.y_train), val_error=error(val_out, ds.y_val))
        write_npz(out / "predictions.npz", train_out=train_out, val_out=val_out)
        write_npz(out / "solution.npz", zeta=sol.zeta,
                  **({} if sol.lam is None else {"lam": sol.lam}))
    else:
        for stale in ("predictions.npz", "solution.npz"):
            (out / stale).unlink(missing_ok=True)
    write_json(out / "result.json", result)
    return result


