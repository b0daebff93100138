"""The CLI's refusals on a tiny digits run (run folders gb does not own, an empty config, a tables file
in the way, non-finite floats, a run another process is writing, a lock file's text), as the project's
rule for bad input says: one line `gb: error: ...` naming the key or file and why, exit code 2, no
traceback, nothing written; failures never reported as success; no raw Python warning on stderr.

Every case runs the real CLI in a process forked from one that has imported gb (tests/forked_gb.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import forked_gb

pytestmark = pytest.mark.slow   # subprocesses of gb, end to end: `make test-fast` leaves the file out

BASE = {"name": "hf", "dataset": {"name": "digits", "train_size": 100, "val_size": 200},
        "model": {"kind": "gln", "hidden_units": 2}, "training": {"epochs": 2}, "svm": {"objectives": ["svm-gln"]}}


def gb(args, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "60", "PYTHONDONTWRITEBYTECODE": "1"}
    return forked_gb.run(args, cwd, env, timeout=timeout)


def refused(p: subprocess.CompletedProcess, *parts: str, code: int = 2) -> str:
    """The one-line refusal: exit `code`, no traceback, every part named in the line."""
    shown = f"gb {' '.join(p.args[1:])}\n--- exit {p.returncode}\n--- stderr\n{p.stderr}\n--- stdout\n{p.stdout}"
    assert "Traceback" not in p.stderr + p.stdout, shown
    assert p.returncode == code, shown
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("gb: error: "), shown
    for part in parts:
        assert part in err, f"{part!r} not in the message\n{shown}"
    return err


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (dotfiles included) and folder under root, with the files' bytes."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A trained, solved and compared run: base/run."""
    w = tmp_path_factory.mktemp("findings")
    (w / "cfg.yaml").write_text(yaml.safe_dump(BASE))
    for args in (["train-gd", "cfg.yaml", "-q", "--out", "run"], ["fit-svm", "cfg.yaml", "-q", "--out", "run"],
                 ["compare", "run"]):
        p = gb(args, w)
        assert p.returncode == 0, p.stderr
    return w / "run"


@pytest.fixture
def run(base, tmp_path) -> Path:
    """A copy of the base run in this test's own folder (tmp_path/run)."""
    shutil.copytree(base, tmp_path / "run", symlinks=True)
    return tmp_path / "run"


# ---- 1. `gb runs show` on a marker that is not gb's or a mixed directory: refused, as `gb runs` calls it foreign


def _sweep_marker(run: Path) -> None:
    (run / "gb-run.json").write_text('{"kind":"sweep"}')


def _stray_points(run: Path) -> None:
    (run / "points" / "abc").mkdir(parents=True)


def _linked_marker(run: Path) -> None:
    (run.parent / "elsewhere.json").write_bytes((run / "gb-run.json").read_bytes())
    (run / "gb-run.json").unlink()
    (run / "gb-run.json").symlink_to(run.parent / "elsewhere.json")


def _empty_marker(run: Path) -> None:
    (run / "gb-run.json").write_bytes(b"")


@pytest.mark.parametrize("damage, named", [(_sweep_marker, "gb-run.json"), (_stray_points, "points/"),
                                           (_linked_marker, "gb-run.json"), (_empty_marker, "gb-run.json")],
                         ids=["marker-says-sweep", "stray-points-folder", "marker-symlink", "marker-empty"])
def test_runs_show_refuses_what_gb_runs_lists_as_foreign(run, damage, named):
    damage(run)
    before = tree(run.parent)
    refused(gb(["runs", "show", "run"], run.parent), "run", named, "foreign")
    listed = gb(["runs", "--dir", ".", "-f", "json"], run.parent)
    assert listed.returncode == 0, listed.stderr
    assert [r["status"] for r in json.loads(listed.stdout)] == ["foreign"]
    assert tree(run.parent) == before


# ---- 2. `gb runs --dir` that names no directory


@pytest.mark.parametrize("given, why", [("nonexistent", "no such directory"), ("afile", "not a directory")])
def test_runs_dir_that_is_no_directory_is_bad_input(tmp_path, given, why):
    (tmp_path / "afile").write_text("not a folder\n")
    before = tree(tmp_path)
    refused(gb(["runs", "--dir", given], tmp_path), "--dir", given, why)
    assert tree(tmp_path) == before


# ---- 3. a config file with no YAML document


@pytest.mark.parametrize("command", ["train-gd", "fit-svm", "sweep"])
@pytest.mark.parametrize("text", [b"", b"# only a comment\n\n   \n"], ids=["zero-bytes", "comments-only"])
def test_an_empty_config_is_refused(tmp_path, command, text):
    (tmp_path / "cfg.yaml").write_bytes(text)
    before = tree(tmp_path)
    refused(gb([command, "cfg.yaml", "-q"], tmp_path), "cfg.yaml", "is empty")
    assert tree(tmp_path) == before


