"""`gb verify`: every stored result checked again from the data, without a solver: each program's certificate
(`certify.certificate` on its compact file) against what its records claim, each trained network's outputs from
its weights. Takes a run, a sweep, a results folder (`solutions/<id>/`, tables/errors.csv) or a folder of those.
Everything is untrusted (never through a symlink, no pickles); a file gb cannot use makes its program unverified."""

from __future__ import annotations

import hashlib
import itertools
import math
import os
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from gbcli.config.loading import MAX_CONFIG_BYTES
from gbcli.data.sources import forget_splits
from gbcli.errors import GbError, MissingInput
from gbcli.fs import layout
from gbcli.fs.layout import RunDir, SweepDir
from gbcli.fs.safe import (atomic_write_bytes, atomic_write_text, check_tree, is_dir, is_file, present,
                           read_csv_untrusted, read_only_fs, read_untrusted, subdirs, write_npz)
from gbcli.logs import Progress
from gbcli.metrics import error
from gbcli.models.gating import forget_dead
from gbcli.programs.certify import CERTIFY_TOL, certificate
from gbcli.programs.design import GatedDesign, Solution, Status, certified_status, decision, train_outputs
from gbcli.registry import program_of, spec_of
from gbcli.runs import stages   # its functions looked up when called (a test watches prepare)
from gbcli.store.identity import GD_SECTIONS, PROBLEM_SECTIONS, point_id, section_hash
from gbcli.store.lock import dir_kind
from gbcli.store.records import GdStatus, is_result, number
from gbcli.store.views import entries
from gbcli.store.solutions import (COMPACT_ARRAYS, GAP_ATOL, MAX_SOLUTION_BYTES, OBJECTIVE_ATOL, RTOL, Unusable, close,
                                   compact_solution, no_links, read_npz, read_stored)
from gbcli.text import shorten
from gbcli.training.loop import EXPLODED, tensors
from gbcli.training.losses import loss_fn
from gbcli.training.memory import check_memory


# An output this small against the largest is 0 but for rounding (svm-l2-reference: ~1e-15 next to ~4): its sign
# is the machine's order of sums, so it decides neither a stored label nor an error rate.
ROUNDING_ZERO = 1e-12


def check_solution(design: GatedDesign, y_val: np.ndarray, zeta: np.ndarray | None, lam: np.ndarray | None,
                   claimed_status: str, tol: float) -> dict:
    """The recomputed certificate, the status it bears out (optimal / inaccurate for a predictor, infeasible /
    failed for multipliers alone), the outputs and errors."""
    sol = Solution(zeta, Status.INFEASIBLE if zeta is None else claimed_status, math.nan, 0.0, "", lam=lam)
    cert = certificate(design, sol, tol)
    out = {**cert, "train_out": None, "val_out": None, "train_error": math.nan, "val_error": math.nan,
           "status": Status.INFEASIBLE if cert["certified"] else Status.FAILED, "objective": math.nan}
    if zeta is not None:
        out["status"] = certified_status(Status.OPTIMAL, cert["certified"])
        out["objective"] = cert["primal_objective"]
        out["train_out"], train_y = train_outputs(design, zeta)
        out["val_out"] = decision(zeta, design.x_val, design.e_val)
        out["train_error"] = error(out["train_out"], train_y)
        out["val_error"] = error(out["val_out"], y_val)
        for part in ("train", "val"):   # outputs that are 0 but for rounding: their sign is the machine's
            o = out[f"{part}_out"]
            out[f"{part}_zero"] = np.abs(o) <= ROUNDING_ZERO * max(float(np.abs(o).max()) if o.size else 0.0, 1e-300)
    return out


# A ray's bound on the relative margin cancels to rounding level (~1e-17), differing in every digit on another
# CPU (and so the dual objective, ~1e29): the certificate is the bound below 1e-9, so 1e-12 claims nothing more.
RAY_BOUND_ATOL = 1e-12
# A predictor recovered from stored multipliers: another CPU's sums move its objective and gap by ~1e-9.
RECOVERED_RTOL = 1e-7
RECOVERED_ATOL = 1e-8


