"""Issue 49, a researcher's first hour: the documented commands work as written.

- the Makefile reads ../shared/data when $GB_DATA_DIR is not set; without data the MNIST tests skip
  with the reason (they never read gb's default folder behind the fixture's back);
- the library API: every submodule reachable from `import gbcli` on first use, without torch at the
  import; `train_gd` and `fit_svm` on one thread unless told (`threads=`);
- the commands that only read (`gb --help`, `gb runs`, `gb compare RUN`, `gb runs show NAME`, a
  config error) import neither torch, MLflow nor pandas (their CPU time: benchmarks/startup.py);
- the bugs that the fast tests missed (item 13): a loss that turns non-finite mid-epoch is reported
  at its own step; each verdict rule of scripts/claims.py on both sides of its size and of 0.
"""

from __future__ import annotations

import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import gbcli
from gbcli.config.loading import validate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))  # scripts/: the lab code, outside the package
import claims  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = {"name": "tiny", "dataset": {"name": "digits", "train_size": 120, "val_size": 100, "data_seed": 1},
        "model": {"kind": "gln", "hidden_units": 3}, "contexts": {"count": 2, "seed": 1},
        "training": {"batch_size": 10, "epochs": 20, "log_points": 3}, "svm": {"objectives": ["svm-l2"]}}


def _python(code: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd or ROOT, env=env or dict(os.environ),
                          capture_output=True, text=True, timeout=300)


# ----------------------------------------------------------------------------- item 1: the data folder

