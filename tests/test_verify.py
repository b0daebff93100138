"""`gb verify`: every stored certificate checked again from the data and the stored arrays, without a
solver, in a run, a sweep and a results folder; tampered files are reported, never trusted or crashed on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gbcli.config import load_config
from gbcli.errors import GbError
from gbcli.store import solutions as S
from gbcli.runs import verify as V
from gbcli.runs.stages import fit_svm, train_gd
from gbcli.runs.sweep import run_sweep
import forked_gb

ROOT = Path(__file__).resolve().parents[1]
DIGITS = {"name": "digits", "train_size": 300, "val_size": 600}
# conflicting labels on the same input: no linear predictor separates them (svm-shallow is infeasible)
CONFLICT = {"name": "infeasible", "dataset": {"name": "points", "x": [[1.0, 0.5], [-1.0, -0.5], [0.5, 1.0], [1.0, 0.5]],
                                               "y": [1, 1, -1, -1]},
            "model": {"kind": "linear"}, "training": {"batch_size": None, "epochs": 20, "lr": 0.1},
            "svm": {"objectives": ["svm-shallow"]}}

pytestmark = pytest.mark.slow


def gb(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    return forked_gb.run(args, cwd, env, timeout=600)   # a real process forked from one that has imported gb


def rows_of(proc: subprocess.CompletedProcess) -> list[dict]:
    return json.loads(proc.stdout)


def programs(rows: list[dict]) -> list[dict]:
    """The programs' rows (without each run's trained network, `gd`)."""
    return [r for r in rows if r["objective"] != "gd"]


def by_program(rows: list[dict]) -> dict:
    return {(r["where"], r["objective"]): r for r in rows}


def write(tmp: Path, body: dict, name: str = "cfg") -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


# ------------------------------------------------------------------ fixtures: real runs


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """configs/quickstart.yaml through the CLI: train-gd, fit-svm (svm-gln, svm-l2)."""
    tmp = tmp_path_factory.mktemp("quick")
    run = tmp / "run"
    for cmd in ("train-gd", "fit-svm"):
        p = gb(cmd, ROOT / "configs" / "quickstart.yaml", "--out", run, "-q", cwd=tmp)
        assert p.returncode == 0, p.stdout + p.stderr
    return run


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A two-point sweep (two context seeds) with svm-gln and svm-l2-reference."""
    tmp = tmp_path_factory.mktemp("sweep")
    cfg = write(tmp, {"name": "vgrid", "dataset": DIGITS, "model": {"kind": "gln", "hidden_units": 3},
                      "training": {"epochs": 5}, "svm": {"objectives": ["svm-gln", "svm-l2-reference"]},
                      "grid": {"contexts.seed": [1, 2]}})
    errors, _, failures = run_sweep(cfg, tmp / "out", progress=False, echo=lambda *_: None, jobs=1)
    assert len(failures) == 0 and len(errors) == 6
    return tmp / "out"


@pytest.fixture(scope="module")
def infeasible(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("infeasible")
    cfg = load_config(write(tmp, CONFLICT))
    train_gd(cfg, tmp / "run", progress=False)
    (r,) = fit_svm(cfg, tmp / "run", progress=False)
    assert r["status"] == "infeasible" and r["certified"], r
    return tmp / "run"


def copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst, symlinks=True)
    return dst