def compare_claims(got: dict, claims: dict, source: str, recovered: bool = False) -> list[str]:
    """What a record (`source`) claims that the recomputation does not bear out; `recovered` (the `multipliers`
    form): objectives to RECOVERED_RTOL, gaps and margins to RECOVERED_ATOL."""
    bad = []
    status = claims.get("status")
    if status is not None and status != got["status"]:
        bad.append(f"{source}: status {shorten(repr(status), 30)}, recomputed {got['status']}")
    cert = claims.get("certified")
    if cert is not None and not (isinstance(cert, (bool, np.bool_)) and bool(cert) == got["certified"]):
        bad.append(f"{source}: certified {shorten(repr(cert), 30)}, recomputed {got['certified']}")
    ray = got["val_out"] is None   # multipliers alone: what they certify is the bound on every margin
    rtol, gap_atol = (RECOVERED_RTOL, RECOVERED_ATOL) if recovered else (RTOL, GAP_ATOL)
    checks = [("objective", rtol, OBJECTIVE_ATOL), ("primal_objective", rtol, OBJECTIVE_ATOL),
              *([] if ray else [("dual_objective", RTOL, OBJECTIVE_ATOL)]),
              ("rel_gap", 0.0, gap_atol), ("min_margin", 0.0, gap_atol),
              ("relative_margin_bound", RTOL, RAY_BOUND_ATOL if ray else 1e-300),
              ("train_error", 0.0, 0.0), ("val_error", 0.0, 0.0), ("tolerance", 0.0, 0.0)]
    for part in ("train", "val"):   # an error may differ by the points whose output is 0 but for rounding
        zero = got.get(f"{part}_zero")
        if zero is not None and zero.any():
            checks = [(k, r, float(zero.sum()) / zero.size if k == f"{part}_error" else a) for k, r, a in checks]
    for key, rtol, atol in checks:
        if key in claims and key in got and not close(claims[key], got[key], rtol, atol):
            bad.append(f"{source}: {key} {shorten(repr(claims[key]), 30)}, recomputed {got[key]!r:.30}")
    return bad


PREDICTION_RTOL = 1e-7   # outputs recomputed from a compact file's multipliers against the solver's


def compare_predictions(got: dict, arrays: dict, n: int, m: int, rtol: float = RTOL, published: bool = False) -> list[str]:
    """predictions.npz against the recomputed outputs (to `rtol`, same signs); `published`: val_out_published too."""
    bad = []
    if not published and "val_out_published" in arrays:
        bad.append("predictions.npz: val_out_published stored for a model without published outputs")
    for key, size in (("train_out", n), ("val_out", m)) + ((("val_out_published", m),) if published else ()):
        a, want = arrays.get(key), got[key]
        if a is None:
            bad.append(f"predictions.npz: no {key}")
        elif a.dtype.kind != "f" or a.shape != (size,):
            bad.append(f"predictions.npz: {key} is {a.dtype} {a.shape}, expected float ({size},)")
        else:
            scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
            zero = got.get(key.replace("_out", "_zero"), np.zeros(size, bool))   # no sign to compare (rounding)
            off = ~np.isclose(a, want, rtol=rtol, atol=rtol * scale) | ((np.sign(a) != np.sign(want)) & ~zero)
            if off.any():
                bad.append(f"predictions.npz: {key} differs from the recomputed outputs at {int(off.sum())} points")
    return bad


class _Problems:
    """The problem (data and gating) of the program being checked; the programs come grouped by
    `_group_key`, so only the last is kept (memory: one problem's data at a time)."""

    def __init__(self, tick, tol: float):
        self.tol = tol   # the user's tolerance (the command line), never a stored config's
        self.tick = tick   # called once per program checked (the progress bar)
        self.key: tuple[str, str] | None = None
        self.current = None

    def problem(self, cfg):
        key = _group_key(cfg)
        if key != self.key:   # refused when too large, before anything is built
            check_memory(cfg)
            if self.key is None or key[0] != self.key[0]:   # the last dataset's splits go; its source pool stays
                forget_splits()
                forget_dead()
            self.key, self.current = None, None   # the last problem's arrays go before the next is built
            self.current, self.key = stages.prepare(cfg), key
        return self.current


def _group_key(cfg) -> tuple[str, str]:
    """(dataset, problem) hashes of a config: the order in which `verify` checks programs."""
    if cfg is None:
        return ("", "")
    return section_hash(cfg, ("dataset",)), section_hash(cfg, PROBLEM_SECTIONS)


def _design(objective: str, cfg, problems: _Problems, trained_from) -> tuple[GatedDesign, object, object]:
    """(design, dataset, program); `trained_from(cfg, dim)` loads the trained network where the program reads it."""
    program = program_of(cfg, objective)
    if program.design is None:
        return None, None, program
    problem = problems.problem(cfg)
    trained = trained_from(cfg, problem.dataset.dim) if program.needs_trained else None
    return stages.build_design(objective, cfg, problem, trained), problem.dataset, program