def _make_data_dir(tmp_path: Path, shared: bool, env_value: str | None) -> str:
    """What `make data-dir` prints for a clone at tmp_path/repo (with tmp_path/shared/data or not)."""
    repo = tmp_path / "repo"
    repo.mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", repo / "Makefile")
    if shared:
        (tmp_path / "shared" / "data").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("GB_DATA_DIR", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    if env_value is not None:
        env["GB_DATA_DIR"] = env_value
    p = subprocess.run(["make", "-s", "data-dir"], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_the_makefile_exports_shared_data_when_there_and_gb_data_dir_is_not_set(tmp_path):
    assert _make_data_dir(tmp_path, shared=True, env_value=None) == str((tmp_path / "shared" / "data").resolve())


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_the_makefile_keeps_gb_data_dir_and_sets_nothing_without_shared_data(tmp_path):
    assert _make_data_dir(tmp_path / "a", shared=True, env_value="/somewhere/else") == "/somewhere/else"
    assert _make_data_dir(tmp_path / "b", shared=False, env_value=None) == ""


def test_without_data_the_mnist_tests_skip_with_the_reason(tmp_path):
    """tests/test_solve_resume.py read MNIST through gb's default folder (11 errors in a fresh clone):
    its fixtures now ask for `shared_data_dir`, which skips naming what to set."""
    empty = tmp_path / "no-data"
    empty.mkdir()
    env = {**os.environ, "GB_DATA_DIR": str(empty), "HOME": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "-rs",
                        "tests/test_solve_resume.py", "-k", "symlinked_checkpoint_is_not_followed or stop_reason"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 skipped" in p.stdout and "error" not in p.stdout.lower(), p.stdout
    assert f"GB_DATA_DIR={empty} holds no mnist/train-images-idx3-ubyte" in p.stdout, p.stdout


# ----------------------------------------------------------------------------- item 2: the library API

def test_import_gbcli_reaches_every_submodule_on_first_use_without_torch():
    code = ("import sys, gbcli\n"
            "assert 'torch' not in sys.modules, 'import gbcli imported torch'\n"
            "gbcli.runs.sweep.limit_threads(1)\n"
            "print(gbcli.runs.verify.verify.__module__, gbcli.fs.safe.__name__, gbcli.programs.solvers.SOLVERS['dual'].name)\n")
    p = _python(code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["gbcli.runs.verify", "gbcli.fs.safe", "dual"]


def test_every_module_of_the_package_is_an_attribute_path_from_gbcli():
    names = [m.name for m in pkgutil.walk_packages(gbcli.__path__, "gbcli.")]
    assert len(names) > 60 and "gbcli.runs.sweep" in names and "gbcli.models.networks.gln" in names
    for name in names:
        obj = gbcli
        for part in name.split(".")[1:]:
            obj = getattr(obj, part)
        assert obj.__name__ == name
    with pytest.raises(AttributeError, match="gbcli.runs' has no attribute 'sweeps'"):
        gbcli.runs.sweeps
    assert "sweep" in dir(gbcli.runs) and "runs" in dir(gbcli) and "train_gd" in dir(gbcli)


def test_the_solver_names_that_need_no_torch_are_the_registry():
    from gbcli.programs.solvers import NAMES, SOLVERS

    assert tuple(SOLVERS) == NAMES


def _threads_recorded(run: Path) -> tuple[int, set]:
    prov = json.loads((run / "gd" / "summary.json").read_text())["provenance"]
    return prov["torch_threads"], {b["num_threads"] for b in prov["blas"]}


@pytest.fixture()
def two_threads(monkeypatch):
    """The test process on 2 torch threads, no count chosen by `limit_threads`; restored after."""
    from gbcli.runs import threads

    import threadpoolctl

    monkeypatch.setattr(threads, "_chosen", None)
    before = torch.get_num_threads()
    blas = min((i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"), default=None)
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)
    if blas:
        threadpoolctl.threadpool_limits(limits=blas, user_api="blas")


def test_the_library_trains_on_one_thread_unless_told(tmp_path, two_threads):
    """`gbcli.train_gd` ran on every core (5.8-27.9 s against 1.1-1.3 s on one): now on 1 thread as
    `gb train-gd`, the caller's count restored after; `threads=2` trains on 2."""
    cfg = validate({**TINY, "training": {**TINY["training"], "lr": 0.05}}, "test")
    gbcli.train_gd(cfg, tmp_path / "one", progress=False)
    assert _threads_recorded(tmp_path / "one") == (1, {1})
    assert torch.get_num_threads() == 2   # the caller's setting, as it was
    gbcli.train_gd(cfg, tmp_path / "two", progress=False, threads=2)
    assert _threads_recorded(tmp_path / "two")[0] == 2
    results = gbcli.fit_svm(cfg, tmp_path / "one", progress=False)
    prov = json.loads((tmp_path / "one" / "svm" / "svm-l2" / "result.json").read_text())["provenance"]
    assert results[0]["status"] == "optimal" and prov["torch_threads"] == 1
    gbcli.runs.sweep.limit_threads(2)   # a count the process chose is the library's default then
    gbcli.train_gd(cfg, tmp_path / "chosen", progress=False)
    assert _threads_recorded(tmp_path / "chosen")[0] == 2


# ----------------------------------------------------------------------------- item 7: reading commands

PROBE = ("import atexit, sys\n"
         "atexit.register(lambda: print('[heavy: ' + ','.join(m for m in ('torch', 'mlflow', 'matplotlib', 'cvxpy', 'pandas')"
         " if m in sys.modules) + ']', file=sys.stderr))\n"
         "sys.argv = ['gb', *sys.argv[1:]]\n"
         "from gbcli.cli import main\n"
         "main()\n")


@pytest.fixture(scope="module")
def tour(tmp_path_factory) -> Path:
    """A folder with the tour's run, runs/tiny: trained and solved (digits, a second or two)."""
    root = tmp_path_factory.mktemp("tour")
    cfg = validate(TINY, "tiny")
    gbcli.train_gd(cfg, root / "runs" / "tiny", progress=False)
    gbcli.fit_svm(cfg, root / "runs" / "tiny", progress=False)
    (root / "typo.yaml").write_text(json.dumps({**TINY, "training": {"momentun": 0.9}}))
    return root


@pytest.mark.parametrize("args", [["--help"], ["runs"], ["compare", "runs/tiny"], ["runs", "show", "tiny"],
                                  ["train-gd", "typo.yaml"], ["fit-svm", "typo.yaml", "--solver", "dual"]],
                         ids=lambda a: " ".join(a))
def test_the_commands_that_read_import_neither_torch_nor_mlflow_nor_pandas(tour, args):
    p = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=tour, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COLUMNS": "160"})
    assert p.returncode == (2 if "typo.yaml" in args else 0), p.stderr
    assert "[heavy: ]" in p.stderr, p.stderr
    if "typo.yaml" in args:
        assert "training.momentun" in p.stderr
    elif args[0] == "compare":
        assert "svm-l2" in p.stdout and "gd-gln" in p.stdout
    elif args[:2] == ["runs", "show"]:
        assert "tiny" in p.stdout


def test_a_config_naming_an_unknown_solver_is_refused_without_torch(tmp_path):
    """svm.solver is checked against the registered names, which import no solver."""
    (tmp_path / "c.yaml").write_text(json.dumps({**TINY, "svm": {"objectives": ["svm-l2"], "solver": "cplex"}}))
    p = subprocess.run([sys.executable, "-c", PROBE, "fit-svm", "c.yaml"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 2 and "svm.solver: 'cplex' is not a solver" in p.stderr, p.stderr
    assert "[heavy: ]" in p.stderr, p.stderr


# ----------------------------------------------------------------------------- item 13: a NaN mid-epoch

def test_a_loss_that_turns_non_finite_mid_epoch_is_reported_diverged_at_its_step(tmp_path):
    """lr 1e10 overflows the loss within the first epoch (12 steps of 10), between two logged steps
    (0, 120, 240): training stops at that step, the weights of the step before (finite), and the run
    says so, its summary and last metrics row at that very step."""
    from gbcli.training.loop import Schedule

    cfg = validate({**TINY, "training": {**TINY["training"], "lr": 1e10}}, "test")
    s = gbcli.train_gd(cfg, tmp_path / "run", progress=False)
    sched = Schedule.of(cfg.training, 120)
    m = re.fullmatch(r"the training loss is (inf|nan) at step (\d+) \(epoch 0\)", s["message"])
    assert s["status"] == "diverged" and m, s["message"]
    step = int(m.group(2))
    assert s["steps"] == step and 0 < step < sched.per_epoch and step not in sched.log_at
    rows = pd.read_csv(tmp_path / "run" / "gd" / "metrics.csv")
    assert rows.step.iloc[-1] == step and np.isfinite(rows.train_loss.iloc[0])
    saved = torch.load(tmp_path / "run" / "gd" / "model.pt", weights_only=True)["state_dict"]
    assert saved and all(bool(torch.isfinite(w).all()) for w in saved.values())   # the overflowing step was not taken


# ----------------------------------------------------------------------------- item 13: the verdict rules

SIZE = 0.02


def _table(d: np.ndarray) -> pd.DataFrame:
    """Programs a and b at len(d) points, a - b = d (an errors table)."""
    n = len(d)
    pts = [f"p{i}" for i in range(n)]
    return pd.DataFrame({"predictor": ["a"] * n + ["b"] * n, "point": pts + pts,
                         "val_error": np.r_[0.2 + d, np.full(n, 0.2)]})


def _verdict(d: np.ndarray, rule: str = "d < 0", size: bool = True) -> tuple[str, claims.Condition]:
    """The claim `rule` on d = a - b at the same points (an equality: `paired_by`, whose d is the
    same difference, pivoted on the predictor column)."""
    cond = {"quantity": "paired", "label": "a - b", "rows": {"from": "t"}, "a": "a", "b": "b"}
    if rule == "d == 0":
        cond = {"quantity": "paired_by", "label": "a - b", "rows": {"from": "t"}, "across": "predictor",
                "a": "a", "b": "b", "keys": ["point"]}
    if size:
        cond["size"] = "large"
    spec = {"sizes": {"large": {"at_least": SIZE, "why": "test"}}, "subsets": {},
            "claims": [{"id": "x", "rule": rule, "conditions": [cond]}]}
    [r] = claims.evaluate(spec, {"t": _table(d)})
    return r["verdict"], r["conds"][0]


def _around(centre: float, spread: float = 1e-4, n: int = 40) -> np.ndarray:
    """n differences of mean `centre` and standard deviation `spread` (the interval of their mean is
    about centre +- 0.3 spread for n = 40)."""
    z = np.random.default_rng(7).normal(0, 1, n)
    return centre + spread * (z - z.mean()) / z.std()


@pytest.mark.parametrize("centre, verdict, state", [
    (-SIZE - 0.003, "reproduced", "shown"),                            # below -S: the size shown
    (-SIZE + 0.003, "direction reproduced, size not", "excluded"),     # between -S and 0
    (-0.003, "direction reproduced, size not", "excluded"),
    (+0.003, "contradicted", "excluded"),                              # above 0
    (+SIZE + 0.003, "contradicted", "excluded"),                       # above +S (a sign slip's side)
])
def test_a_sized_claim_on_each_side_of_its_size(centre, verdict, state):
    v, c = _verdict(_around(centre))
    assert (v, c.verdict) == (verdict, verdict)
    assert c.hi < -SIZE if state == "shown" else c.lo > -SIZE
    assert f"claimed d <= -{SIZE:.4f}, {state}" in c.text()


@pytest.mark.parametrize("centre, spread, verdict, state", [
    (-SIZE, 0.004, "direction reproduced, size not", "not decided"),   # holds -S, below 0
    (0.0, 0.004, "contradicted", "excluded"),      # holds 0, above -S: the direction not shown, the size excluded
    (-SIZE / 2, 0.04, "not decided", "not decided"),   # holds both -S and 0
])
def test_a_sized_claim_whose_interval_holds_a_boundary(centre, spread, verdict, state):
    v, c = _verdict(_around(centre, spread))
    assert c.lo < centre < c.hi and (c.lo < -SIZE < c.hi) == (state == "not decided")
    assert (v, c.verdict) == (verdict, verdict) and f"claimed d <= -{SIZE:.4f}, {state}" in c.text()


@pytest.mark.parametrize("centre, verdict", [(-0.003, "reproduced"), (+0.003, "contradicted"),
                                             (-SIZE - 0.003, "reproduced"), (+SIZE + 0.003, "contradicted")])
def test_an_unsized_claim_on_each_side_of_0(centre, verdict):
    v, c = _verdict(_around(centre), size=False)
    assert v == verdict and "claimed d <=" not in c.text()


def test_an_unsized_claim_whose_interval_holds_0_is_not_decided():
    v, c = _verdict(_around(0.0, spread=0.004), size=False)
    assert c.lo < 0 < c.hi and v == "not decided"


@pytest.mark.parametrize("d, verdict", [(np.zeros(30), "reproduced"), (_around(0.003), "contradicted"),
                                        (_around(-0.003), "contradicted"), (_around(0.0, spread=0.004), "not decided")])
def test_an_equality_claim_on_each_side_of_0(d, verdict):
    assert _verdict(d, rule="d == 0", size=False)[0] == verdict
