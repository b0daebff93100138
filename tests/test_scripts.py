"""scripts/adopt_solution.py and scripts/finish_stalled.py on received and hostile input: a certificate
is computed from the data, never taken from a file's status word; a foreign solution file, an
objective that is not a plain name of the configuration, a symlink in the run directory, a sweep
directory, a garbage configuration or a tolerance outside (0, 1) end with exit code 2, exactly one
line `gb: error: ...` on stderr, no traceback and nothing written.

One real run (`gb train-gd` and `gb fit-svm` on a tiny digits GLN, with svm.max_iters 7 so the
stored dual solve stalls as `inaccurate` at a relative gap of ~1e-4) is made once per module and
copied for each case. The cases call the scripts' `main` in this process (the torch import is
paid once); two cases run the scripts as the user does, in a subprocess, to see the real exit code,
stderr and the absence of a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))

import adopt_solution  # noqa: E402
import finish_stalled  # noqa: E402

GB = (sys.executable, "-c", "from gbcli.cli import main; main()")
OBJ = "svm-gln"
CONFIG = {"dataset": {"name": "digits", "train_size": 100, "val_size": 200},
          "model": {"kind": "gln", "hidden_units": 2}, "training": {"epochs": 2}, "svm": {"objectives": [OBJ], "max_iters": 7}}
TIMEOUT = 600   # a guard against a hang only: a loaded machine makes the torch import alone take a minute


def _env(data_dir: Path) -> dict:
    return {**os.environ, "GB_DATA_DIR": str(data_dir), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def base(tmp_path_factory, shared_data_dir) -> Path:
    """A finished run (BASE/run, its dual solve stalled) and answers solved outside it: good.npz (the
    certified optimum), as fullscale_solve.py --save-solution writes them."""
    os.environ.setdefault("GB_DATA_DIR", str(shared_data_dir))
    d = tmp_path_factory.mktemp("scripts")
    (d / "cfg.yaml").write_text(yaml.safe_dump(CONFIG))
    for command in ("train-gd", "fit-svm"):
        p = subprocess.run([*GB, command, "cfg.yaml", "-q", "--out", "run"], cwd=d, env=_env(shared_data_dir),
                           capture_output=True, text=True, timeout=TIMEOUT)
        assert p.returncode == 0 or (command == "fit-svm" and "not a certified result" in p.stderr), p.stderr
    stored = json.loads((d / "run" / "svm" / OBJ / "result.json").read_text())
    assert stored["status"] == "inaccurate" and stored["solver"] == "dual" and 1e-6 < stored["rel_gap"] < 1e-2

    from gbcli.config import load_config
    from gbcli.programs.solvers.dual import solve_dual
    from gbcli.runs.stages import build_design, prepare

    cfg = load_config(d / "run" / "gd" / "config.yaml")
    sol = solve_dual(build_design(OBJ, cfg, prepare(cfg)))
    assert sol.status == "optimal"
    save(d / "good.npz", sol)
    return d


def save(path: Path, sol, **over) -> Path:
    """An answer file as benchmarks/fullscale_solve.py --save-solution writes it (fields overridable)."""
    fields = {} if sol is None else {"zeta": np.zeros(0) if sol.zeta is None else sol.zeta, "lam": sol.lam,
                                     "status": sol.status, "message": sol.message, "seconds": sol.seconds,
                                     "iterations": sol.iterations}
    fields.update(over)
    np.savez(path, **fields)
    return path


def good(base: Path) -> dict:
    with np.load(base / "good.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture
def run(base, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(base / "run", out, symlinks=True)
    return out


def snapshot(*roots: Path) -> dict:
    """Every entry under the roots, without following links: its kind, contents (or target) and mtime."""
    out = {}
    for root in roots:
        if not os.path.lexists(root):
            out[str(root)] = None
            continue
        paths = [root] + ([Path(dp) / n for dp, dns, fns in os.walk(root) for n in dns + fns] if root.is_dir() else [])
        for p in paths:
            st = os.lstat(p)
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p))
            elif p.is_dir():
                out[str(p)] = ("dir",)
            else:
                out[str(p)] = ("file", p.read_bytes(), st.st_mtime_ns)
    return out


def call(capsys, script, *args) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of a script's main in this process."""
    capsys.readouterr()
    try:
        code = script.main([str(a) for a in args])
    except SystemExit as exc:   # argparse: --help, a wrong command line
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def refused(result, *expect: str) -> str:
    """Exit 2 and exactly one stderr line `gb: error: ...` containing each of `expect`; nothing on stdout."""
    code, out, err = result
    assert code == 2, (code, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gb: error: "), err
    assert "Traceback" not in err and out == "", (out, err)
    for e in expect:
        assert e in lines[0], lines[0]
    return lines[0]


def refused_unchanged(capsys, script, args, roots, *expect) -> str:
    before = snapshot(*roots)
    line = refused(call(capsys, script, *args), *expect)
    assert snapshot(*roots) == before
    return line


# ------------------------------------------------------------------ as the user runs them


@pytest.mark.slow
def test_in_a_subprocess_a_forged_ray_and_a_foreign_file_end_in_one_line(base, run, tmp_path, shared_data_dir):
    """A file saying `infeasible` that holds a feasible solution (recorded before as `infeasible,
    certified: true`) is refused, and finish_stalled on a foreign solution.npz, as a user sees them."""
    forged = save(tmp_path / "forged.npz", None, **{**good(base), "status": "infeasible"})
    (run / "svm" / OBJ / "solution.npz").write_text("not an npz\n")
    before = snapshot(run)
    env = _env(shared_data_dir)
    procs = [subprocess.Popen([sys.executable, str(SCRIPTS / "adopt_solution.py"), str(run), OBJ, str(forged)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
             subprocess.Popen([sys.executable, str(SCRIPTS / "finish_stalled.py"), str(run), OBJ],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    (a_out, a_err), (f_out, f_err) = (p.communicate(timeout=TIMEOUT) for p in procs)
    refused((procs[0].returncode, a_out, a_err), "forged.npz: says infeasible, but its multipliers do not certify "
                                                 "infeasibility (relative margin bound")
    refused((procs[1].returncode, f_out, f_err),
            "solution.npz: cannot read the stored solve: not an .npz archive of arrays (not a zip archive)")
    assert snapshot(run) == before


# ------------------------------------------------------------------ adopt_solution.py


def test_a_genuine_answer_is_adopted_certified_logged_and_cached(base, run, tmp_path, capsys):
    code, out, err = call(capsys, adopt_solution, run, OBJ, base / "good.npz", "--cache", tmp_path / "solves",
                          "--note", "a test\nwith two lines")
    assert code == 0, (out, err)
    r = json.loads((run / "svm" / OBJ / "result.json").read_text())
    assert r["status"] == "optimal" and r["certified"] and r["rel_gap"] <= 1e-6 and r["min_margin"] >= 1 - 1e-6
    assert "adopted by scripts/adopt_solution.py from good.npz (a test with two lines)" in r["message"]
    assert r["objective"] == pytest.approx(r["primal_objective"], rel=1e-12)
    log = (run / "log.txt").read_text().splitlines()
    assert log[-1].startswith("--- ") and "adopted" in log[-1] and log[-1].endswith("optimal, certified True")
    assert len(list((tmp_path / "solves").glob("*.npz"))) == 1


@pytest.mark.parametrize("zeta_empty", [False, True], ids=["feasible-solution", "its-multipliers-as-a-ray"])
def test_a_file_that_says_infeasible_is_certified_from_its_multipliers(base, run, tmp_path, capsys, zeta_empty):
    """The status word is a claim: the multipliers of a feasible program bound no predictor's relative
    margin below NOT_SEPARABLE, so `infeasible` is refused, with or without the predictor."""
    fields = {**good(base), "status": "infeasible"}
    if zeta_empty:
        fields["zeta"] = np.zeros(0)
    forged = save(tmp_path / "forged.npz", None, **fields)
    line = refused_unchanged(capsys, adopt_solution, (run, OBJ, forged, "--cache", tmp_path / "solves"),
                             (run, tmp_path / "solves"), "says infeasible, but its multipliers do not certify")
    bound = float(line.split("relative margin bound ")[1].split(",")[0])
    assert bound > 1e-3   # digits at H = 2 is separable with a comfortable margin


def test_zero_multipliers_are_no_ray(base, run, tmp_path, capsys):
    """lam = 0 bounds nothing (the trivial bound): a file calling it a ray is refused."""
    fields = {**good(base), "zeta": np.zeros(0), "status": "infeasible"}
    fields["lam"] = np.zeros_like(fields["lam"])
    forged = save(tmp_path / "zero.npz", None, **fields)
    refused_unchanged(capsys, adopt_solution, (run, OBJ, forged), (run,), "do not certify infeasibility",
                      "relative margin bound inf")


def test_an_answer_that_does_not_certify_is_recorded_as_computed(base, run, tmp_path, capsys):
    """A file saying `optimal` whose margins are 0.5 is recorded `inaccurate`, uncertified, exit 1; a
    certified answer saying `inaccurate` is recorded `optimal`: the word is always the certificate's."""
    g = good(base)
    half = save(tmp_path / "half.npz", None, **{**g, "zeta": g["zeta"] / 2})
    code, out, err = call(capsys, adopt_solution, run, OBJ, half)
    r = json.loads((run / "svm" / OBJ / "result.json").read_text())
    assert code == 1 and r["status"] == "inaccurate" and not r["certified"] and "not certified" in r["message"]
    low = save(tmp_path / "low.npz", None, **{**g, "status": "inaccurate"})
    code, out, err = call(capsys, adopt_solution, run, OBJ, low)
    r = json.loads((run / "svm" / OBJ / "result.json").read_text())
    assert code == 0 and r["status"] == "optimal" and r["certified"]


def _npz_bytes(**arrays) -> bytes:
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _foreign_answers(g: dict) -> dict:
    return {
        "empty file": b"",
        "text file": b"zeta lam status\n1 2 3\n",
        "single array (.npy)": None,
        "no arrays it expects": _npz_bytes(a=np.ones(3)),
        "object array": _npz_bytes(**{**g, "zeta": np.array([None, 1], dtype=object)}),
        "wrong shape": _npz_bytes(**{**g, "zeta": g["zeta"][:, :-1]}),
        "lam of another program": _npz_bytes(**{**g, "lam": g["lam"][:-1]}),
        "non-finite": _npz_bytes(**{**g, "zeta": np.full_like(g["zeta"], np.nan)}),
        "complex": _npz_bytes(**{**g, "zeta": g["zeta"] + 1j}),
        "negative multipliers": _npz_bytes(**{**g, "lam": -g["lam"]}),
        "unknown status word": _npz_bytes(**{**g, "status": "certified"}),
        "status not a text": _npz_bytes(**{**g, "status": np.float64(1.0)}),
        "non-finite seconds": _npz_bytes(**{**g, "seconds": np.inf}),
        "optimal without a predictor": _npz_bytes(**{**g, "zeta": np.zeros(0)}),
    }


@pytest.mark.parametrize("case", list(_foreign_answers({"zeta": np.ones((2, 2)), "lam": np.ones(2)})))
def test_a_foreign_answer_file_is_refused(base, run, tmp_path, capsys, case):
    g = good(base)
    path = tmp_path / "answer.npz"
    data = _foreign_answers(g)[case]
    if data is None:
        np.save(tmp_path / "answer.npy", g["zeta"])
        path = tmp_path / "answer.npy"
    else:
        path.write_bytes(data)
    refused_unchanged(capsys, adopt_solution, (run, OBJ, path, "--cache", tmp_path / "solves"),
                      (run, tmp_path / "solves"), path.name)


# ------------------------------------------------------------------ finish_stalled.py


def test_finish_stalled_certifies_the_stalled_answer(run, tmp_path, capsys):
    code, out, err = call(capsys, finish_stalled, run, OBJ, "--cache", tmp_path / "solves")
    assert code == 0, (out, err)
    r = json.loads((run / "svm" / OBJ / "result.json").read_text())
    assert r["status"] == "optimal" and r["certified"] and r["rel_gap"] <= 1e-9 and r["min_margin"] >= 1 - 1e-9
    assert r["message"].startswith("finished by scripts/finish_stalled.py")
    assert "finished by" in (run / "log.txt").read_text().splitlines()[-1]
    assert len(list((tmp_path / "solves").glob("*.npz"))) == 1
    refused_unchanged(capsys, finish_stalled, (run, OBJ), (run,), "only a stalled dual solve")   # certified now


def _foreign_solutions(zeta: np.ndarray, lam: np.ndarray) -> dict:
    return {
        "empty file": b"",
        "text file": b"not an npz\n",
        "no arrays it expects": _npz_bytes(a=np.ones(3)),
        "object arrays": _npz_bytes(zeta=np.array([[None]], dtype=object), lam=lam),
        "wrong shapes": _npz_bytes(zeta=zeta.T, lam=lam),
        "lam of another program": _npz_bytes(zeta=zeta, lam=np.concatenate([lam, lam])),
        "lam as a matrix": _npz_bytes(zeta=zeta, lam=lam[None, :]),
        "non-finite": _npz_bytes(zeta=zeta, lam=np.where(lam > 0, np.inf, 0)),
        "strings": _npz_bytes(zeta=np.array([["a"]]), lam=lam),
        "no positive multiplier": _npz_bytes(zeta=zeta, lam=np.zeros_like(lam)),
        "negative multipliers": _npz_bytes(zeta=zeta, lam=-lam),
    }


@pytest.mark.parametrize("case", list(_foreign_solutions(np.ones((2, 2)), np.ones(2))))
def test_finish_stalled_refuses_a_foreign_solution_file(run, capsys, case):
    npz = run / "svm" / OBJ / "solution.npz"
    with np.load(npz) as z:
        zeta, lam = z["zeta"], z["lam"]
    npz.write_bytes(_foreign_solutions(zeta, lam)[case])
    refused_unchanged(capsys, finish_stalled, (run, OBJ), (run,), "solution.npz")


@pytest.mark.parametrize("record", [b"", b"[1, 2]", json.dumps({"status": "inaccurate", "solver": "dual"}).encode(),
                                    None], ids=["empty", "a list", "no message", "iterations a float"])
def test_finish_stalled_refuses_a_foreign_result_record(run, capsys, record):
    path = run / "svm" / OBJ / "result.json"
    if record is None:
        record = json.dumps({**json.loads(path.read_text()), "iterations": 7.5}).encode()
    path.write_bytes(record)
    refused_unchanged(capsys, finish_stalled, (run, OBJ), (run,), "result.json")


@pytest.mark.parametrize("script", [finish_stalled, adopt_solution], ids=["finish", "adopt"])
@pytest.mark.parametrize("obj,expect", [("../x", "not an objective name"), ("..", "not an objective name"),
                                        ("svm/../svm-gln", "not an objective name"), ("", "not an objective name"),
                                        ("/etc", "not an objective name"), ("svm-l2", "not an objective of")])
def test_an_objective_must_be_a_plain_name_of_the_configuration(base, run, capsys, script, obj, expect):
    args = (run, obj) if script is finish_stalled else (run, obj, base / "good.npz")
    refused_unchanged(capsys, script, args, (run, run.parent), expect)


@pytest.mark.parametrize("script", [finish_stalled, adopt_solution], ids=["finish", "adopt"])
def test_a_symlinked_log_is_not_appended_to(base, run, tmp_path, capsys, script):
    outside = tmp_path / "outside.txt"
    outside.write_text("not gb's\n")
    (run / "log.txt").unlink()
    (run / "log.txt").symlink_to(outside)
    args = (run, OBJ) if script is finish_stalled else (run, OBJ, base / "good.npz")
    refused_unchanged(capsys, script, args, (run, outside), "log.txt", "symlink")
    assert outside.read_text() == "not gb's\n"


@pytest.mark.parametrize("script", [finish_stalled, adopt_solution], ids=["finish", "adopt"])
def test_a_log_that_is_not_a_regular_file_is_refused(base, run, capsys, script):
    (run / "log.txt").unlink()
    (run / "log.txt").mkdir()
    args = (run, OBJ) if script is finish_stalled else (run, OBJ, base / "good.npz")
    refused_unchanged(capsys, script, args, (run,), "log.txt: not a regular file")


def test_the_log_is_appended_to_without_following_a_link(tmp_path):
    """What the writer does if a link appears after the checks: O_NOFOLLOW refuses it."""
    outside = tmp_path / "outside.txt"
    outside.write_text("x\n")
    (tmp_path / "log.txt").symlink_to(outside)
    with pytest.raises(finish_stalled.Refused, match="is a symlink"):
        finish_stalled.append_log(tmp_path / "log.txt", "--- a line")
    assert outside.read_text() == "x\n"
    finish_stalled.append_log(tmp_path / "new.txt", "--- one\nline")
    finish_stalled.append_log(tmp_path / "new.txt", "--- two")
    assert (tmp_path / "new.txt").read_text() == "--- one line\n--- two\n"


@pytest.mark.parametrize("link", ["svm", f"svm/{OBJ}", f"svm/{OBJ}/result.json", f"svm/{OBJ}/solution.npz"])
def test_a_symlink_on_the_way_to_the_record_is_refused(run, tmp_path, capsys, link):
    """svm/, svm/OBJ or a file in it linked elsewhere (a copy of the real one): gb never writes through it."""
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(run / link), str(elsewhere))
    (run / link).symlink_to(elsewhere, target_is_directory=elsewhere.is_dir())
    refused_unchanged(capsys, finish_stalled, (run, OBJ), (run, elsewhere), "symlink")
    code, out, err = call(capsys, adopt_solution, run, OBJ, tmp_path / "missing.npz")
    refused((code, out, err), "symlink")


@pytest.mark.parametrize("script", [finish_stalled, adopt_solution], ids=["finish", "adopt"])
def test_a_sweep_directory_or_not_a_run_is_refused(base, run, tmp_path, capsys, script):
    sweep = tmp_path / "sweep"
    (sweep / "points").mkdir(parents=True)
    shutil.copytree(run, sweep / "points" / "p0")
    for where, expect in ((sweep, "is a sweep directory"), (tmp_path / "nothing", "not a directory"),
                          (run / "gd", "not a run directory")):
        args = (where, OBJ) if script is finish_stalled else (where, OBJ, base / "good.npz")
        refused_unchanged(capsys, script, args, (sweep, run, tmp_path / "nothing"), expect)


CONFIGS = {
    "missing": None,
    "empty": b"",
    "binary": b"\x00\xff\xfe garbage",
    "a list": b"- 1\n- 2\n",
    "not YAML": b"svm: [\n",
    "an unknown key": b"dataset: {name: digits}\nmodel: {kind: gln}\nbogus: 1\n",
}


@pytest.mark.parametrize("script", [finish_stalled, adopt_solution], ids=["finish", "adopt"])
@pytest.mark.parametrize("case", list(CONFIGS))
def test_a_missing_or_garbage_configuration_is_refused(base, run, capsys, script, case):
    path = run / "gd" / "config.yaml"
    if CONFIGS[case] is None:
        path.unlink()
    else:
        path.write_bytes(CONFIGS[case])
    args = (run, OBJ) if script is finish_stalled else (run, OBJ, base / "good.npz")
    refused_unchanged(capsys, script, args, (run,), "config.yaml")


@pytest.mark.parametrize("script", [finish_stalled, adopt_solution], ids=["finish", "adopt"])
@pytest.mark.parametrize("tol", [".inf", ".nan", "0", "1", "1.5", "-1.0e-6", "true", "'1e-6x'"])
def test_a_certify_tol_outside_0_1_is_refused(base, run, capsys, script, tol):
    path = run / "gd" / "config.yaml"
    text = path.read_text()
    assert "certify_tol: 1.0e-06" in text
    path.write_text(text.replace("certify_tol: 1.0e-06", f"certify_tol: {tol}"))
    args = (run, OBJ) if script is finish_stalled else (run, OBJ, base / "good.npz")
    refused_unchanged(capsys, script, args, (run,), "certify_tol")


def test_the_tolerance_check_itself():
    for ok in (1e-6, 0.5, np.float64(1e-9), 1e-300):
        assert finish_stalled.tolerance("t", ok) == float(ok)
    for bad in (0, 1, 1.0, -1e-6, float("inf"), float("nan"), True, np.bool_(True), "1e-6", None):
        with pytest.raises(finish_stalled.Refused, match="must be a finite number in"):
            finish_stalled.tolerance("t", bad)


@pytest.mark.parametrize("script", [finish_stalled, adopt_solution], ids=["finish", "adopt"])
@pytest.mark.parametrize("argv", [(), ("a",), ("a", "b", "c", "d"), ("--bogus",)])
def test_a_wrong_command_line_is_one_line(script, argv, capsys, tmp_path):
    if script is adopt_solution and len(argv) == 4:
        argv = ("a", "b", "c", "d", "e")
    refused_unchanged(capsys, script, argv, (tmp_path,), "gb: error: ")