def _shown(claims: dict, key: str = "objective") -> dict:
    """What a row shows of a record's claims (received data): a number or nothing, a short word."""
    v, s = claims.get(key), claims.get("status")
    return {"value": float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None,
            "claimed_status": s if s is None or (isinstance(s, str) and len(s) <= 40 and s.isprintable())
            else shorten(repr(s), 40)}


def _row(where: str, objective: str, claims: dict, *problems: str) -> dict:
    return {"where": where, "objective": objective, **_shown(claims), "verified": False, "checked": "",
            "problems": list(problems)}


def _program(where: str, objective: str, problems: _Problems, check, *args, gd: bool = False) -> dict:
    """One row: `check(row, *args)` adds its problems and returns what it recomputed; verified when it recomputed
    a result and found no problem. A file gb cannot use is a problem, never a crash; MissingInput (the data set's
    files) stops the command: every program would fail alike."""
    row = _row(where, objective, {})
    try:
        got = check(row, *args)
    except MissingInput:
        raise
    except Exception as exc:   # noqa: BLE001 (Unusable, or received data gb did not foresee: reported)
        row["problems"].append(str(exc) if isinstance(exc, Unusable) else shorten(str(exc), 200)
                               if isinstance(exc, GbError) else
                               f"could not be checked ({type(exc).__name__}: {shorten(str(exc), 120)})")
        got = None
    problems.tick()
    row["problems"] = list(dict.fromkeys(row["problems"]))   # the same claim read twice (solution and compact file)
    if got is not None and not row["problems"] and not is_result(got["status"], gd=gd):
        row["problems"].append(f"not certified (recomputed: {got['status']}, relative gap {got.get('rel_gap')!r:.12}, "
                               f"smallest margin {got.get('min_margin')!r:.12})")
    row["verified"] = got is not None and not row["problems"]
    if got is not None and row.get("value") is None:
        row["value"] = got.get("objective")
    return row


def _table_claims(table: dict | None, objective: str, row: dict, expected: bool = True) -> list:
    """[(source, claims)] of `objective`'s row in tables/errors.csv; a missing row is a problem when `expected`."""
    if table is not None and objective in table:
        return [(f"{layout.TABLES}/{layout.ERRORS}", table[objective])]
    if table is not None and expected:
        row["problems"].append(f"{layout.TABLES}/{layout.ERRORS}: no row for this program")
    return []


def _network(root: Path, path: Path, cfg, dim: int):
    """The network of a stored model.pt (tensors only, never through a link) of the config's model kind."""
    no_links(root, path)
    try:
        return spec_of(cfg).load(stages.load_checkpoint(path, cfg.model.kind, remedy=""), cfg, dim, layout.MODEL)
    except GbError as exc:
        raise Unusable(shorten(str(exc).replace(str(path), layout.MODEL), 200)) from None


def _check_compact(root: Path, path: Path, design, ds, objective: str, tol: float, problems_out: list,
                   extra_claims=()):
    """Check a compact file at tolerance `tol`; returns (got, claims, form, arrays) or raises Unusable."""
    arrays = read_npz(root, path, COMPACT_ARRAYS)
    zeta, lam, sign, claims, form = compact_solution(arrays, design, objective)
    got = check_solution(design, ds.y_val, zeta, lam, str(claims.get("status")), tol)
    for source, c in ((path.name, claims), *extra_claims):
        problems_out += compare_claims(got, c, source, recovered=form == "multipliers")
    if zeta is not None:
        differ = (sign != np.sign(got["val_out"]).astype(np.int8)) & ~got["val_zero"]
        if differ.any():
            problems_out.append(f"{path.name}: val_sign differs from the recomputed labels at {int(differ.sum())} points")
    return got, claims, form, arrays


def _identity(cfg, run: Path, root: Path, point: str | None) -> list[str]:
    """A program is the one its run asks for: of the problem of the run's gd/config.yaml, and of the very id of
    a sweep's point or `solutions/<id>/` (catches a program copied in, config and records with it)."""
    bad = []
    if point is not None and point_id(cfg) != point:
        bad.append(f"{layout.CONFIG}: the config of point {point_id(cfg)}, not of {shorten(point, 40)} (copied in?)")
    gd_config = RunDir(run).gd_config
    if point is None and present(gd_config):
        try:
            trained = read_stored(root, gd_config, config=True)
        except Unusable as exc:
            return bad + [str(exc)]
        if section_hash(trained, PROBLEM_SECTIONS) != section_hash(cfg, PROBLEM_SECTIONS):
            bad.append(f"{layout.CONFIG}: another dataset, model or contexts than the run's {layout.GD}/{layout.CONFIG} "
                       f"(a stale or copied-in program)")
    return bad


