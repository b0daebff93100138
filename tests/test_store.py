"""The store (gbcli.store), the one owner of run and sweep directories, targeted directly: its safe
file layer on hostile files, its records' one status, its lock, and the folders it does not own."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gbcli.errors import GbError
from gbcli.fs import layout
from gbcli.fs.layout import RunDir, SweepDir
from gbcli.store.lock import dir_kind, run_lock
from gbcli.store.records import gd_status, program_status
from gbcli.fs.safe import (check_tree, is_dir, is_file, open_append, present, read_record,
                              remove, subdirs)

import forked_gb


# ------------------------------------------------------------------ the safe file layer


def test_a_link_anywhere_gb_owns_is_refused_but_not_in_a_foreign_folder(tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "points" / "p1" / "gd").mkdir(parents=True)
    (sweep / layout.SLURM / "123").mkdir(parents=True)
    (tmp_path / "script.sh").write_text("#!/bin/sh\n")
    # submitit keeps a link to its job script in OUT/slurm/: not gb's, left alone
    (sweep / layout.SLURM / ".submission_file_abc.sh").symlink_to(tmp_path / "script.sh")
    check_tree(sweep)
    with run_lock(sweep, name=layout.SWEEP_LOCK, kind="sweep"):
        pass
    # the same link in a folder gb owns is refused, naming it
    (sweep / "points" / "p1" / "gd" / "metrics.csv").symlink_to(tmp_path / "script.sh")
    with pytest.raises(GbError, match=r"metrics\.csv: is a symlink"):
        check_tree(sweep)
    # a slurm/ folder below the top is no foreign folder
    (sweep / "points" / "p1" / "gd" / "metrics.csv").unlink()
    (sweep / "points" / "p1" / layout.SLURM).mkdir()
    (sweep / "points" / "p1" / layout.SLURM / "x").symlink_to(tmp_path / "script.sh")
    with pytest.raises(GbError, match="is a symlink"):
        check_tree(sweep)


def test_a_fifo_in_a_run_directory_is_refused_and_never_read(tmp_path):
    run = tmp_path / "run"
    (run / "gd").mkdir(parents=True)
    os.mkfifo(run / "gd" / "summary.json")
    with pytest.raises(GbError, match="not a regular file or folder"):
        check_tree(run)
    assert read_record(run / "gd" / "summary.json") is None   # never blocks on the FIFO


def test_a_deep_tree_is_walked_without_recursion_and_bounded(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    deep = str(d)
    for _ in range(1500):   # deeper than Python's recursion limit (made one level at a time)
        deep += "/d"
        os.mkdir(deep)
    deep = Path(deep)
    (deep / "f").write_text("x")
    try:
        with pytest.raises(GbError, match="folders more than 64 deep"):   # one line, not a RecursionError
            check_tree(d)
        shallow = d / Path(*["d"] * 60)   # within the bound: walked to the bottom
        (shallow / "link").symlink_to(tmp_path)
        with pytest.raises(GbError, match="is a symlink"):
            check_tree(shallow.parents[59])
        (shallow / "link").unlink()
    finally:   # bottom up, one level at a time: pytest's own cleanup (shutil.rmtree) recurses per level
        (deep / "f").unlink()
        while deep != d:
            deep.rmdir()
            deep = deep.parent


@pytest.mark.parametrize("content, why", [
    (b"not json", "garbage"), (b"[1, 2]", "a list"), (b"\xff\xfe", "not UTF-8"),
    (b"[" * 200_000 + b"]" * 200_000, "nested 200,000 deep"), (b'{"status": "ok"', "truncated"),
])
def test_a_hostile_record_reads_as_none(tmp_path, content, why):
    path = tmp_path / "summary.json"
    path.write_bytes(content)
    assert read_record(path) is None, why


def test_a_record_through_a_link_or_too_large_reads_as_none(tmp_path):
    real = tmp_path / "real.json"
    real.write_text(json.dumps({"status": "ok"}))
    assert read_record(real) == {"status": "ok"}
    (tmp_path / "link.json").symlink_to(real)
    assert read_record(tmp_path / "link.json") is None
    assert read_record(real, limit=5) is None


def test_received_yaml_never_expands_an_alias(tmp_path):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n" \
           "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    (tmp_path / "config.yaml").write_text(bomb)
    from gbcli.config import read_stored_config

    assert read_stored_config(tmp_path / "config.yaml") is None
    (tmp_path / "ok.yaml").write_text("model: {kind: gln}\n")
    assert read_stored_config(tmp_path / "ok.yaml") == {"model": {"kind": "gln"}}


def test_appends_and_removals_never_follow_a_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (tmp_path / "log.txt").symlink_to(victim)
    with pytest.raises(OSError) as exc:
        open_append(tmp_path / "log.txt")
    assert exc.value.errno == errno.ELOOP and victim.read_text() == "keep me\n"
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "data").write_text("precious")
    (tmp_path / "svm").symlink_to(folder)
    remove(tmp_path / "svm")                 # the link goes, never what it points to
    assert not present(tmp_path / "svm") and (folder / "data").read_text() == "precious"
    remove(tmp_path / "log.txt")
    assert victim.read_text() == "keep me\n"


def test_the_predicates_do_not_follow_links(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    (tmp_path / "ld").symlink_to(tmp_path / "d")
    (tmp_path / "lf").symlink_to(tmp_path / "f")
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    assert is_dir(tmp_path / "d") and not is_dir(tmp_path / "ld")
    assert is_file(tmp_path / "f") and not is_file(tmp_path / "lf")
    assert present(tmp_path / "dangling") and not (tmp_path / "dangling").exists()
    assert [p.name for p in subdirs(tmp_path)] == ["d"]


# ------------------------------------------------------------------ the lock


def test_a_linked_lock_is_refused_untouched(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    target = tmp_path / "target"
    target.write_text("not a lock\n")
    (run / layout.LOCK).symlink_to(target)
    with pytest.raises(GbError, match="symlink"):
        with run_lock(run):
            pass
    assert target.read_text() == "not a lock\n"


def test_the_lock_refuses_a_second_process_and_is_reentrant(tmp_path):
    run = tmp_path / "run"
    with run_lock(run):
        with run_lock(run):   # the same process: re-entrant
            pass
        code = ("import sys; from gbcli.store.lock import run_lock\n"
                "try:\n    run_lock(sys.argv[1]).__enter__()\nexcept Exception as e:\n    print(e); sys.exit(3)\n")
        proc = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 3 and "another gb process" in proc.stdout, proc.stdout + proc.stderr
    assert dir_kind(run) == "run"


def test_a_refusal_in_a_new_directory_leaves_nothing(tmp_path):
    out = tmp_path / "new" / "run"
    with pytest.raises(GbError):
        with run_lock(out):
            raise GbError("refused")
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------------------ one status for one record


CERT = {"certified": True, "rel_gap": 1e-9, "min_margin": 1.0, "tolerance": 1e-6, "objective": 4.7}


@pytest.mark.parametrize("record, status", [
    ({"status": "optimal", **CERT}, "optimal"),
    ({"status": "optimal", **CERT, "certified": False}, "inaccurate"),         # the word without its certificate
    ({"status": "optimal", **CERT, "rel_gap": 0.4}, "unverified"),             # a certificate its numbers deny
    ({"status": "optimal", **CERT, "min_margin": 0.5}, "unverified"),
    ({"status": "optimal", **CERT, "rel_gap": float("nan")}, "unverified"),
    ({"status": "optimal", **CERT, "objective": float("nan")}, "unverified"),   # an optimum is a finite norm
    ({"status": "optimal", **CERT, "objective": -1e308}, "unverified"),
    ({"status": "optimal", **CERT, "objective": 10 ** 400}, "unverified"),
    ({"status": "infeasible", "certified": True}, "infeasible"),
    ({"status": "infeasible", "certified": False}, "uncertified"),
    ({"status": "failed", "certified": True}, "unverified"),
    ({"status": "solved!", "certified": True}, "foreign"),
    ({"status": "optimal", "certified": True, "convex": False, "rel_gap": float("nan")}, "optimal"),   # non-convex
    (None, "foreign"),
])
def test_a_programs_status_is_what_its_numbers_bear(record, status):
    assert program_status(record) == status


@pytest.mark.parametrize("record, status", [
    ({"status": "ok", "train_loss": 0.1}, "ok"), ({"status": "ok", "train_loss": float("nan")}, "diverged"),
    ({"status": "ok"}, "diverged"), ({"status": "diverged", "train_loss": 1e30}, "diverged"),
    ({"status": "great"}, "foreign"), (None, "foreign"),
])
def test_a_trainings_status_is_what_its_numbers_bear(record, status):
    assert gd_status(record) == status


def test_the_layout_names_every_record_once():
    names = [getattr(layout, n) for n in dir(layout) if n.isupper() and isinstance(getattr(layout, n), str)]
    assert len(names) == len(set(names)), sorted(names)
    run, sweep = RunDir("r"), SweepDir("s")
    assert run.result("svm-gln") == Path("r/svm/svm-gln/result.json")
    assert run.summary == Path("r/gd/summary.json") and run.errors == Path("r/tables/errors.csv")
    assert sweep.point("abc").summary == Path("s/points/abc/gd/summary.json")


# ------------------------------------------------------------------ the write rule


def _gb(*args, cwd):
    return forked_gb.run(args, cwd, timeout=300, argv0=forked_gb.CLI)


@pytest.mark.parametrize("command", ["train-gd", "fit-svm"])
@pytest.mark.parametrize("where", ["proj", "."])
def test_a_folder_gb_did_not_make_is_never_written_or_cleaned(tmp_path, command, where):
    """`--out proj` holding the user's own figures/ and tables/ (no gb marker), or `--out .`: refused
    in one line, exit 2, every file of the user's untouched."""
    root = Path(__file__).resolve().parents[1]
    proj = tmp_path / "proj"
    for sub in ("figures", "tables"):
        (proj / sub).mkdir(parents=True)
        (proj / sub / "mine.txt").write_text("the user's\n")
    cwd = proj if where == "." else tmp_path
    before = sorted(p.relative_to(proj) for p in proj.rglob("*"))
    p = _gb(command, root / "configs" / "quickstart.yaml", "--out", where, cwd=cwd)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stdout + p.stderr
    assert "not a folder gb made" in p.stderr and "Traceback" not in p.stderr
    assert sorted(p.relative_to(proj) for p in proj.rglob("*")) == before
    assert all((proj / sub / "mine.txt").read_text() == "the user's\n" for sub in ("figures", "tables"))


