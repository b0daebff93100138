"""Grids of runs: a base config plus `grid:` axes (full product) and `zip:` axes (varied together). Each
point runs in `OUT/points/<id>/`, done when its tables agree with its records (a rerun redoes only the rest);
a failed point writes `failed.json` and the sweep goes on."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import multiprocessing as mp
import os
import time
import traceback
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from gbcli import interrupts
from gbcli.config import Config, apply_preset, read_config, run_dir_for, set_path, validate
from gbcli.config.schema import execution_keys
from gbcli.errors import GbError
from gbcli.models.base import Problem, check_weights
from gbcli.provenance import Clock
from gbcli.text import printable, quoted, shorten
from gbcli.fs.safe import atomic_write_text, dump_yaml, flatten, staged_writes, write_csv
from gbcli.logs import log
from gbcli.registry import SWEEP_REPORTS, spec_of
from gbcli.reports.tables import read_tables, summarize
from gbcli.store.cache import SolveCache
from gbcli.store.records import (NOT_GBS, FailureRecord, GdRecord, PointState, ProgramRecord, SweepRecord, is_result,
                                 point_state)
from gbcli.store.identity import PROBLEM_SECTIONS, gd_manifest, point_id, readable_names, section_hash
from gbcli.store.labels import write_labels
from gbcli.store.lock import check_kind, run_lock, write_marker
from gbcli.fs import layout
from gbcli.fs.layout import RunDir, SweepDir
from gbcli.fs.safe import check_tree, is_dir, is_file, open_append, remove, subdirs
from gbcli.runs.executors import make_executor
from gbcli.store.solutions import copy_point_solutions
from gbcli.runs.compare import compare, compare_run
from gbcli.store.integrity import check_run, heal_point
from gbcli.runs import tracking
from gbcli.runs.tracking import Live, tracked
from gbcli.runs.threads import limit_threads   # the process's thread count (gbcli.runs.sweep.limit_threads: documented)
from gbcli.runs.stages import Deferred, check_svm_request, dataset_of, fit_svm, prepare, train_gd, train_gd_group
from gbcli.training.batched import batch_key
from gbcli.training.loop import check_device, checkpoint_step
from gbcli.training.memory import check_memory

MAX_POINTS = 10_000   # points a sweep may have: counted before the grid is expanded or validated


def _axes(raw: dict, key: str, path) -> dict:
    axes = raw.pop(key, None) or {}
    if not isinstance(axes, dict) or not all(isinstance(k, str) and isinstance(v, list) and v
                                             for k, v in axes.items()):
        raise GbError(f"{path}: {key}: must map dotted keys to non-empty lists of values")
    return axes


def _spelled(value) -> str:
    """An axis value as written (0 and 0.0 are spelled apart, as the user wrote them)."""
    return json.dumps(value, sort_keys=True, default=str)


def _leaves_apart(a, b) -> list[str]:
    """The dotted sub-keys at which two axis values differ ("" for the values themselves)."""
    if isinstance(a, dict) and isinstance(b, dict):
        fa, fb = flatten(a), flatten(b)
        return [k for k in sorted(set(fa) | set(fb)) if _spelled(fa.get(k)) != _spelled(fb.get(k))]
    return [""]


def expand(path: str | Path, overrides: tuple[str, ...] = ()) -> tuple[Config, list[Config]]:
    """The base config and every point's validated config; the grid is counted first (at most MAX_POINTS)."""
    raw = read_config(path, overrides)
    grid, zipped = _axes(raw, "grid", path), _axes(raw, "zip", path)
    if len({len(v) for v in zipped.values()}) > 1:
        raise GbError(f"{path}: zip: all lists must have the same length "
                      f"({', '.join(f'{k}: {len(v)}' for k, v in zipped.items())})")
    both = sorted(set(grid) & set(zipped))
    if both:
        raise GbError(f"{path}: grid and zip: {both[0][:200]} is an axis of both (which value would win is not "
                      f"defined); name it in one of them")
    total = math.prod(map(len, grid.values())) * (len(next(iter(zipped.values()))) if zipped else 1)
    if total > MAX_POINTS:
        raise GbError(f"{path}: grid: {total:,} points, more than gb's limit of {MAX_POINTS:,} for one sweep "
                      f"(split the grid into several sweeps)")
    how = execution_keys("execution", "logging")

    def how_key(key: str) -> str | None:   # the execution key that `key` is or lies under
        parts = key.split(".")
        return next((k for i in range(1, len(parts) + 1) if (k := ".".join(parts[:i])) in how), None)

    for key, values in grid.items():   # every value of such an axis meets the same values of the others
        hit = how_key(key)
        if hit is not None and len({_spelled(v) for v in values}) > 1:
            raise GbError(f"{path}: grid: {shorten(key, 80)} does not change what a point computes (it says how a run is "
                          f"done or logged{'' if hit == key else f', as all of {hit}'}), so its {len(values)} values "
                          f"would be one point; set it outside the grid")
    base = validate(apply_preset(raw, str(path)), str(path))
    zip_rows = list(zip(*zipped.values())) or [()]
    points, first, merged = [], {}, []
    for values, zvalues in itertools.product(itertools.product(*grid.values()), zip_rows):
        point, where = raw, {**dict(zip(grid, values)), **dict(zip(zipped, zvalues))}
        for key, value in where.items():
            point = set_path(point, key.split("."), value)
        cfg = validate(apply_preset(point, str(path)), f"{path} (grid point {shorten(repr(where))})")
        pid = point_id(cfg)
        if pid in first:   # axes that do not change the config give one point
            differ = [k for k in where if _spelled(where[k]) != _spelled(first[pid][k])]
            leaves = {f"{k}.{sub}" if sub else k for k in differ for sub in _leaves_apart(where[k], first[pid][k])}
            if leaves and all(how_key(k) for k in leaves):
                raise GbError(f"{path}: {'zip' if differ[0] in zipped else 'grid'}: {shorten(repr(where), 120)} and "
                              f"{shorten(repr(first[pid]), 120)} differ only in {', '.join(sorted(leaves)[:3])}, "
                              f"which changes nothing a point computes: they would be one point")
            merged.append(differ)
        else:
            first[pid] = where
            points.append(cfg)
    if merged:
        axes = sorted({k for keys in merged for k in keys})
        why = (f"{', '.join(axes[:4])} changed nothing at some of them (e.g. a value equal to the default or one "
               f"another key makes irrelevant)" if axes else "repeated values")
        log.warning(f"{path}: the axes' {total:,} combinations are {len(points):,} distinct points: {why}; each "
                    f"distinct point runs once")
    return base, points