def test_an_explicit_empty_mapping_is_still_every_default(tmp_path):
    (tmp_path / "cfg.yaml").write_text("{}\n")
    p = gb(["config", "show", "cfg.yaml"], tmp_path)
    assert p.returncode == 0 and "name: cfg" in p.stdout, p.stderr


# ---- 4. `gb compare` when RUN/tables is a file


def test_compare_refuses_a_tables_file_before_writing(run):
    shutil.rmtree(run / "tables")
    (run / "tables").write_text("mine, not gb's\n")
    before = tree(run.parent)
    refused(gb(["compare", "run"], run.parent), "run/tables", "not a directory")
    assert tree(run.parent) == before


# ---- 5. a diverging learning rate: status diverged, exit 1, no raw torch warning


def test_divergence_reports_no_python_warning(tmp_path):
    # 1000 epochs: step 1 is not a logged step, so the loss check (not the log) finds the divergence
    cfg = {**BASE, "training": {"lr": 1.0e+30, "epochs": 1000}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    p = gb(["train-gd", "cfg.yaml", "-q", "--out", "run"], tmp_path)
    assert p.returncode == 1, p.stderr
    assert "diverged" in p.stderr and "Traceback" not in p.stderr
    noise = [line for line in p.stderr.splitlines() if line.strip() and not line.startswith("gb: ")]
    assert not noise, f"stderr holds more than gb's own lines: {noise}"
    assert json.loads((tmp_path / "run" / "gd" / "summary.json").read_text())["status"] == "diverged"


# ---- 6. NaN where a float must lie in an interval: "not finite", not "less than 1"


@pytest.mark.parametrize("section, key", [("svm", "certify_tol"), ("training", "momentum")])
@pytest.mark.parametrize("value", [".nan", ".inf"])
def test_a_non_finite_bounded_float_is_named_not_finite(tmp_path, section, key, value):
    text = yaml.safe_dump({k: v for k, v in BASE.items() if k != section}) + f"{section}: {{{key}: {value}}}\n"
    (tmp_path / "cfg.yaml").write_text(text)
    before = tree(tmp_path)
    err = refused(gb(["fit-svm", "cfg.yaml", "-q"], tmp_path), f"{section}.{key}", "finite")
    assert "less than" not in err
    assert tree(tmp_path) == before


@pytest.mark.parametrize("value", [".nan", ".inf"])
def test_a_non_finite_leaky_slope_is_named_not_finite(tmp_path, value):
    text = yaml.safe_dump({k: v for k, v in BASE.items() if k != "model"}) + \
        f"model: {{kind: leaky, hidden_units: 2, leaky_alpha: {value}}}\n"
    (tmp_path / "cfg.yaml").write_text(text)
    before = tree(tmp_path)
    err = refused(gb(["train-gd", "cfg.yaml", "-q"], tmp_path), "model.leaky_alpha", "finite")
    assert "less than" not in err
    assert tree(tmp_path) == before


# ---- 7. `gb plot` takes the run directory's lock, as `gb compare` does


def test_plot_refuses_while_another_process_writes_the_run(run):
    from gbcli.store.lock import run_lock

    shutil.rmtree(run / "figures", ignore_errors=True)
    with run_lock(run):   # this process holds it: the forked gb is another process
        before = tree(run.parent)
        refused(gb(["compare", "run"], run.parent), "another gb process")
        refused(gb(["plot", "run"], run.parent), "run", "another gb process")
        assert tree(run.parent) == before
        assert not (run / "figures").exists()
    p = gb(["plot", "run"], run.parent)   # the lock released: drawn
    assert p.returncode == 0 and (run / "figures" / "curves.png").is_file(), p.stderr


# ---- 8. the lock's message quotes the holder's pid, never the lock file's text


@pytest.mark.parametrize("content, shown", [(b"4242", "(pid 4242)"), (b"\x1b[31mrm -rf /\x1b[0m", "(pid unknown)"),
                                            (b"", "(pid not recorded)")])
def test_the_lock_message_never_echoes_the_lock_file(tmp_path, content, shown):
    import fcntl

    from gbcli.errors import GbError
    from gbcli.store.lock import run_lock

    run = tmp_path / "run"
    run.mkdir()
    (run / ".gb.lock").write_bytes(content)
    with open(run / ".gb.lock", "rb") as held:   # another holder (flock is per open file)
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(GbError) as err:
            with run_lock(run, kind=None):
                pass
    assert f"another gb process {shown} is writing" in str(err.value) and "\x1b" not in str(err.value)