def test_an_empty_folder_or_one_gb_made_is_written(tmp_path):
    from gbcli.store.lock import check_run_target

    (tmp_path / "empty").mkdir()
    check_run_target(tmp_path / "empty", "")   # empty: fine
    check_run_target(tmp_path / "absent", "")  # not there yet: fine
    with run_lock(tmp_path / "made"):
        pass
    (tmp_path / "made" / "notes.txt").write_text("x")
    check_run_target(tmp_path / "made", "")    # gb's marker: its folder
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("x")
    with pytest.raises(GbError, match="not a folder gb made"):
        check_run_target(tmp_path / "other", "")


def test_staged_writes_land_together_or_not_at_all(tmp_path):
    """The writes of a `staged_writes` block land in order when it ends, under its landing context;
    an exception (a report failing on a received record) writes none of them; reads and existence
    checks inside see the held files; a folder where one of the files goes is refused before the
    first lands."""
    import contextlib

    from gbcli.fs.safe import atomic_write_text, is_file, read_text_untrusted, staged_writes

    landed = []

    @contextlib.contextmanager
    def landing():
        landed.append(sorted(p.name for p in tmp_path.iterdir()))
        yield

    with staged_writes(landing):
        atomic_write_text(tmp_path / "a.txt", "one")
        assert not (tmp_path / "a.txt").exists() and is_file(tmp_path / "a.txt")
        assert read_text_untrusted(tmp_path / "a.txt") == "one"
        atomic_write_text(tmp_path / "sub" / "b.txt", "two")
    assert landed == [[]] and (tmp_path / "sub" / "b.txt").read_text() == "two"
    with pytest.raises(RuntimeError):
        with staged_writes():
            atomic_write_text(tmp_path / "a.txt", "changed")
            atomic_write_text(tmp_path / "c.txt", "new")
            raise RuntimeError("a damaged record")
    assert (tmp_path / "a.txt").read_text() == "one" and not (tmp_path / "c.txt").exists()
    (tmp_path / "d.txt").mkdir()
    with pytest.raises(GbError, match="d.txt: a folder where gb writes"):
        with staged_writes():
            atomic_write_text(tmp_path / "e.txt", "first")
            atomic_write_text(tmp_path / "d.txt", "second")
    assert not (tmp_path / "e.txt").exists()