NETWORK_RTOL = 1e-4   # a network's outputs recomputed in float32 against the stored ones (another
                      # machine or thread count sums in another order: ~1e-6 of the largest output)


def _check_network(row: dict, root: Path, run: Path, problems: _Problems, point: str | None, claims: dict,
                   trained: bool) -> dict:
    """A trained network's outputs recomputed from gd/model.pt on the data of gd/config.yaml, against
    gd/predictions.npz and the errors, loss and status of summary.json and `claims` (the table's rows). Outputs
    not finite, or a loss grown EXPLODED-fold over step 0's (rebuilt from the seed): diverged, not verified."""
    gd = RunDir(run)
    row["checked"] = "network"
    if not trained:
        raise Unusable(f"{layout.GD}: missing ({layout.TABLES}/{layout.ERRORS} has the network)")
    record = read_stored(root, gd.summary)
    row.update(_shown(record, "val_error"))
    cfg = read_stored(root, gd.gd_config, config=True)
    manifest = record.get("manifest")
    if not isinstance(manifest, dict) or manifest.get("config") != section_hash(cfg, GD_SECTIONS):
        row["problems"].append(f"{layout.CONFIG}: not the config {layout.SUMMARY} was computed from (edited or replaced)")
    if point is not None:
        row["problems"] += _identity(cfg, run, root, point)
    problem = problems.problem(cfg)
    ds, spec = problem.dataset, spec_of(cfg)
    model = _network(root, gd.model, cfg, ds.dim).float()   # as it was trained (float32)
    xt, xv, yt = tensors(None, ds.x_train, ds.x_val, ds.y_train)
    ct, cv = tensors(None, problem.ctx_train, problem.ctx_val, dtype=torch.long)
    with torch.no_grad():
        out_t, out_v = model(xt, ct).reshape(-1), model(xv, cv).reshape(-1)
        got = {"train_out": out_t.double().numpy(), "val_out": out_v.double().numpy()}
        loss = float(loss_fn(yt * out_t, cfg.training.loss))
        initial = None
        if cfg.training.init_from is None:   # a warm start's step 0 is another run's network: not rebuilt
            with torch.random.fork_rng():
                torch.manual_seed(cfg.init_seed)   # as train_gd builds it
                initial = float(loss_fn(yt * spec.build(cfg, ds.dim)(xt, ct).reshape(-1), cfg.training.loss))
    finite = all(np.isfinite(v).all() for v in got.values()) and math.isfinite(loss)
    exploded = finite and initial is not None and loss > EXPLODED * max(initial, 1e-12)
    why = "outputs are not finite" if not finite else f"training loss grew from {initial:.3g} to {loss:.3g}" \
        if exploded else ""
    claimed = record.get("status")
    diverged = bool(why) or claimed == GdStatus.DIVERGED
    if why and claimed != GdStatus.DIVERGED:
        row["problems"].append(f"{layout.SUMMARY}: status {row['claimed_status']!r}, but the recomputed {why} "
                               "(diverged)")
    elif claimed not in tuple(GdStatus):
        row["problems"].append(f"{layout.SUMMARY}: status {row['claimed_status']!r} is not a network's")
    if diverged:
        said = ("the network's " if not finite else "the ") + why if why else \
            shorten(str(record.get("message", "recorded")), 120)
        row["problems"].append(f"diverged: {said} (not a trained predictor)")
    if initial is None:
        row["checked"] = "network (warm start: its step-0 loss not rebuilt)"
    if finite:
        published = spec.published_outputs(model, cfg, problem)
        if published is not None:
            got["val_out_published"] = np.asarray(published, np.float64).reshape(-1)
        preds = read_npz(root, gd.gd_predictions, ("train_out", "val_out", "val_out_published"))
        scale = {k: max(1.0, float(np.abs(v).max()) if v.size else 1.0) for k, v in got.items()}
        zero = {k.replace("_out", "_zero"): np.abs(v) <= NETWORK_RTOL * scale[k] for k, v in got.items()}
        row["problems"] += compare_predictions({**got, **zero}, preds, len(ds.y_train), len(ds.y_val), NETWORK_RTOL,
                                               published=published is not None)
        claimed_loss = record.get("train_loss")
        if number(claimed_loss) is None or \
                not math.isclose(claimed_loss, loss, rel_tol=NETWORK_RTOL, abs_tol=1e-300):
            row["problems"].append(f"{layout.SUMMARY}: train_loss {shorten(repr(claimed_loss), 30)} is not the "
                                   f"recomputed {loss:.9g}")
        for source, c in [(layout.SUMMARY, record),
                          *((f"{layout.TABLES}/{layout.ERRORS} ({shorten(k, 30)})", c) for k, c in claims.items())]:
            if source != layout.SUMMARY and c.get("status") != (GdStatus.DIVERGED if exploded else claimed):
                row["problems"].append(f"{source}: status {shorten(repr(c.get('status')), 40)}, the record's is "
                                       f"{row['claimed_status']!r}")
            for key, y in (("train", ds.y_train), ("val", ds.y_val)):
                said, out, undecided = c.get(f"{key}_error"), got[f"{key}_out"], zero[f"{key}_zero"]
                low, high = error(np.where(undecided, y, out), y), error(np.where(undecided, -y, out), y)
                if not (number(said) is not None and low - 1e-12 <= said <= high + 1e-12):
                    row["problems"].append(f"{source}: {key}_error {shorten(repr(said), 30)} is not the recomputed "
                                           f"{error(out, y):.12g}")
        if claims and cfg.model.predictor not in claims:
            row["problems"].append(f"{layout.TABLES}/{layout.ERRORS}: no row for {cfg.model.predictor}")
    got["status"] = GdStatus.DIVERGED if diverged else GdStatus.OK
    return got