# what a point's own tables must agree on with its records, computed again (`done_tables`)
DECISIVE = (("predictor", "status", "train_error", "val_error", "objective"),
             ("predictor_a", "predictor_b", "inconsistency", "gd_val_error", "svm_val_error", "gd_status"))


def _same(a: pd.Series, b: pd.Series) -> bool:
    if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
        return bool(np.isclose(a.to_numpy(float), b.to_numpy(float), rtol=1e-12, atol=0, equal_nan=True).all())
    return a.astype(str).tolist() == b.astype(str).tolist()


def done_tables(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """A done point's tables computed again from its records (never copied), or None: none, or edited since."""
    if point_state(run_dir) != PointState.DONE:
        return None
    try:
        check_run(run_dir)
        fresh = compare(run_dir)
        for now, then, cols in zip(fresh, read_tables(run_dir), DECISIVE):
            cols = [c for c in cols if c in then.columns and c in now.columns]
            if len(now) != len(then) or not all(_same(now[c].reset_index(drop=True), then[c]) for c in cols):
                return None
    except GbError:
        return None
    return fresh


def is_done(run_dir: Path) -> bool:
    return done_tables(run_dir) is not None


def run_point(cfg_dict: dict, run_dir: str, cache_dir: str | None = None, problem: Problem | None = None,
              defer: bool = False) -> dict:
    """Run one point; never raises (a failure: `failed.json` if possible). `defer`: status `deferred` back
    instead of waiting for a program another worker is solving."""
    run_dir, run = Path(run_dir), RunDir(run_dir)
    start, stage = time.time(), "prepare"
    log = None

    def echo(msg: str) -> None:
        with contextlib.suppress(OSError):   # a full disk must not turn the record of a point into a crash
            if log is not None:
                log.write(msg + "\n")
                log.flush()

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_marker(run_dir, "run")   # a folder gb made: its lock and the stages may write in it
        log = open_append(run.log)
        echo(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}, torch threads {torch.get_num_threads()}")
        cfg = Config.model_validate(cfg_dict)
        problem, cache = problem or prepare(cfg), SolveCache(cache_dir) if cache_dir else None
        stage = "train-gd"
        if not is_file(run.summary):
            train_gd(cfg, run_dir, progress=False, problem=problem, cache=cache)
        summary = GdRecord.read(run.summary, strict=True)
        if not is_result(summary["status"], gd=True):
            raise PointFailure(f"training {summary['status']}: {summary.get('message', '')}")
        stage = "fit-svm"
        todo = [o for o in cfg.svm.objectives
                if not is_file(run.result(o)) or ProgramRecord.read(run.result(o), strict=True).resumable]
        if todo:
            try:
                fit_svm(cfg, run_dir, todo, progress=False, problem=problem, cache=cache,   # messages: log.txt
                        defer=defer)
            except Deferred as exc:
                echo(f"deferred after {time.time() - start:.1f} s: {exc.objectives} being solved by another point")
                return {"status": "deferred", "seconds": time.time() - start, "objectives": exc.objectives}
        records = {o: ProgramRecord.read(run.result(o), strict=True) for o in cfg.svm.objectives}
        bad = [f"{o}: {r['status']}{', not certified' if not r['certified'] else ''}"
               + (f" ({r['message']})" if r["message"] else "")
               for o, r in records.items() if not is_result(r["status"], r["certified"])]
        if bad:
            raise PointFailure("; ".join(bad))
        stage = "compare"
        with tracked(Live.start(cfg, run_dir, "compare")):   # its MLflow run takes the tables
            compare_run(run_dir)
        remove(run.failed)
        echo(f"done in {time.time() - start:.1f} s")
        return {"status": PointState.DONE, "seconds": time.time() - start}
    except Exception as exc:  # record and go on: one bad point must not stop a grid
        if isinstance(exc, PointFailure):
            message = str(exc)
        elif isinstance(exc, OSError):
            message = f"{exc.filename or run_dir}: {exc.strerror or exc}"
        else:
            message = f"{type(exc).__name__}: {exc}".splitlines()[0]
            echo(traceback.format_exc())
        echo(f"FAILED at {stage}: {message}")
        failure = FailureRecord.of_point(run_dir, PointState.FAILED, stage, message, seconds=time.time() - start)
        try:
            failure.write(run_dir)
        except OSError as err:
            failure.message += f" (and failed.json could not be written: {err.strerror or err})"
        return failure.as_dict()
    finally:
        if log is not None:
            with contextlib.suppress(OSError):
                log.close()


def run_group(cfg_dicts: list[dict], run_dirs: list[str], cache_dir: str | None = None, threads: int = 0) -> list[dict]:
    """Run a worker's group of points (untrained networks as one computation), each point's record back. A
    pool worker stopped by its sweep exits here once its checkpoint is written, before it gets another group."""
    try:
        with interrupts.raising_in_worker():
            return _run_group(cfg_dicts, run_dirs, cache_dir, threads)
    except interrupts.Interrupted:
        if mp.parent_process() is None:   # not a pool worker (a test, a notebook): the caller decides
            raise
        os._exit(interrupts.EXIT_CODE)


def _run_group(cfg_dicts: list[dict], run_dirs: list[str], cache_dir: str | None, threads: int) -> list[dict]:
    limit_threads(threads)
    problems: dict[str, Problem] = {}
    todo = [(c, d) for c, d in zip(cfg_dicts, run_dirs) if not is_file(RunDir(d).summary)]
    if len(todo) > 1:
        start = time.time()
        try:
            cfgs = [Config.model_validate(c) for c, _ in todo]
            shared: dict[str, Problem] = {}   # twins (e.g. two momenta) are gated once: the same data and contexts
            for cfg, (_, d) in zip(cfgs, todo):
                key = section_hash(cfg, PROBLEM_SECTIONS)
                problems[d] = shared[key] = shared.get(key) or prepare(cfg)
            train_gd_group(cfgs, [d for _, d in todo], [problems[d] for _, d in todo])
            note = f"trained as one computation with {len(todo)} networks in {time.time() - start:.1f} s"
        except Exception as exc:   # each point then trains on its own, and records its own failure
            note = f"batched training failed ({type(exc).__name__}: {exc}); training alone".splitlines()[0]
        for _, d in todo:
            with contextlib.suppress(OSError), open_append(RunDir(d).log) as log:
                log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}: {note}\n")
    # a point whose program another worker is solving goes to the back of the queue; only when every
    # point left waits on another worker does one wait, so two workers solve different programs
    records: dict[int, dict] = {}
    queue, waited_in_a_row = list(range(len(cfg_dicts))), 0
    while queue:
        i = queue.pop(0)
        defer = cache_dir is not None and waited_in_a_row <= len(queue) and len(queue) > 0
        record = run_point(cfg_dicts[i], run_dirs[i], cache_dir, problems.get(run_dirs[i]), defer=defer)
        if record["status"] == "deferred":
            queue.append(i)
            waited_in_a_row += 1
        else:
            records[i], waited_in_a_row = record, 0
    return [records[i] for i in range(len(cfg_dicts))]