def test_the_one_reader_of_gbs_yaml_refuses_aliases_and_depth_before_building(tmp_path):
    """fs.safe.load_yaml, what every reader of a run's or sweep's YAML goes through (the refusal of
    train-gd, compare, the reports, gb runs): an alias bomb of nested mappings is refused at once,
    not built and walked (issue 49, item 11); so is nesting deeper than MAX_YAML_DEPTH. What gb
    writes (dump_yaml) reads back, an object met twice included."""
    import yaml

    from gbcli.config import read_stored_config   # the one reader of a stage's stored config
    from gbcli.fs.safe import MAX_YAML_DEPTH, dump_yaml, load_yaml

    levels = ["l0: &l0 {a: 1, b: 1, c: 1, d: 1, e: 1, f: 1, g: 1, h: 1, i: 1}"]
    for i in range(1, 12):   # 9 ** 12 leaves
        levels.append(f"l{i}: &l{i} {{" + ", ".join(f"{k}: *l{i - 1}" for k in "abcdefghi") + "}")
    bomb = "\n".join(levels) + "\nmodel: {kind: gln, extra: *l11}\n"
    with pytest.raises(yaml.YAMLError, match="aliases are not read"):
        load_yaml(bomb)
    (tmp_path / "config.yaml").write_text(bomb)
    assert read_stored_config(tmp_path / "config.yaml") is None
    with pytest.raises(yaml.YAMLError, match="anchors|aliases"):   # one alias is one too many
        load_yaml("a: &x {k: 1}\nb: *x\n")
    assert load_yaml("a: &x {k: 1}\n") == {"a": {"k": 1}}   # an anchor alone expands nothing
    def nested(n: int) -> str:   # n mappings around a scalar: n + 1 levels
        return "{a: " * n + "1" + "}" * n + "\n"

    with pytest.raises(yaml.YAMLError, match="nested more than"):
        load_yaml(nested(MAX_YAML_DEPTH))
    assert load_yaml(nested(MAX_YAML_DEPTH - 1))   # the limit itself is read
    shared = [1, 2]
    text = dump_yaml({"x": shared, "y": shared, "z": {"w": shared}})
    assert "&" not in text and "*" not in text
    assert load_yaml(text) == {"x": [1, 2], "y": [1, 2], "z": {"w": [1, 2]}}
    assert load_yaml("") is None and load_yaml("model: {kind: gln}\n") == {"model": {"kind": "gln"}}