def _check_run(root: Path, unit: _Unit, problems: _Problems, export: dict | None) -> list[dict]:
    """One row per program of a run directory (`svm/<objective>/`), after its network's (when it has one, or the
    table claims one)."""
    run, where, gd = unit.folder, unit.where, RunDir(unit.folder).gd
    claims = {k: c for k, c in (unit.table or {}).items() if str(k).startswith("gd-")}
    trained = present(gd) and not is_file(gd) and (not is_dir(gd) or bool(entries(gd)))   # a link is refused
    rows = [_program(where, layout.GD, problems, _check_network, root, run, problems, unit.point, claims, trained,
                     gd=True)] if trained or claims else []
    svm = RunDir(run).svm
    try:
        no_links(run, svm)
    except Unusable as exc:
        return rows + [_row(where, layout.SVM, {}, str(exc))]

    def check(row: dict, stage: Path, objective: str) -> dict:
        record = read_stored(root, stage / layout.RESULT)
        row.update(_shown(record))
        cfg = read_stored(root, stage / layout.CONFIG, config=True)
        row["problems"] += _identity(cfg, run, root, unit.point)
        design, ds, program = _design(objective, cfg, problems,
                                      lambda c, dim: stages.load_trained(run, c, dim, objective))
        if design is None:   # a non-convex program (paper 003): no certificate; its seeded search is rerun
            got = verify_nonconvex(root, run, stage, record, cfg, program, problems)
            row["checked"] = "search rerun (non-convex: feasibility, not optimality)"
            row["problems"] += got.pop("problems")
            return got
        compact = stage / layout.COMPACT
        if present(compact) or record.get("status") != Status.FAILED:   # a failed solve may have stored nothing
            extra = [(layout.RESULT, record)] + _table_claims(unit.table, objective, row,
                                                               record.get("status") in tuple(Status))
            got, _, form, arrays = _check_compact(root, compact, design, ds, objective, problems.tol, row["problems"],
                                                  extra)
            row["checked"] = f"compact ({form})" if form != "ray" else \
                f"compact (ray: relative margin <= {got.get('relative_margin_bound', math.nan):.1e})"
        else:
            got = check_solution(design, ds.y_val, None, None, Status.FAILED, problems.tol)
            row["checked"] = "none"
            row["problems"] += compare_claims(got, record, layout.RESULT)
        if got["val_out"] is not None:
            try:
                preds = read_npz(root, stage / layout.PREDICTIONS, ("train_out", "val_out"))
                # a zeta stored as its multipliers reproduces the certificate to WRITE_TOL, the outputs to ~1e-9
                row["problems"] += compare_predictions(got, preds, len(got["train_out"]), len(design.x_val),
                                                       RTOL if form == "zeta" else PREDICTION_RTOL)
            except Unusable as exc:
                row["problems"].append(str(exc))
        elif present(stage / layout.PREDICTIONS):
            row["problems"].append(f"{layout.PREDICTIONS}: stored for a program without a predictor")
        if export is not None and not row["problems"] and is_result(got["status"]):
            # where the verified arrays are and their digest, not the arrays (memory: one program's)
            export[(where, objective)] = (compact, _arrays_digest(arrays), stage / layout.CONFIG,
                                          RunDir(run).model if program.needs_trained else None)
        return got

    for stage in entries(svm):
        if is_file(stage):   # a link is checked (and refused)
            continue
        rows.append(row := _program(where, stage.name, problems, check, stage, stage.name))
        if unit.own is not None and row["verified"] and "compact" in row["checked"] \
                and (digest := _digest(stage / layout.COMPACT)) is not None:   # its copy in solutions/ is verified too
            unit.own[(unit.point, stage.name)] = digest
    return rows