def resave(path: Path, **changes) -> None:
    """Rewrite an npz with some arrays changed (a plain np.savez: any zip of .npy is readable)."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: np.array(z[k]) for k in z.files}
    for k, f in changes.items():
        arrays[k] = f(arrays[k])
    path.unlink()
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


# ------------------------------------------------------------------ what verifies


def test_a_quickstart_run_verifies(quickstart):
    p = gb("verify", quickstart, "--format", "json", cwd=quickstart.parent)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = rows_of(p)
    assert [r["objective"] for r in rows] == ["gd", "svm-gln", "svm-l2"]
    for r in rows:
        assert r["verified"] == "yes" and r["claimed status"] in ("ok", "optimal") and not r["problems"], r
        assert r["checked"] == ("network" if r["objective"] == "gd" else "compact (zeta)"), r
    table = gb("verify", quickstart, cwd=quickstart.parent)
    assert table.returncode == 0 and "3 of 3 verified (trained networks and programs" in table.stdout


def test_a_sweep_its_export_and_a_folder_of_results_verify(sweep, tmp_path):
    p = gb("verify", sweep, "--format", "json", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = rows_of(p)
    points = sorted(d.name for d in (sweep / "points").iterdir())
    assert sorted({r["where"] for r in rows}) == points and len(rows) == 6   # each point: gd and two programs
    assert all(r["verified"] == "yes" for r in rows), rows
    # the sweep copies each point's compact solutions and config into OUT/solutions/<id>/
    for pid in points:
        assert sorted(f.name for f in (sweep / "solutions" / pid).iterdir()) == \
            ["config.yaml", "svm-gln.npz", "svm-l2-reference.npz"]
    # a results folder: the tables and the verified compact solutions (gb verify --export)
    results = tmp_path / "results" / "grid"
    shutil.copytree(sweep / "tables", results / "tables")
    p = gb("verify", sweep, "--export", results, cwd=tmp_path)
    assert p.returncode == 0 and "4 compact solutions ->" in p.stdout, p.stdout + p.stderr
    p = gb("verify", results, "--format", "json", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = rows_of(p)
    assert len(rows) == 4 and all(r["verified"] == "yes" for r in rows), rows
    assert {r["checked"] for r in rows} <= {"zeta", "multipliers"}
    p = gb("verify", tmp_path / "results", "--format", "json", cwd=tmp_path)   # a folder of results folders
    assert p.returncode == 0 and sorted({r["where"] for r in rows_of(p)}) == [f"grid/{pid}" for pid in points]


def test_the_multipliers_form_reproduces_the_certificate(tmp_path, shared_data_dir, monkeypatch):
    """Above ZETA_INLINE_BYTES a predictor is stored as its multipliers and recovery scales
    (svm-l2-reference, through its exact reduction on MNIST: its multipliers alone); the file is a
    fraction of zeta's and verifies."""
    monkeypatch.setattr(S, "ZETA_INLINE_BYTES", 0)
    cfg = load_config(write(tmp_path, {"preset": "paper", "dataset": {"train_size": 300, "val_size": 1000},
                                       "model": {"kind": "gln", "hidden_units": 10},
                                       "svm": {"objectives": ["svm-gln", "svm-l2", "svm-l2-reference"]}}))
    run = tmp_path / "run"
    for r in fit_svm(cfg, run, progress=False):
        assert r["status"] == "optimal", r
    for obj in ("svm-gln", "svm-l2", "svm-l2-reference"):
        with np.load(run / "svm" / obj / "compact.npz") as z:
            meta = json.loads(str(z["meta"][()]))
            assert meta["form"] == "multipliers" and "zeta" not in z.files
            assert z["scale"].shape == ((10,) if obj == "svm-gln" else (1,) if obj == "svm-l2" else (0,))
        zeta_bytes = 8 * meta["rows"] * meta["dim"]
        assert (run / "svm" / obj / "compact.npz").stat().st_size < zeta_bytes / 2   # a fraction of zeta's
    rows = V.verify(run)
    assert [(r["objective"], r["verified"], r["checked"]) for r in rows] == [
        (o, True, "compact (multipliers)") for o in ("svm-gln", "svm-l2", "svm-l2-reference")], rows
    # a changed multiplier changes the recovered predictor and the bound: both are caught
    resave(run / "svm" / "svm-gln" / "compact.npz", lam_value=_largest_times_3)
    (row, *_) = V.verify(run)
    assert row["objective"] == "svm-gln" and row["verified"] is False
    assert any("compact.npz: " in p for p in row["problems"]), row


def test_an_infeasible_program_is_verified_through_its_ray(infeasible, tmp_path):
    (row,) = programs(V.verify(infeasible))
    assert row["verified"] is True and row["claimed_status"] == "infeasible", row
    assert row["checked"].startswith("compact (ray: relative margin <= ") and row["checked"].endswith(")")
    run = copy(infeasible, tmp_path)
    npz = run / "svm" / "svm-shallow" / "compact.npz"

    def drop_largest(lam):
        lam = lam.copy()
        lam[np.argmax(lam)] = 0.0
        return lam
    resave(npz, lam_value=drop_largest)   # no longer a ray: it bounds nothing
    (row,) = programs(V.verify(run))
    assert row["verified"] is False
    assert any("result.json: status 'infeasible', recomputed failed" in p for p in row["problems"]), row


# ------------------------------------------------------------------ what does not


