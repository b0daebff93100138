"""Grids of runs: a base config plus `grid:` axes (dotted key -> list of values, full product).

Each point gets a stable id (a hash of its resolved config) and its own run directory under
`OUT/points/<id>`; the aggregated tables go to `OUT/tables/`. Every point is validated before
anything runs. Finished stages (complete result files) are skipped on a rerun.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import pandas as pd

from .config import Config, apply_preset, read_config, set_path, validate
from .errors import GbError
from .tables import compare, write_tables


def point_id(cfg: Config) -> str:
    """Stable id of a grid point: a hash of everything that defines its results."""
    d = cfg.to_dict()
    for k in ("name", "output", "grid", "preset"):
        d.pop(k, None)
    return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:10]


def expand(path: str | Path, overrides: tuple[str, ...] = ()) -> tuple[Config, list[Config]]:
    """The base config and the validated config of every grid point (refuses any invalid point)."""
    raw = read_config(path, overrides)
    grid = raw.pop("grid", None) or {}
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise GbError(f"{path}: grid: must map dotted keys to non-empty lists of values")
    base = validate(apply_preset(raw, str(path)), str(path))
    points = []
    for values in itertools.product(*grid.values()):
        point = raw
        for key, value in zip(grid, values):
            point = set_path(point, key.split("."), value)
        where = f"{path} (grid point {dict(zip(grid, values))})"
        points.append(validate(apply_preset(point, str(path)), where))
    return base, points


def run_sweep(path: str | Path, out: str | Path | None = None, overrides: tuple[str, ...] = (),
              progress: bool = True, echo=print) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run every grid point sequentially (train-gd, fit-svm, compare), then aggregate."""
    from .config import run_dir_for
    from .pipeline import dataset_of, fit_svm, prepare, train_gd

    base, points = expand(path, overrides)
    out = run_dir_for(base, out)
    # data-level checks (files, split sizes) for every distinct dataset, before any point runs
    for cfg in {json.dumps(p.dataset.model_dump(), sort_keys=True): p for p in points}.values():
        dataset_of(cfg)
    done = sum((out / "points" / point_id(p) / "tables" / "errors.csv").is_file() for p in points)
    echo(f"sweep {base.name}: {len(points)} points, {done} done, running {len(points) - done}")
    all_err, all_inc = [], []
    for i, cfg in enumerate(points):
        pid = point_id(cfg)
        run_dir = out / "points" / pid
        if not (run_dir / "tables" / "errors.csv").is_file():
            echo(f"[{i + 1}/{len(points)}] point {pid}")
            problem = prepare(cfg)
            if not (run_dir / "gd" / "summary.json").is_file():
                train_gd(cfg, run_dir, progress=progress, problem=problem)
            todo = [o for o in cfg.svm.objectives if not (run_dir / "svm" / o / "result.json").is_file()]
            if todo:
                fit_svm(cfg, run_dir, todo, progress=progress, problem=problem, echo=echo)
            write_tables(run_dir, *compare(run_dir))
        err = pd.read_csv(run_dir / "tables" / "errors.csv")
        inc = pd.read_csv(run_dir / "tables" / "inconsistency.csv")
        all_err.append(err.assign(point=pid))
        all_inc.append(inc.assign(point=pid))
    errors, incons = pd.concat(all_err, ignore_index=True), pd.concat(all_inc, ignore_index=True)
    write_tables(out, errors, incons)
    return errors, incons