def _check_copies(root: Path, unit: _Unit, problems: _Problems) -> list[dict]:
    """One row per compact file `solutions/<id>/<objective>.npz` (a copy with the bytes of its verified point's is
    not checked twice)."""
    point, where, (cfg, cfg_error) = unit.folder, unit.where, unit.config
    identity = _identity(cfg, point, root, point.name) if cfg is not None else []

    def trained_from(c, dim):   # `_network` refuses a link
        if not present(point / layout.MODEL):
            raise Unusable(f"the program reads the trained network: {layout.MODEL} missing")
        return _network(root, point / layout.MODEL, c, dim)

    def check(row: dict, path: Path) -> dict:
        if cfg is None:
            raise Unusable(cfg_error)
        row["problems"] += identity
        design, ds, _ = _design(path.stem, cfg, problems, trained_from)
        if design is None:
            raise Unusable("not a convex program: no certificate to check")
        got, claims, form, _ = _check_compact(root, path, design, ds, path.stem, problems.tol, row["problems"],
                                              _table_claims(unit.table, path.stem, row))
        row.update(_shown(claims), checked=form)
        return got

    rows = []
    for path in sorted(p for p in point.iterdir() if p.suffix == ".npz"):
        if unit.own and (point.name, path.stem) in unit.own and _digest(path) == unit.own[(point.name, path.stem)]:
            problems.tick()   # a copy of the point's own compact.npz: verified with the point
            continue
        rows.append(_program(where, path.stem, problems, check, path))
    return rows


# a non-convex record's numbers against its rerun search's (seeded: the same machine gives the same
# points; another CPU's rounding moves SLSQP's iterates a little)
NONCONVEX_RTOL = 1e-6
NONCONVEX_CLAIMS = ("objective", "min_margin", "train_error", "val_error", "global_norm_sq", "center_norm_sq",
                    "best_norm_sq", "local_optimum", "smaller_found", "hits", "feasible_restarts", "certified", "status")


def verify_nonconvex(root: Path, run: Path, stage: Path, record: dict, cfg, program, problems: _Problems) -> dict:
    """A non-convex program's record, theta.npz and predictions.npz against a rerun of its seeded search; the status
    is the rerun's (`optimal` when it certifies its point: feasible, and two restarts agree for the global one)."""
    problem = problems.problem(cfg)
    trained = stages.load_trained(run, cfg, problem.dataset.dim, stage.name) if program.needs_trained else None
    result, arrays = program.fit(stage.name, cfg, spec_of(cfg), problem, trained, echo=lambda msg: None)
    bad = [f"{layout.RESULT}: {k} {shorten(repr(record.get(k)), 40)} is not the rerun's "
           f"{shorten(repr(result.get(k)), 40)}" for k in NONCONVEX_CLAIMS
           if not _same_claim(result.get(k), record.get(k))]
    for name, stem in ((layout.THETA, "theta"), (layout.PREDICTIONS, "predictions")):
        if stem not in arrays:
            if present(stage / name):
                bad.append(f"{name}: stored for a program without a point")
            continue
        try:
            stored = read_npz(root, stage / name, tuple(arrays[stem]))
        except Unusable as exc:
            bad.append(str(exc))
            continue
        for key, want in arrays[stem].items():
            got = stored.get(key)
            if got is None or got.shape != want.shape or not np.allclose(
                    got, want, rtol=NONCONVEX_RTOL, atol=NONCONVEX_RTOL * max(1.0, float(np.abs(want).max()))):
                bad.append(f"{name}: {key} is not the rerun's")
    status = Status.OPTIMAL if result["certified"] else \
        Status.FAILED if result["status"] == Status.FAILED else Status.INACCURATE
    return {"status": status, "objective": result.get("objective"), "rel_gap": math.nan,
            "min_margin": result.get("min_margin"), "problems": bad}


def _same_claim(want, claim) -> bool:
    """Numbers (or lists) equal to NONCONVEX_RTOL (NaN to NaN); anything else (a word, None) equal as it is."""
    if want is None or claim is None or isinstance(want, str) or isinstance(claim, str):
        return want == claim
    try:
        a, b = np.asarray(claim, float), np.asarray(want, float)
    except (TypeError, ValueError):
        return False
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=NONCONVEX_RTOL, atol=NONCONVEX_RTOL, equal_nan=True))