def _largest_times_3(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a[np.argmax(a)] *= 3   # a support multiplier (the others of an interior-point answer are ~1e-13 of it)
    return a


def _tamper_compact_multiplier(stage: Path):
    resave(stage / "compact.npz", lam_value=_largest_times_3)


def _tamper_objective(stage: Path):
    rec = json.loads((stage / "result.json").read_text())
    rec["objective"] *= 0.99
    (stage / "result.json").write_text(json.dumps(rec))


def _tamper_certified(stage: Path):
    rec = json.loads((stage / "result.json").read_text())
    rec["rel_gap"] = 1e-3
    (stage / "result.json").write_text(json.dumps(rec))


def _tamper_prediction(stage: Path):
    resave(stage / "predictions.npz", val_out=lambda a: np.r_[-a[0], a[1:]])


def _tamper_val_sign(stage: Path):
    resave(stage / "compact.npz", val_sign=lambda a: np.r_[-a[0], a[1:]].astype(np.int8))


def _truncate(stage: Path):
    data = (stage / "compact.npz").read_bytes()
    (stage / "compact.npz").write_bytes(data[: len(data) // 2])


def _symlink(stage: Path):
    (stage / "compact.npz").rename(stage.parent / "elsewhere.npz")
    (stage / "compact.npz").symlink_to(stage.parent / "elsewhere.npz")


def _pickle(stage: Path):
    (stage / "compact.npz").unlink()
    with open(stage / "compact.npz", "wb") as fh:
        np.savez(fh, zeta=np.array([{"payload": 1}], dtype=object), lam_value=np.ones(3))


def _missing(stage: Path):
    (stage / "compact.npz").unlink()


def _not_finite(stage: Path):
    resave(stage / "compact.npz", zeta=lambda a: np.where(np.arange(a.size).reshape(a.shape) == 0, np.nan, a))


def _wrong_shape(stage: Path):
    resave(stage / "compact.npz", zeta=lambda a: a[:-1])


def _foreign_member(stage: Path):
    resave(stage / "compact.npz", meta=lambda a: a)
    with np.load(stage / "compact.npz") as z:
        arrays = {k: z[k] for k in z.files}
    (stage / "compact.npz").unlink()
    with open(stage / "compact.npz", "wb") as fh:
        np.savez(fh, extra=np.zeros(2), **arrays)


TAMPER = {
    "a compact multiplier": (_tamper_compact_multiplier, "compact.npz: rel_gap"),
    "the objective": (_tamper_objective, "result.json: objective"),
    "the claimed gap": (_tamper_certified, "result.json: rel_gap 0.001"),
    "a prediction": (_tamper_prediction, "predictions.npz: val_out differs from the recomputed outputs at 1 points"),
    "a stored label": (_tamper_val_sign, "compact.npz: val_sign differs"),
    "a truncated npz": (_truncate, "compact.npz: not a readable npz"),
    "a symlink": (_symlink, "compact.npz: is a symlink (not followed)"),
    "a pickle": (_pickle, "compact.npz: not a readable npz of arrays (ValueError: Object arrays cannot be loaded"),
    "a missing solution": (_missing, "compact.npz: missing"),
    "a NaN": (_not_finite, "zeta: not finite"),
    "a wrong shape": (_wrong_shape, "zeta: float64"),
    "a foreign array": (_foreign_member, "compact.npz: unexpected member 'extra.npy'"),
}


@pytest.mark.parametrize("case", list(TAMPER))
def test_a_tampered_solution_is_not_verified(quickstart, tmp_path, case):
    tamper, expected = TAMPER[case]
    run = copy(quickstart, tmp_path)
    tamper(run / "svm" / "svm-gln")
    rows = by_program(V.verify(run))
    bad, good = rows[("run", "svm-gln")], rows[("run", "svm-l2")]
    assert good["verified"] is True, good
    assert bad["verified"] is False and any(expected in p for p in bad["problems"]), bad["problems"]


def test_the_cli_names_the_program_and_exits_1(quickstart, tmp_path):
    run = copy(quickstart, tmp_path)
    _tamper_objective(run / "svm" / "svm-l2")
    p = gb("verify", run, cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "2 of 3 verified" in p.stdout and "result.json: objective" in p.stdout
    assert p.stderr.strip() == "gb: 1 result(s) not verified: run/svm-l2"


def test_a_tampered_results_folder_is_not_verified(sweep, tmp_path):
    results = tmp_path / "fig"
    shutil.copytree(sweep / "tables", results / "tables")
    assert gb("verify", sweep, "--export", results, cwd=tmp_path).returncode == 0
    pid = sorted(d.name for d in (results / "solutions").iterdir())[0]
    point = results / "solutions" / pid
    assert not V.verify(results)[0]["problems"]
    # the committed table's claim
    table = (results / "tables" / "errors.csv").read_text().splitlines()
    head = table[0].split(",")
    i = next(k for k, line in enumerate(table) if f",{pid}" in line and line.startswith("svm-gln,"))
    cells = table[i].split(",")
    cells[head.index("val_error")] = "0.5"
    (results / "tables" / "errors.csv").write_text("\n".join(table[:i] + [",".join(cells)] + table[i + 1:]) + "\n")
    rows = by_program(V.verify(results))
    assert any("errors.csv: val_error 0.5" in p for p in rows[(pid, "svm-gln")]["problems"])
    assert rows[(pid, "svm-l2-reference")]["verified"] is True
    # a stored label, a missing file, a linked config
    _tamper_val_sign_file(point / "svm-l2-reference.npz")
    (point / "svm-gln.npz").unlink()
    rows = by_program(V.verify(results))
    assert any("val_sign differs" in p for p in rows[(pid, "svm-l2-reference")]["problems"])
    assert rows[(pid, "svm-gln")]["problems"] == [f"solutions/{pid}/svm-gln.npz: missing (tables/errors.csv has the program)"]
    other = sorted(d.name for d in (results / "solutions").iterdir())[1]
    cfg = results / "solutions" / other / "config.yaml"
    cfg.rename(tmp_path / "config.yaml")
    cfg.symlink_to(tmp_path / "config.yaml")
    rows = by_program(V.verify(results))
    assert all("config.yaml: is a symlink" in rows[(other, o)]["problems"][0] for o in ("svm-gln", "svm-l2-reference"))
    p = gb("verify", results, cwd=tmp_path)
    assert p.returncode == 1 and "verified (trained networks and programs" in p.stdout


# ------------------------------------------------------------------ the trained network (gd/)


def _edit_summary(gd: Path, **changes):
    record = json.loads((gd / "summary.json").read_text())
    (gd / "summary.json").write_text(json.dumps({**record, **{k: f(record[k]) for k, f in changes.items()}}))


def _negated_outputs(gd: Path):
    # a consistent lie: the outputs negated and the recorded errors with them (the tables' own checks,
    # |e_a - e_b| <= inconsistency <= e_a + e_b, cannot see it)
    resave(gd / "predictions.npz", train_out=np.negative, val_out=np.negative)
    _edit_summary(gd, train_error=lambda e: 1 - e, val_error=lambda e: 1 - e)


class _Payload:   # what a hostile model.pt would run on unpickling
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def _pickled_model(gd: Path):
    import pickle

    (gd / "model.pt").write_bytes(pickle.dumps({"kind": "gln", "state_dict": _Payload()}))


def _nan_weights(gd: Path):
    import torch

    state = torch.load(gd / "model.pt", weights_only=True)
    name = next(iter(state["state_dict"]))
    state["state_dict"][name] = torch.full_like(state["state_dict"][name], float("nan"))
    torch.save(state, gd / "model.pt")


def _edited_lr(gd: Path):
    cfg = yaml.safe_load((gd / "config.yaml").read_text())
    cfg["training"]["lr"] = cfg["training"]["lr"] * 2
    (gd / "config.yaml").write_text(yaml.safe_dump(cfg))


def _huge_network(gd: Path):
    cfg = yaml.safe_load((gd / "config.yaml").read_text())
    cfg["model"]["hidden_units"] = 2 ** 31 - 1
    (gd / "config.yaml").write_text(yaml.safe_dump(cfg))


def _linked_model(gd: Path):
    (gd / "model.pt").rename(gd / "m.pt")
    (gd / "model.pt").symlink_to("m.pt")


def _fifo_model(gd: Path):
    (gd / "model.pt").unlink()
    os.mkfifo(gd / "model.pt")   # opening it for reading would wait for a writer forever


def _complex_weights(gd: Path):
    import torch

    state = torch.load(gd / "model.pt", weights_only=True)
    name = next(iter(state["state_dict"]))
    w = state["state_dict"][name]
    state["state_dict"][name] = torch.complex(w, torch.full_like(w, 1e3))
    torch.save(state, gd / "model.pt")


NETWORK_TAMPER = {
    "negated outputs and errors": (_negated_outputs, "predictions.npz: train_out differs from the recomputed outputs"),
    "an edited val_error": (lambda gd: _edit_summary(gd, val_error=lambda e: e + 0.01), "summary.json: val_error"),
    "a status that is not a network's": (lambda gd: _edit_summary(gd, status=lambda _: "optimal"),
                                         "summary.json: status 'optimal' is not a network's"),
    "a pickle for weights": (_pickled_model, "model.pt: holds objects other than tensors (refused, never loaded)"),
    "NaN weights": (_nan_weights, "summary.json: status 'ok', but the recomputed outputs are not finite"),
    "an edited config": (_edited_lr, "config.yaml: not the config summary.json was computed from"),
    "a linked model": (_linked_model, "model.pt: is a symlink (not followed)"),
    "a network too large to build": (_huge_network, "model.hidden_units: this network needs about"),
    "a FIFO for weights": (_fifo_model, "model.pt: not a regular file"),
    "complex weights": (_complex_weights, "model.pt: holds complex or non-dense tensors"),
    "negated published outputs": (lambda gd: resave(gd / "predictions.npz", val_out_published=np.negative),
                                  "predictions.npz: val_out_published differs from the recomputed outputs"),
    "a bool for an error": (lambda gd: _edit_summary(gd, train_error=lambda e: bool(e)),
                            "summary.json: train_error False is not the recomputed 0"),
    "an edited train_loss": (lambda gd: _edit_summary(gd, train_loss=lambda v: v * 2), "summary.json: train_loss"),
    "a status 100,000 characters long": (lambda gd: _edit_summary(gd, status=lambda _: "ok" * 50_000),
                                         "is not a network's"),
}


@pytest.mark.parametrize("case", list(NETWORK_TAMPER))
def test_a_tampered_network_is_not_verified(quickstart, tmp_path, case):
    """The GD stage's outputs are recomputed from its weights on its data: a record or predictions
    that do not follow from gd/model.pt are not verified, and the programs beside it still are."""
    tamper, expected = NETWORK_TAMPER[case]
    run = copy(quickstart, tmp_path)
    assert all(r["verified"] for r in V.verify(run))
    tamper(run / "gd")
    rows = by_program(V.verify(run))
    bad = rows[("run", "gd")]
    assert bad["verified"] is False and any(expected in p for p in bad["problems"]), bad["problems"]
    assert len(str(bad["claimed_status"])) <= 40 and all(len(p) <= 300 for p in bad["problems"]), bad
    # the programs beside it stand, unless the network's config says another problem than theirs
    assert rows[("run", "svm-l2")]["verified"] is (tamper is not _huge_network)
    assert not (tmp_path / "pwned").exists() and not (run / "pwned").exists()


def test_a_checkpoint_that_unpacks_larger_than_the_limit_is_not_read(quickstart, tmp_path, monkeypatch):
    """model.pt is a zip (torch's format) whose members may be deflated: its unpacked size is bounded
    before torch reads it (the limit lowered here to a few kilobytes; gb's is 1 GiB)."""
    import zipfile

    from gbcli.runs import stages

    run = copy(quickstart, tmp_path)
    monkeypatch.setattr(stages, "MAX_CHECKPOINT_BYTES", 64 * 1024)
    assert (run / "gd" / "model.pt").stat().st_size < 64 * 1024   # the real checkpoint is read
    assert by_program(V.verify(run))[("run", "gd")]["verified"] is True
    (run / "gd" / "model.pt").unlink()
    with zipfile.ZipFile(run / "gd" / "model.pt", "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data/0", bytes(1024 * 1024))   # 1 MB of zeros in about a kilobyte
    assert (run / "gd" / "model.pt").stat().st_size < 64 * 1024
    row = by_program(V.verify(run))[("run", "gd")]
    assert row["verified"] is False and any("1 MB, more than gb's limit of 0 MB for a network (not read)" in p
                                            for p in row["problems"]), row


def test_an_exploded_loss_is_diverged_whatever_the_record_says(tmp_path):
    """A step far too large makes the loss grow a millionfold while the outputs stay finite: the
    training records `diverged`. Relabelled `ok`, the record is contradicted by the loss recomputed
    from the weights against the loss of the seeded initialization."""
    cfg = load_config(write(tmp_path, {"dataset": {"name": "digits", "train_size": 100, "val_size": 100},
                                       "model": {"kind": "gln", "hidden_units": 3},
                                       "training": {"epochs": 5, "lr": 300}}))
    summary = train_gd(cfg, tmp_path / "run", progress=False)
    assert summary["status"] == "diverged" and np.isfinite(summary["train_loss"]), summary
    _edit_summary(tmp_path / "run" / "gd", status=lambda _: "ok")
    (row,) = V.verify(tmp_path / "run")
    assert row["verified"] is False, row
    assert any(p.startswith("summary.json: status 'ok', but the recomputed training loss grew from ") for p in row["problems"])
    assert any(p.startswith("diverged: the training loss grew from ") for p in row["problems"]), row


def test_the_json_of_a_row_with_an_infinite_claim_is_standard_json(quickstart, tmp_path):
    run = copy(quickstart, tmp_path)
    (run / "gd" / "summary.json").write_text((run / "gd" / "summary.json").read_text().replace(
        '"val_error": ', '"val_error": 1e400, "was": ', 1))
    p = gb("verify", run, "--format", "json", cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr

    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    rows = {r["objective"]: r for r in json.loads(p.stdout, parse_constant=refuse)}
    assert rows["gd"]["value"] == "inf" and rows["gd"]["verified"] == "NO", rows["gd"]


def test_a_sweeps_table_claims_for_its_networks_are_checked(sweep, tmp_path):
    """The aggregated tables/errors.csv has a row per point for the network (gd-gln): an edited row,
    and a point whose network is gone while the table still has it, are not verified."""
    out = copy(sweep, tmp_path)
    table = pd.read_csv(out / "tables" / "errors.csv")
    gd_rows = table.index[table["predictor"] == "gd-gln"]
    assert len(gd_rows) == 2
    table.loc[gd_rows, "val_error"] = 0.01
    table.to_csv(out / "tables" / "errors.csv", index=False)
    a, b = sorted(d for d in (out / "points").iterdir())
    shutil.rmtree(b / "gd")
    rows = by_program(V.verify(out))
    assert any(p.startswith("tables/errors.csv (gd-gln): val_error 0.01 is not the recomputed")
               for p in rows[(a.name, "gd")]["problems"]), rows[(a.name, "gd")]
    assert rows[(b.name, "gd")]["problems"] == ["gd: missing (tables/errors.csv has the network)"], rows[(b.name, "gd")]
    assert all(r["verified"] for (w, o), r in rows.items() if o != "gd" and w == a.name)


def test_a_diverged_network_is_reported_not_verified(tmp_path):
    """A training that diverged is recorded as such; gb verify agrees with the record and still exits 1:
    there is no trained predictor, and a failure is never reported as success."""
    cfg = load_config(write(tmp_path, {"dataset": {"name": "digits", "train_size": 100, "val_size": 100},
                                       "model": {"kind": "linear"},
                                       "training": {"lr": 1e30, "epochs": 3, "batch_size": None}}))
    assert train_gd(cfg, tmp_path / "run", progress=False)["status"] == "diverged"
    (row,) = V.verify(tmp_path / "run")
    assert row["claimed_status"] == "diverged" and row["verified"] is False, row
    assert len(row["problems"]) == 1 and row["problems"][0].startswith("diverged: the training loss grew from "), row
    assert row["problems"][0].endswith(" (not a trained predictor)"), row
    p = gb("verify", tmp_path / "run", cwd=tmp_path)
    assert p.returncode == 1 and p.stderr.strip() == "gb: 1 result(s) not verified: run/gd", p.stdout + p.stderr


def _tamper_val_sign_file(path: Path):
    resave(path, val_sign=lambda a: np.r_[-a[0] if a[0] else 1, a[1:]].astype(np.int8))


def test_bad_input_is_refused_with_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    for target, says in ((tmp_path / "nowhere", "not a directory"), (tmp_path / "file", "not a directory"),
                         (tmp_path / "empty", "nothing to verify")):
        p = gb("verify", target, cwd=tmp_path)
        assert p.returncode == 2 and p.stderr.startswith("gb: error: DIR: ") and says in p.stderr, p.stderr
        assert len(p.stderr.splitlines()) == 1
    with pytest.raises(GbError, match="nothing to verify"):
        V.verify(tmp_path / "empty")


def test_programs_of_the_trained_network_verify_from_a_results_folder(tmp_path):
    """svm-lc and svm-hl read the trained ReLU net: a sweep's solutions/<id>/ carries its model.pt,
    and a results folder without it cannot verify them."""
    cfg = write(tmp_path, {"name": "vrelu", "dataset": DIGITS, "model": {"kind": "relu", "hidden_units": 20},
                           "training": {"epochs": 100, "lr": 0.1}, "svm": {"objectives": ["svm-lc", "svm-hl"]},
                           "grid": {"model.init_seed": [1]}})
    _, _, failures = run_sweep(cfg, tmp_path / "out", progress=False, echo=lambda *_: None, jobs=1)
    assert len(failures) == 0
    (point,) = (tmp_path / "out" / "solutions").iterdir()
    assert sorted(f.name for f in point.iterdir()) == ["config.yaml", "model.pt", "svm-hl.npz", "svm-lc.npz"]
    results = tmp_path / "results"
    _, written = V.export_solutions(tmp_path / "out", results)
    assert written == 2 and (results / "solutions" / point.name / "model.pt").is_file()
    rows = V.verify(results)
    assert [(r["objective"], r["verified"]) for r in rows] == [("svm-hl", True), ("svm-lc", True)], rows
    (results / "solutions" / point.name / "model.pt").unlink()
    for r in V.verify(results):
        assert r["verified"] is False and r["problems"] == ["the program reads the trained network: model.pt missing"]


def test_an_infinite_bound_matches_only_itself():
    # a ray whose V(lam) is exactly zero (conflicting labels on one input) bounds the optimum by +inf:
    # the claim and its recomputation are the same number (fig3's svm-gates / svm-hl rays)
    from gbcli.store.solutions import close

    inf = float("inf")
    assert close(inf, inf) and close(-inf, -inf)
    assert not close(inf, 1e300) and not close(inf, -inf) and not close(inf, float("nan"))


# ------------------------------------------------------------------ issue 34: the aggregated table, program identity


def test_an_edited_aggregated_table_of_a_sweep_is_not_verified(sweep, tmp_path):
    """The sweep's tables/errors.csv is checked against every point's recomputed programs, not only
    the points themselves."""
    out = copy(sweep, tmp_path)
    table = pd.read_csv(out / "tables" / "errors.csv")
    row = table.index[table["predictor"] == "svm-gln"][0]
    table.loc[row, "objective"] = table.loc[row, "objective"] * 0.5
    table.to_csv(out / "tables" / "errors.csv", index=False)
    p = gb("verify", out, "--format", "json", cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    bad = [r for r in rows_of(p) if r["verified"] != "yes"]
    # the point's program, and its copy in solutions/ (checked on its own once the point's is not verified)
    assert bad and {(r["where"], r["objective"]) for r in bad} == {(table.loc[row, "point"], "svm-gln")}, bad
    assert "tables/errors.csv: objective" in str(bad[0]["problems"]), bad


def test_a_program_copied_in_from_another_seed_is_not_verified(sweep, tmp_path):
    """A point's svm-gln replaced by the other point's (its config, records and solution with it):
    each file agrees with itself, but it is not the program the point's id asks for."""
    out = copy(sweep, tmp_path)
    a, b = sorted(d for d in (out / "points").iterdir())
    shutil.rmtree(a / "svm" / "svm-gln")
    shutil.copytree(b / "svm" / "svm-gln", a / "svm" / "svm-gln")
    p = gb("verify", out, "--format", "json", cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    bad = {(r["where"], r["objective"]): r["problems"] for r in rows_of(p) if r["verified"] != "yes"}
    assert (a.name, "svm-gln") in bad and f"not of {a.name}" in str(bad[(a.name, "svm-gln")]), bad
    # the same program as a plain run's, beside that run's own network: another problem than its gd/
    run = tmp_path / "run"
    shutil.copytree(a, run)
    p = gb("verify", run, "--format", "json", cwd=tmp_path)
    assert p.returncode == 1
    rows = {r["objective"]: r for r in rows_of(p)}
    assert rows["svm-l2-reference"]["verified"] == "yes", rows
    assert "a stale or copied-in program" in str(rows["svm-gln"]["problems"]), rows


def test_export_never_writes_through_a_link_in_the_destination(quickstart, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = tmp_path / "results"
    dest.mkdir()
    (dest / "solutions").symlink_to(elsewhere)
    p = gb("verify", quickstart, "--export", dest, cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stdout + p.stderr
    assert p.stderr.strip().startswith("gb: error: ") and "solutions: is a symlink" in p.stderr
    assert list(elsewhere.iterdir()) == []
    (dest / "solutions").unlink()
    p = gb("verify", quickstart, "--export", dest, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(f.name for f in (dest / "solutions" / "run").iterdir()) == ["config.yaml", "svm-gln.npz", "svm-l2.npz"]


def test_programs_are_checked_one_dataset_and_problem_at_a_time(tmp_path):
    """Memory bounded by the largest program, not the number of programs: `verify` held the data and
    gating of every dataset and problem it met (results/paper/shallow: 2.1 GB for 576 programs, 1.7 GB
    for its largest alone). It now checks the programs grouped by dataset, then problem: each problem
    is prepared once, a dataset's split is freed before the next dataset's is built, and the rows
    still come in the points' order."""
    import weakref

    import gbcli.runs.stages as stages

    cfg = write(tmp_path, {"name": "groups", "dataset": DIGITS, "model": {"kind": "gln", "hidden_units": 2},
                           "training": {"epochs": 2}, "svm": {"objectives": ["svm-gln"]},
                           "grid": {"dataset.train_size": [200, 300], "contexts.seed": [1, 2]}})
    out = tmp_path / "out"
    _, _, failures = run_sweep(cfg, out, progress=False, echo=lambda *_: None, jobs=1)
    assert len(failures) == 0
    real, prepared, splits = stages.prepare, [], {}

    def watched(c):   # the real prepare, watched: which problem, and which other dataset's split still lives
        n = c.dataset.train_size
        prepared.append((n, c.contexts.seed, sorted(k for k, ref in splits.items() if k != n and ref() is not None)))
        problem = real(c)
        splits[n] = weakref.ref(problem.dataset.x_val)
        return problem

    stages.prepare = watched
    try:
        rows = V.verify(out)
    finally:
        stages.prepare = real
    assert all(r["verified"] for r in rows), rows
    assert [r["where"] for r in programs(rows)] == sorted(p.name for p in (out / "points").iterdir())   # the points' order
    assert sorted((n, s) for n, s, _ in prepared) == [(200, 1), (200, 2), (300, 1), (300, 2)]   # each problem once
    sizes = [n for n, _, _ in prepared]
    assert sizes in ([200, 200, 300, 300], [300, 300, 200, 200]), sizes   # one dataset after the other
    assert all(not alive for _, _, alive in prepared), prepared   # the last dataset's split freed first


# ------------------------------------------------------------------ non-convex programs (paper 003)

KKT = {"name": "kkt", "dataset": {"name": "points", "x": [[1.0, 0.25], [-1.0, 0.25]], "y": [1, 1]},
       "model": {"kind": "relu", "hidden_units": 2, "weights": {"w1": [[0.1, 1.0], [-0.2, -1.0]], "w2": [[0.5, 0.4]]}},
       "training": {"batch_size": None, "epochs": 200, "lr": 0.02, "step_rule": "loss-normalized", "loss": "exponential"},
       "svm": {"objectives": ["local-search", "nonconvex-global"], "restarts": 3, "radii": [0.3, 0.01]}}


@pytest.fixture(scope="module")
def nonconvex(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kkt")
    cfg = load_config(write(tmp, KKT))
    train_gd(cfg, tmp / "run")
    fit_svm(cfg, tmp / "run", echo=lambda m: None)
    return tmp / "run"


def _forged_search(stage: Path):
    rec = json.loads((stage / "result.json").read_text())
    rec.update(objective=1.0, center_norm_sq=1.0, best_norm_sq=[0.5, 0.5], local_optimum=True)
    (stage / "result.json").write_text(json.dumps(rec))


@pytest.mark.parametrize("case", ["untouched", "forged", "no theta", "moved theta"])
def test_a_non_convex_program_is_verified_by_rerunning_its_search(nonconvex, tmp_path, case):
    """Paper 003's programs have no certificate: verify reruns their seeded search, and the record's
    numbers, its point and its outputs must be the rerun's; a search that found no certified point is
    not verified either (nothing was counted as verified unchecked)."""
    run = copy(nonconvex, tmp_path)
    stage = run / "svm" / "local-search"
    if case == "forged":
        _forged_search(stage)
    elif case == "no theta":
        (stage / "theta.npz").unlink()
    elif case == "moved theta":
        theta = np.load(stage / "theta.npz")["theta"]
        S.write_npz(stage / "theta.npz", theta=theta * 1.01)
    rows = {r["objective"]: r for r in V.verify(run)}
    local, glob = rows["local-search"], rows["nonconvex-global"]
    assert local["verified"] is (case == "untouched"), local
    assert glob["verified"] is (glob["claimed_status"] == "optimal"), glob   # a failed search is no result
    if case == "forged":
        assert any("objective 1.0 is not the rerun's" in p for p in local["problems"])