class PointFailure(Exception):
    """The point's own record at the stage it reached says it failed (the message: why)."""


def check_points(points: list[Config]) -> None:
    """What `gb train-gd` and `gb fit-svm` refuse (memory, device), for every point before the first runs."""
    for p in points:
        try:
            check_device(p)
            check_memory(p)
            if p.svm.objectives:
                check_svm_request(p, list(p.svm.objectives), p.svm.solver)
            if getattr(p.model, "weights", None):   # explicit weights: names and shapes, on the meta device
                with torch.device("meta"):
                    net = spec_of(p).network(p, p.dataset.feature_dim())
                check_weights(net, p.model.weights)
        except GbError as exc:
            raise GbError(f"grid point {point_id(p)}: {exc}") from None


def sweep_lock(out: Path):
    """Exclusive lock on OUT/.sweep.lock (released by the kernel if the process dies)."""
    return run_lock(out, name=layout.SWEEP_LOCK, busy="another sweep is running on this directory (pid {pid})",
                    kind="sweep")


def run_sweep(path: str | Path, out: str | Path | None = None, overrides: tuple[str, ...] = (),
              executor: str | None = None, jobs: int | None = None,
              progress: bool = True, echo=log.info, threads: int | None = None, labels: dict | None = None,
              ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Run every unfinished point, then aggregate; messages go to `echo` and OUT/log.txt."""
    clock = Clock()
    base, points = expand(path, overrides)
    executor = executor or base.sweep.executor
    jobs = jobs or base.sweep.jobs
    threads = threads or base.sweep.threads
    out = run_dir_for(base, out, overrides)
    check_tree(out)   # before any work: a received sweep directory with a symlink, or a run directory
    check_kind(out, "sweep", command="gb sweep")
    check_points(points)   # what the config asks of this machine (device, memory) first: it needs no data
    # data-level checks (files, split sizes) for every distinct dataset, before any point runs
    for cfg in {json.dumps(p.dataset.model_dump(), sort_keys=True): p for p in points}.values():
        dataset_of(cfg)
    tracking.check(base)
    runner = make_executor(base.sweep, executor, jobs, threads, out, echo)
    runner.check()   # Slurm: the client commands and a controller that answers, before anything is written
    with sweep_lock(out), open_append(SweepDir(out).log) as log_file:
        write_labels(out, labels or {})

        def say(msg: str, shown=echo) -> None:   # the terminal (or the caller's logger) and the sweep's log.txt
            shown(msg)
            with contextlib.suppress(OSError):   # a full disk: the message was shown
                log_file.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {msg}\n")
                log_file.flush()

        echo = runner.echo = say
        atomic_write_text(SweepDir(out).config, dump_yaml(read_config(path, overrides)))   # as given, grid included
        dirs = {point_id(p): SweepDir(out).point(point_id(p)).root for p in points}
        done = heal_points(dirs, echo)
        others = sorted(d.name for d in subdirs(SweepDir(out).points) if d.name not in dirs)
        if others:   # a changed grid in the same folder: nothing is removed unasked
            named = ", ".join(shorten(printable(o), 40) for o in others[:3]) + (" ..." if len(others) > 3 else "")
            echo(f"{len(others)} point folder{'s' if len(others) > 1 else ''} in {SweepDir(out).points} "
                 f"{'are' if len(others) > 1 else 'is'} not in this grid ({named}): kept, and left out of the "
                 f"tables and figures")
        todo = [p for p in points if point_id(p) not in done]
        echo(f"sweep {base.name}: {len(points)} points, {len(points) - len(todo)} done, running {len(todo)}"
             f" ({executor}, {jobs} at a time)")
        steps = {pid: s for pid, p in ((point_id(p), p) for p in todo)
                 if (s := checkpoint_step(RunDir(dirs[pid]).checkpoint, gd_manifest(p)["config"])) is not None}
        if steps:   # a resumed sweep says so: these points continue their training, not start it
            shown_steps = ", ".join(f"{pid} at step {s:,}" for pid, s in sorted(steps.items())[:8])
            echo(f"resuming {len(steps)} point{'s' if len(steps) > 1 else ''} from their training checkpoints: "
                 f"{shown_steps}{' ...' if len(steps) > 8 else ''}")
        if base.tracking.mlflow is not None:   # the points' MLflow runs take their readable names from it
            write_csv(SweepDir(out).points_table, point_table(points))
        live = Live.start(base, out, "sweep", kind="sweep")   # the parent run of the points' runs
        with tracked(live):
            if todo:
                cache = str(SweepDir(out).solves) if base.sweep.solve_cache else None
                size = min(base.sweep.batch, -(-len(todo) // jobs))   # groups enough to keep every job busy
                untracked = live is not None and not live.working   # its one warning line was shown
                tasks = [([untrack(p.to_dict(), untracked) for p in g], [str(dirs[point_id(p)]) for p in g], cache)
                         for g in largest_first(spread_twins(group_points(todo, size)))]
                names = {str(dirs[point_id(p)]): n for p, n in zip(points, readable_names(points))}
                runner.run(run_group, tasks, progress, echo, names)
            if progress:   # the tables and figures of many points take seconds: said before they start
                echo(f"sweep {base.name}: aggregating the tables and figures of {len(points)} points")
            errors, incons, failures = aggregate(out, points, echo)
            if live is not None:   # points done before tracking was asked for: logged from their records
                live.replay_points([d for pid, d in dirs.items() if pid in done], echo)
            SweepRecord(SweepDir(out).record, {"name": base.name, "points": len(points), "ran": len(todo),
                                               "failed": len(failures), "executor": executor, "jobs": jobs,
                                               "provenance": clock.stamp()}).write()
        return errors, incons, failures


def heal_points(dirs: dict[str, Path], echo) -> set[str]:
    """What a crash tore in the points' folders undone (said in one line); the ids of the points done."""
    torn, done = {}, set()
    earlier = sum(is_dir(d) for d in dirs.values())
    if earlier:   # each is checked against its records (`done_tables`): seconds for a large grid
        echo(f"checking the {earlier} point folder{'s' if earlier > 1 else ''} of an earlier run")
    for pid, d in dirs.items():
        if is_dir(d):
            found = heal_point(d, stages=False)
            if is_done(d):
                done.add(pid)
            else:
                found += heal_point(d)
            if found:
                torn[pid] = found
    if torn:
        shown = "; ".join(f"{pid}: {', '.join(str(p.relative_to(dirs[pid])) for p in files[:3])}"
                          for pid, files in list(torn.items())[:4])
        echo(f"healing after a crash: torn files in {len(torn)} point{'s' if len(torn) > 1 else ''} ({shown}"
             f"{' ...' if len(torn) > 4 else ''}); their stages run again")
    return done


def untrack(cfg: dict, untracked: bool) -> dict:
    """A point's config, without tracking when the sweep's own failed (else its store's path absolute)."""
    uri = cfg["tracking"]["mlflow"]
    return {**cfg, "tracking": {**cfg["tracking"], "mlflow": None if untracked or uri is None else tracking.absolute(uri)}}


def group_points(points: list[Config], size: int) -> list[list[Config]]:
    """Points whose networks can train as one computation (the same batch key), at most `size` a group."""
    groups, open_ = [], {}   # every group; the one still filling of each batch key
    for p in points:
        key = batch_key(p) if size > 1 else None
        if key is None:
            groups.append([p])
            continue
        if key not in open_ or len(open_[key]) >= size:
            open_[key] = []
            groups.append(open_[key])
        open_[key].append(p)
    return groups


def spread_twins(groups: list[list[Config]]) -> list[list[Config]]:
    """Groups with the same programs as far apart as possible: a twin's are usually solved when it starts."""
    sets: dict[tuple, list[list[Config]]] = {}
    for g in groups:
        sets.setdefault(tuple(section_hash(p, PROBLEM_SECTIONS + ("svm",)) for p in g), []).append(g)
    return [s[i] for i in range(max(map(len, sets.values()), default=0)) for s in sets.values() if i < len(s)]


def largest_first(groups: list[list[Config]]) -> list[list[Config]]:
    """The groups by estimated work, points x (steps x parameters + N^2), largest first: no job runs last alone."""
    sizes: dict[str, int] = {}

    def parameters(p: Config) -> int:
        """The network's parameter count, built on torch's meta device (no memory, no initialization)."""
        key = json.dumps([p.model.model_dump(mode="json"), p.contexts.model_dump(mode="json"),
                          p.dataset.feature_dim()], sort_keys=True)
        if key not in sizes:
            try:
                with torch.device("meta"):
                    sizes[key] = sum(w.numel() for w in spec_of(p).network(p, p.dataset.feature_dim()).parameters())
            except Exception:   # only an estimate: a network that cannot be built fails in its point
                sizes[key] = 1
        return sizes[key]

    def work(g: list[Config]) -> float:
        p = g[0]
        n = p.dataset.train_size
        steps = p.training.epochs * -(-n // min(p.training.batch_size or n, n))
        return len(g) * (steps * parameters(p) + n * n)
    return sorted(groups, key=work, reverse=True)   # stable: ties keep their order


def draw_figures(errors: pd.DataFrame, incons: pd.DataFrame, out: str | Path) -> list[Path]:
    """The four panels, then the experiments' own tables and figures; returns the figures' paths."""
    from gbcli.runs.figures import plot_sweep   # matplotlib: only when drawing (0.3 s of CPU)

    with staged_writes():   # a point record a report cannot read: one line, and nothing written
        paths = plot_sweep(errors, incons, out)
        for report in SWEEP_REPORTS:
            try:
                paths += report(out)
            except NOT_GBS as exc:
                raise GbError(f"{out}: a point's record that {report.__name__} reads is not gb's "
                              f"({type(exc).__name__}: {quoted(str(exc), 120)}); nothing was written "
                              "(`gb compare` on the point rewrites its tables)") from None
    return paths


def point_table(points: list[Config]) -> pd.DataFrame:
    """One row per point: its id, name and every resolved config key whose value differs between points."""
    flat = [{k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in flatten(p.to_dict()).items()}
            for p in points]
    keys = [k for k in dict.fromkeys(k for f in flat for k in f) if len({repr(f.get(k)) for f in flat}) > 1]
    names = readable_names(points)
    return pd.DataFrame([{"point": point_id(p), "name": name, **{k: f.get(k) for k in keys}}
                         for p, f, name in zip(points, flat, names)])


def dry_run(path: str | Path, out: str | Path | None = None, overrides: tuple[str, ...] = ()) -> pd.DataFrame:
    """The points a sweep would run (id, name, done already), without running or writing anything."""
    base, points = expand(path, overrides)
    check_points(points)   # what the sweep itself would refuse before running any point
    out = run_dir_for(base, out, overrides)
    table = point_table(points)
    table.insert(2, "done", [is_done(SweepDir(out).point(point_id(p)).root) for p in points])
    return table


def aggregate(out: Path, points: list[Config], echo=log.info) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The finished points' tables (one block each) and the failures, into OUT/tables/ and OUT/figures/."""
    errs, incs, fails = [], [], []
    for cfg in points:
        pid = point_id(cfg)
        d = SweepDir(out).point(pid).root
        done = done_tables(d)   # a corrupt or edited point is not done: its failure, not the sweep's
        if done is not None:
            errs.append(done[0].assign(point=pid))
            incs.append(done[1].assign(point=pid))
            try:   # OUT/solutions/<id>/: the compact solutions that `gb verify` checks and results folders carry
                copy_point_solutions(d, out / layout.SOLUTIONS / pid)
            except (OSError, ValueError) as exc:
                echo(f"warning: point {pid}: its solutions were not copied into {out / layout.SOLUTIONS} ({exc})")
        else:
            fails.append({"point": pid, **FailureRecord.read(d).as_dict()})
    errors, incons = (pd.concat(t, ignore_index=True) if t else pd.DataFrame() for t in (errs, incs))
    failures = pd.DataFrame(fails, columns=["point", "status", "stage", "message", "log"])
    tables = SweepDir(out).tables
    for name, table in ((layout.ERRORS, errors), (layout.INCONSISTENCY, incons), (layout.FAILURES, failures)):
        write_csv(tables / name, table)
    write_csv(SweepDir(out).points_table, point_table(points))
    if errs:
        write_csv(tables / "summary.csv", summarize(errors, incons))
        draw_figures(errors, incons, out)
    echo(f"{len(points) - len(fails)} of {len(points)} points done, {len(fails)} failed"
         + (f": see {tables / layout.FAILURES}" if fails else ""))
    return errors, incons, failures