class _Unit(NamedTuple):
    """A folder whose programs `verify` checks together: a run, a sweep's point or `solutions/<id>/` (`copies`)."""

    where: str
    folder: Path
    copies: bool = False
    point: str | None = None    # the id the folder must be (None: a run of its own)
    table: dict | None = None   # its programs' claims in tables/errors.csv, by predictor (None: none to check)
    own: dict | None = None     # a sweep's digests of its points' verified compact files (`_check_run` fills them)
    config: tuple = (None, "")  # solutions/<id>/: (its config, or None and why not)


def _errors_claims(folder: Path, root: Path) -> dict:
    """(point, predictor) -> the row of folder/tables/errors.csv (a results folder's claims)."""
    path = RunDir(folder).errors
    if not present(path):
        return {}
    no_links(root, path)
    table = read_csv_untrusted(path)
    if "point" not in table.columns or "predictor" not in table.columns:
        return {}
    keys = ("status", "objective", "rel_gap", "min_margin", "val_error", "train_error", "certified")
    return {(str(r["point"]), str(r["predictor"])): {   # an empty status, or a float certified, claims nothing
        k: r[k] for k in keys if k in r and not (isinstance(r[k], float) and (k == "certified" or k == "status"
                                                                               and math.isnan(r[k])))}
        for r in table.to_dict("records")}


def _walk(root: Path, targets: list):
    """(slot, a `_Unit` or rows already known) in the order `verify` checks them, slots in listing order: a sweep's
    points before its `solutions/`, each grouped by `_group_key`. Lazy: a `solutions/` folder's claimed programs
    without their file are looked for once its copies are checked."""
    slot = itertools.count()
    for folder, kind, prefix in targets:
        if kind == "run":
            yield next(slot), _Unit(prefix.rstrip("/") or folder.name, folder)
            continue
        own = {} if kind == "sweep" else None
        phases = [(SweepDir(folder).points, False)] if kind == "sweep" else []
        sols = folder / layout.SOLUTIONS
        phases += [(sols, True)] if kind != "sweep" or is_dir(sols) else []
        for listing, copies in phases:
            try:   # the folder's table is checked against every program recomputed
                table = _errors_claims(folder, root)
            except (Unusable, OSError, ValueError, GbError) as exc:
                table = {}
                yield next(slot), [_row(prefix or folder.name, f"{layout.TABLES}/{layout.ERRORS}", {},
                                        shorten(str(exc), 200))]
            units = []
            for p in entries(listing):
                where, s = f"{prefix}{p.name}", next(slot)
                if not is_dir(p):
                    units.append((("", ""), s, [_row(where, "", {}, f"{'' if copies else layout.POINTS + '/'}{p.name}: "
                                                                    f"is a symlink or not a folder (not followed)")]))
                    continue
                try:   # the group's config: solutions/<id>/'s own, a point's network's
                    cfg, why = read_stored(root, p / layout.CONFIG if copies else RunDir(p).gd_config, config=True), ""
                except Unusable as exc:
                    cfg, why = None, str(exc)
                claims = {o: c for (q, o), c in table.items() if q == p.name} if table else None
                units.append((_group_key(cfg), s, _Unit(where, p, copies, p.name, claims, own,
                                                        (cfg, why) if copies else (None, ""))))
            for _, s, unit in sorted(units, key=itemgetter(0)):   # stable: by name within a group
                yield s, unit
            if copies:   # a claimed program without its solution
                yield next(slot), [
                    _row(f"{prefix}{q}", o, c,
                         f"{layout.SOLUTIONS}/{q}/{o}.npz: missing ({layout.TABLES}/{layout.ERRORS} has the program)")
                    for (q, o), c in sorted(table.items()) if c.get("status") in tuple(Status)
                    and not present(sols / q / f"{o}.npz") and not (own and (q, o) in own)]


def _kind(path: Path) -> str | None:
    """A run's or sweep's kind (`dir_kind`), or "results" for a folder with solutions/."""
    return dir_kind(path, key="DIR") or ("results" if is_dir(path / layout.SOLUTIONS) else None)


def _programs(targets: list) -> int:
    """How many programs `verify` will meet in `targets` (its progress; nothing is read)."""
    def count(run: Path) -> int:
        return len(subdirs(RunDir(run).svm, hidden=False)) + int(present(RunDir(run).summary) or present(RunDir(run).model))

    return sum(count(f) if k == "run" else sum(map(count, subdirs(SweepDir(f).points, hidden=False)))
               + sum(len(list(p.glob("*.npz"))) for p in subdirs(f / layout.SOLUTIONS, hidden=False))
               for f, k, _ in targets)


def verify(path: str | Path, export: dict | None = None, progress: bool = False, tol: float = CERTIFY_TOL) -> list[dict]:
    """One dict per program under `path`: where, objective, value (the claimed objective), claimed_status,
    verified, checked (what was recomputed from), problems (one line each). GbError when `path` holds nothing to
    verify. `export`: filled with where each verified program's compact arrays are (`export_solutions`)."""
    root = Path(path)
    if not root.is_dir():
        raise GbError(f"DIR: {shorten(str(root), 200)}: not a directory")
    kind = _kind(root)
    targets = [(root, kind, "")] if kind else \
        [(sub, k, f"{sub.name}/") for sub in subdirs(root, hidden=False) if (k := _kind(sub))]
    if not targets:
        raise GbError(f"DIR: {shorten(str(root), 200)}: nothing to verify (not a run or sweep directory, no "
                      f"solutions/ folder, and no subfolder that is one)")
    with Progress(f"verify {shorten(str(root), 60)}", _programs(targets), show=progress,
                  counter="{done}/{total} results") as bar:
        problems, slots = _Problems(bar.advance, tol), {}
        # a received file's numbers may overflow (1e308): said in its row, not in numpy warnings
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for s, unit in _walk(root, targets):
                slots[s] = unit if isinstance(unit, list) else _check_copies(root, unit, problems) if unit.copies \
                    else _check_run(root, unit, problems, export)
        rows = [r for s in sorted(slots) for r in slots[s]]
        if not rows:
            raise GbError(f"DIR: {shorten(str(root), 200)}: nothing to verify (no solved program found)")
    return rows


def _digest(path: Path) -> bytes | None:
    try:
        return hashlib.sha256(read_untrusted(path, MAX_SOLUTION_BYTES)).digest()
    except (OSError, ValueError):
        return None


def _arrays_digest(arrays: dict[str, np.ndarray]) -> bytes:
    h = hashlib.sha256()
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(f"{k} {a.dtype.str} {a.shape}".encode() + a.tobytes())
    return h.digest()


def _check_writable(dest: Path) -> None:
    """Refuse a DEST that cannot be written before verifying (minutes on a sweep), writing nothing: a read-only
    or virtual file system too (/proc: root passes the permission check, then mkdir fails)."""
    try:
        existing = next((p for p in (dest, *dest.parents) if present(p)), Path("."))
        writable = existing.is_dir() and os.access(existing, os.W_OK | os.X_OK) and not read_only_fs(existing)
    except OSError as exc:
        raise GbError(f"--export: {shorten(str(dest), 200)}: {exc.strerror or exc}") from None
    if not writable:
        raise GbError(f"--export: {shorten(str(dest), 200)}: cannot write here ({shorten(str(existing), 200)} is not "
                      f"a writable folder)")


def export_solutions(source: str | Path, dest: str | Path, progress: bool = False,
                     tol: float = CERTIFY_TOL) -> tuple[list[dict], int]:
    """Verify `source` and write each verified program's compact file into `dest/solutions/<point id>/`, with its
    config.yaml (and model.pt when the program reads the network). Returns (rows, files written)."""
    root = Path(dest)
    if present(root) and not root.is_dir():
        raise GbError(f"--export: {shorten(str(root), 200)}: not a folder")
    check_tree(root)   # never written through a link below it (DEST/solutions linked elsewhere): refused first
    if present(root / layout.SOLUTIONS) and not is_dir(root / layout.SOLUTIONS):
        raise GbError(f"--export: {shorten(str(root / layout.SOLUTIONS), 200)}: not a folder (the solutions go there)")
    _check_writable(root)
    found: dict = {}
    rows = verify(source, export=found, progress=progress, tol=tol)
    for (where, objective), (compact, digest, config, model) in sorted(found.items()):
        folder = root / layout.SOLUTIONS / where
        try:   # read again (verify kept only its digest): exactly the arrays it verified, or none
            arrays = read_npz(Path(source), compact, COMPACT_ARRAYS)
        except Unusable as exc:
            arrays, why = None, str(exc)
        if arrays is None or _arrays_digest(arrays) != digest:
            raise GbError(f"{shorten(str(compact), 200)}: changed while it was verified"
                          f"{f' ({why})' if arrays is None else ''}; run gb verify --export again")
        write_npz(folder / f"{objective}.npz", **arrays)
        atomic_write_text(folder / layout.CONFIG, read_untrusted(config, MAX_CONFIG_BYTES).decode("utf-8"))
        if model is not None:
            atomic_write_bytes(folder / layout.MODEL, read_untrusted(model))
    return rows, len(found)


