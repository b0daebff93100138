"""Hostile input: non-finite numbers, loose types, out-of-range seeds, unbounded sizes, YAML
hazards, escaping paths, corrupt run files; the status words of failed work (diverged,
inaccurate); and what a run directory must survive: reruns, kill -9, two writers, a full disk,
the umask.

Bad input ends with exit code 2, exactly one stderr line `gb: error: ...` naming the config key
(dotted) or the file and why, no traceback, and nothing written (the working directory tree,
with contents and mtimes, is unchanged; `runs/` does not appear).

Every case runs the real CLI in a subprocess (`python -c "from gbcli.cli import main; main()"`)
in its own working directory. A subprocess pays the torch import (~3 s), so the module fixture
`launched` starts every selected case and flow at once on a thread pool; each test then checks
its own outcome. The corrupt-run cases copy a real finished run (made once by `train-gd`,
`fit-svm` and `compare` on a tiny digits config) and break one file.
"""

from __future__ import annotations

import copy
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Union

import numpy as np
import pytest
import yaml

GB = (sys.executable, "-c", "from gbcli.cli import main; main()")
# Bad input must be refused before any allocation or training. What enforces "before allocating" is
# an address-space limit on every bad-input case (an allocation the estimate missed fails at once
# with a traceback), not a clock: the timeout only guards against a hang, and is generous because
# a loaded machine (7 agents on 2 cores) makes the torch import alone take a minute.
TIMEOUT = 600
CASE_MEMORY = 4 * 1024 ** 3   # bytes of address space for a bad-input case (torch imports in ~1 GB)
INF, NAN = float("inf"), float("nan")
BASE = {"dataset": {"name": "digits", "train_size": 100, "val_size": 200}, "training": {"epochs": 2}}
GLN = {"kind": "gln", "hidden_units": 2}
RELU = {"kind": "relu", "hidden_units": 2}
POINTS = {"name": "points", "x": [[1.0, 2.0]], "y": [1]}
DIAGONAL = {"kind": "diagonal", "weights": {"w": [[1, 0], [1, 0]]}}

Expect = Union[str, tuple]   # a substring of the error line, or a tuple of alternatives (any one)


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def full_config(over: dict) -> dict:
    """`over` merged into the tiny digits config; the model is the tiny GLN unless `over` has one
    (a model section replaces the GLN's, so keys of another kind do not leak in)."""
    cfg = deep_merge(BASE, {k: v for k, v in over.items() if k != "model"})
    cfg["model"] = copy.deepcopy(over["model"]) if "model" in over else dict(GLN)
    return cfg


def dump(cfg: dict) -> str:
    return yaml.safe_dump(cfg, sort_keys=False)


def npz_bytes(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def unknown_kind(data: bytes) -> bytes:
    cfg = yaml.safe_load(data)
    cfg["model"]["kind"] = "no-such-kind"
    return dump(cfg).encode()


def without_manifest(data: bytes) -> bytes:
    """A stage record as gb wrote it before manifests existed."""
    rec = json.loads(data)
    rec.pop("manifest", None)
    return json.dumps(rec).encode()


def other_units(data: bytes) -> bytes:
    cfg = yaml.safe_load(data)
    cfg["model"]["hidden_units"] += 1
    return dump(cfg).encode()


GARBAGE = bytes(range(256)) * 4 + b"\x00\xff\xfe" * 100
BASE_RUNS = {   # the real finished runs the corrupt-run cases copy (name -> config)
    "gln": full_config({"name": "base", "svm": {"objectives": ["svm-gln"]}}),
    "relu": full_config({"name": "base", "model": RELU, "svm": {"objectives": ["svm-lc"]}}),
}


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]                    # after `gb`; `cfg.yaml` is the config written from `config`
    expect: tuple[Expect, ...]               # substrings of the error line: the key or file, and why
    config: dict | str | bytes | None = field(default_factory=dict)  # dict: full_config(); str/bytes: verbatim
    files: tuple[tuple[str, str | bytes], ...] = ()   # extra files in the working directory
    dirs: tuple[str, ...] = ()               # extra (empty) directories
    run: str | None = None                   # copy BASE_RUNS[run]'s finished run directory to ./run
    corrupt: tuple[tuple[str, bytes | Callable | None], ...] = ()   # (path, new bytes | f(old) | None: delete)
    plot_tables: bool = False                # copy the finished run's tables/ to ./plotdir/tables/
    unwritten: tuple[str, ...] = ("runs",)   # must not exist afterwards (besides: the tree is unchanged)
    outside: tuple[str, ...] = ()            # paths (relative to the work dir, may escape it) not to create
    only_new: bool = False                   # corrupt runs: no new files (a lock file's pid may change)


def gd(*args: str, **kw) -> Case:
    return Case(("train-gd", "cfg.yaml", "-q", *args), **kw)


def svm(*args: str, **kw) -> Case:
    return Case(("fit-svm", "cfg.yaml", "-q", *args), **kw)


def sweep(*args: str, **kw) -> Case:
    return Case(("sweep", "cfg.yaml", "-q", *args), **kw)


def compare_run(*corrupt, expect, run="gln", **kw) -> Case:
    return Case(("compare", "run"), config=None, run=run, corrupt=tuple(corrupt), expect=expect,
                unwritten=("run/tables",), only_new=True, **kw)


FINITE = ("finite", "inf", "nan", "NaN")   # the reason: a non-finite number
INTEGER = ("integer", "int")
MAPPING = ("mapping", "dictionary", "dict", "section")
LIST = ("list", "sequence")
SEED_RANGE = ("2**63", "9223372036854775808", "less than", "greater than or equal to 0", "negative", "range", ">= 0")
MEMORY = ("GB",)
POINTS_X_NAN = {"name": "points", "x": [[1.0, NAN]], "y": [1]}
YAML_HEAD = "dataset: {name: digits, train_size: 100, val_size: 200}\n"

CASES = [
    # ---- 1. non-finite numbers
    pytest.param(gd(config={"training": {"lr": INF}}, expect=("training.lr:", FINITE)), id="lr-inf"),
    pytest.param(gd(config={"training": {"lr": NAN}}, expect=("training.lr:", FINITE)), id="lr-nan"),
    pytest.param(gd(config={"training": {"lr": -INF}}, expect=("training.lr:",)), id="lr-minus-inf"),
    pytest.param(gd(config={"training": {"lr_decay": INF}}, expect=("training.lr_decay:", FINITE)), id="lr-decay-inf"),
    pytest.param(gd(config={"model": {**GLN, "init_scale": INF}}, expect=("model.init_scale:", FINITE)),
                 id="init-scale-inf"),
    pytest.param(gd(config={"contexts": {"normal_std": NAN}}, expect=("contexts.normal_std:", FINITE)),
                 id="normal-std-nan"),
    pytest.param(gd(config={"contexts": {"offset_std": INF}}, expect=("contexts.offset_std:", FINITE)),
                 id="offset-std-inf"),
    pytest.param(svm(config={"svm": {"objectives": ["svm-gln"], "eps": INF}}, expect=("svm.eps:", FINITE)),
                 id="svm-eps-inf"),
    pytest.param(sweep(config={"sweep": {"mem_gb": INF}, "grid": {"model.hidden_units": [2]}},
                       expect=("sweep.mem_gb:", FINITE)), id="sweep-mem-gb-inf"),
    pytest.param(gd(config={"model": {"kind": "leaky", "hidden_units": 4, "output_weight": INF}},
                    expect=("model.output_weight:", FINITE)), id="leaky-output-weight-inf"),
    pytest.param(gd(config={"dataset": {"name": "linear-teacher", "n_samples": 300, "train_size": 100,
                                        "val_size": 100, "margin": NAN}},
                    expect=("dataset.margin:", FINITE)), id="teacher-margin-nan"),
    pytest.param(gd(config={"dataset": {"max_norm": INF}}, expect=("dataset.max_norm:", FINITE)), id="max-norm-inf"),
    pytest.param(gd(config=dump({"dataset": POINTS_X_NAN, "model": DIAGONAL, "training": {"epochs": 2}}),
                    expect=("dataset.x", FINITE)), id="points-x-nan"),
    pytest.param(gd(config=dump({"dataset": POINTS, "model": {"kind": "diagonal", "weights": {"w": [[INF, 0], [1, 0]]}},
                                 "training": {"epochs": 2}}),
                    expect=("model.weights", FINITE)), id="explicit-weights-inf"),
    # ---- 2. strict types
    pytest.param(gd(config={"contexts": {"seed": True}}, expect=("contexts.seed:", INTEGER)), id="seed-yes"),
    pytest.param(gd(config={"dataset": {"data_seed": "7"}}, expect=("dataset.data_seed:", INTEGER)),
                 id="data-seed-string"),
    pytest.param(gd(config={"model": {**GLN, "hidden_units": "10"}}, expect=("model.hidden_units:", INTEGER)),
                 id="hidden-units-string"),
    pytest.param(gd(config={"model": {**GLN, "hidden_units": 10.5}}, expect=("model.hidden_units:", INTEGER)),
                 id="hidden-units-float"),
    pytest.param(gd(config={"contexts": {"count": True}}, expect=("contexts.count:", INTEGER)), id="count-true"),
    pytest.param(gd(config={"training": {"batch_size": "128"}}, expect=("training.batch_size:", INTEGER)),
                 id="batch-size-string"),
    pytest.param(svm(config={"svm": {"objectives": "svm-gln"}}, expect=("svm.objectives:", LIST)),
                 id="objectives-string"),
    pytest.param(gd(config={"training": {"track": "margin"}}, expect=("training.track:", LIST)), id="track-string"),
    pytest.param(gd(config={"model": [1, 2]}, expect=("model:", MAPPING)), id="model-list"),
    pytest.param(gd(config={"dataset": 5}, expect=("dataset:", MAPPING)), id="dataset-int"),
    pytest.param(gd(config={"training": None}, expect=("training:",)), id="training-null"),
    # ---- 3. seeds in [0, 2**63)
    pytest.param(gd(config={"contexts": {"seed": 2 ** 63}}, expect=("contexts.seed:", SEED_RANGE)), id="seed-2-63"),
    pytest.param(gd(config={"contexts": {"seed": -1}}, expect=("contexts.seed:", SEED_RANGE)), id="seed-negative"),
    pytest.param(gd(config={"training": {"batch_seed": 2 ** 64}}, expect=("training.batch_seed:", SEED_RANGE)),
                 id="batch-seed-2-64"),
    pytest.param(gd(config={"model": {**GLN, "init_seed": -5}}, expect=("model.init_seed:", SEED_RANGE)),
                 id="init-seed-negative"),
    pytest.param(gd(config={"dataset": {"data_seed": 2 ** 63}}, expect=("dataset.data_seed:", SEED_RANGE)),
                 id="data-seed-2-63"),
    pytest.param(svm(config={"model": RELU, "svm": {"objectives": ["svm-rc"], "search_seed": -1}},
                     expect=("svm.search_seed:", SEED_RANGE)), id="search-seed-negative"),
    # ---- 4. unbounded sizes: refused before allocating (each within TIMEOUT)
    pytest.param(gd(config={"model": {**GLN, "hidden_units": 10 ** 9}}, expect=("model.hidden_units:", MEMORY)),
                 id="hidden-units-1e9"),
    pytest.param(gd(config={"contexts": {"count": 2 ** 40}}, expect=("contexts.count:",)), id="contexts-2-40"),
    pytest.param(gd(config={"training": {"log_points": 10 ** 12}}, expect=("training.log_points:",)),
                 id="log-points-1e12"),
    pytest.param(gd(config={"dataset": {"name": "linear-teacher", "n_samples": 10 ** 10, "train_size": 100,
                                        "val_size": 100}}, expect=("dataset.n_samples:",)), id="teacher-n-1e10"),
    pytest.param(gd(config={"dataset": {"name": "orthogonal", "n_samples": 1000, "dim": 10 ** 9, "train_size": 100,
                                        "val_size": 100}}, expect=("dataset.dim:",)), id="orthogonal-dim-1e9"),
    pytest.param(gd(config={"dataset": {"name": "orthogonal", "n_samples": 10 ** 7, "dim": 10 ** 5, "train_size": 100,
                                        "val_size": 100}},
                    expect=(("dataset.n_samples:", "dataset.dim:"), MEMORY)), id="orthogonal-pool-8tb"),
    pytest.param(svm(config={"model": RELU, "svm": {"objectives": ["svm-rc"], "restarts": 10 ** 9}},
                     expect=("svm.restarts:",)), id="restarts-1e9"),
    pytest.param(gd(config={"model": {"kind": "deep-linear", "width": 10 ** 8}}, expect=("model.width:",)),
                 id="deep-linear-width-1e8"),
    pytest.param(gd(config={"model": {**GLN, "hidden_units": 100_000}, "contexts": {"count": 1024}},
                    expect=(("model.hidden_units:", "contexts.count:"), MEMORY)), id="gln-100k-units-1024-contexts"),
    pytest.param(svm(config={"dataset": {"name": "linear-teacher", "n_samples": 10 ** 7, "dim": 2,
                                         "train_size": 9_000_000, "val_size": 100},
                             "svm": {"objectives": ["svm-l2-reference"]}},   # its exact reduction holds N x N
                     expect=("dataset.train_size:", MEMORY)), id="dual-reference-n-9e6"),
    # ---- 5. YAML hazards: one line naming the config file
    pytest.param(gd(config=YAML_HEAD + "training: {epochs: 2}\ntraining: {epochs: 3}\n",
                    expect=("cfg.yaml", "duplicate", "training")), id="yaml-duplicate-section"),
    pytest.param(gd(config=YAML_HEAD + "training: {epochs: 2, epochs: 3}\n",
                    expect=("cfg.yaml", "duplicate", "epochs")), id="yaml-duplicate-nested-key"),
    pytest.param(gd(config=YAML_HEAD + "training: {epochs: 2}\ncontexts: {seed: " + "7" * 5000 + "}\n",
                    expect=("cfg.yaml", ("contexts.seed", "too large"))), id="yaml-5000-digit-integer"),
    pytest.param(gd(config=YAML_HEAD + "x: " + "[" * 2000 + "]" * 2000 + "\n",
                    expect=("cfg.yaml", ("nested", "deep", "depth"))), id="yaml-nesting-2000"),
    pytest.param(gd(config=YAML_HEAD + "a: &x [1, 2]\nb: *x\n", expect=("cfg.yaml", "alias")), id="yaml-alias"),
    pytest.param(gd(config=YAML_HEAD + "training:\n\tepochs: 2\n", expect=("cfg.yaml", ("not valid YAML", "tab"))),
                 id="yaml-tab-indented"),
    pytest.param(gd(config=YAML_HEAD.encode() + b"name: caf\xe9\xff\n", expect=("cfg.yaml", "UTF-8")),
                 id="yaml-not-utf8"),
    pytest.param(gd(config="- dataset\n- model\n", expect=("cfg.yaml", "mapping")), id="yaml-list"),
    pytest.param(Case(("train-gd", "cfgdir", "-q"), config=None, dirs=("cfgdir",), expect=("cfgdir", "directory")),
                 id="config-is-a-directory"),
    pytest.param(Case(("train-gd", "nope.yaml", "-q"), config=None, expect=("nope.yaml", "not found")),
                 id="config-does-not-exist"),
    # ---- 6. paths that escape the runs folder or cannot be written (refused before any training)
    pytest.param(gd(config={"name": "../../x"}, expect=("name:",), outside=("runs/../../x", "../x")),
                 id="name-dotdot-escape"),
    pytest.param(gd(config={"name": "/tmp/gb-hostile-abs"}, expect=("name:",), outside=("/tmp/gb-hostile-abs",)),
                 id="name-absolute"),
    pytest.param(gd(config={"name": ""}, expect=("name:",)), id="name-empty"),
    pytest.param(gd(config={"name": "a/b"}, expect=("name:",)), id="name-with-slash"),
    pytest.param(gd(config={"name": ".."}, expect=("name:",)), id="name-dotdot"),
    pytest.param(gd(config={"name": "."}, expect=("name:",)), id="name-dot"),
    pytest.param(gd("--out", "", expect=("--out",)), id="out-empty"),
    pytest.param(gd("--out", "/proc/gb-not-writable", expect=("--out", "/proc/gb-not-writable")),
                 id="out-proc", ),
    pytest.param(gd("--out", "afile", files=(("afile", "keep me\n"),), expect=("--out", "afile")), id="out-a-file"),
    pytest.param(gd("--out", "afile/sub", files=(("afile", "keep me\n"),), expect=("--out", "afile")),
                 id="out-below-a-file"),
    pytest.param(gd(config={"output": {"dir": "/proc/gb-x"}}, expect=("output.dir", "/proc/gb-x")),
                 id="output-dir-proc"),
    # ---- 7. corrupt or foreign run files (copies of a real finished run)
    pytest.param(compare_run(("run/svm/svm-gln/result.json", b"[1, 2]\n"), expect=("run/svm/svm-gln/result.json",)),
                 id="result-json-list"),
    pytest.param(compare_run(("run/svm/svm-gln/result.json", GARBAGE), expect=("run/svm/svm-gln/result.json",)),
                 id="result-json-binary"),
    pytest.param(compare_run(("run/gd/summary.json", b"{}\n"), expect=("run/gd/summary.json",)),
                 id="summary-json-empty-object"),
    pytest.param(compare_run(("run/gd/summary.json", truncate), expect=("run/gd/summary.json",)),
                 id="summary-json-truncated"),
    pytest.param(compare_run(("run/gd/predictions.npz", truncate), expect=("run/gd/predictions.npz",)),
                 id="gd-predictions-truncated"),
    pytest.param(compare_run(("run/gd/predictions.npz", npz_bytes(train_out=np.zeros(100))),
                             expect=("run/gd/predictions.npz", "val_out")), id="gd-predictions-without-val-out"),
    pytest.param(compare_run(("run/svm/svm-gln/predictions.npz", truncate),
                             expect=("run/svm/svm-gln/predictions.npz",)), id="svm-predictions-truncated"),
    pytest.param(compare_run(("run/gd/config.yaml", b"model: {kind: gln\n"), expect=("run/gd/config.yaml",)),
                 id="gd-config-not-yaml"),
    pytest.param(compare_run(("run/gd/config.yaml", unknown_kind), expect=("run/gd/config.yaml", "no-such-kind")),
                 id="gd-config-unknown-kind"),
    pytest.param(compare_run(("run/svm/svm-gln/result.json", None),
                             expect=("run/svm/svm-gln", ("unfinished", "interrupted", "incomplete"))),
                 id="svm-stage-without-result"),
    pytest.param(compare_run(("run/gd/summary.json", without_manifest), ("run/svm/svm-gln/result.json", without_manifest),
                             ("run/svm/svm-gln/config.yaml", other_units), expect=("run/svm/svm-gln", "stale")),
                 id="stages-without-manifest-of-another-model"),
    pytest.param(Case(("plot", "plotdir"), config=None, plot_tables=True,
                      files=(("plotdir/tables/errors.csv", "a,b\n1,2\n"),),
                      expect=("plotdir/tables/errors.csv",), unwritten=("plotdir/figures",)), id="plot-foreign-columns"),
    pytest.param(Case(("plot", "plotdir"), config=None, plot_tables=True, files=(("plotdir/tables/errors.csv", GARBAGE),),
                      expect=("plotdir/tables/errors.csv",), unwritten=("plotdir/figures",)), id="plot-binary-table"),
    # ---- 8. data names (only the sets with files can be fetched or verified)
    pytest.param(Case(("data", "verify", "foo"), config=None, expect=("NAME", "'foo'")), id="data-verify-unknown"),
    pytest.param(Case(("data", "fetch", "linear-teacher"), config=None, expect=("NAME", "'linear-teacher'")),
                 id="data-fetch-synthetic"),
    pytest.param(Case(("fit-svm", "cfg.yaml", "-q", "--out", "run", "--objective", "svm-lc"),
                      config=BASE_RUNS["relu"], run="relu", corrupt=(("run/gd/model.pt", truncate),),
                      expect=("model.pt",), unwritten=("run/svm",), only_new=True), id="svm-lc-model-pt-truncated"),
]


# ------------------------------------------------------------------ running


def _tree(root: Path) -> dict[str, tuple]:
    """Every path under `root`: (mode, mtime_ns, contents) of files, (mode, mtime_ns) of directories."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        rel = str(p.relative_to(root))
        out[rel] = (st.st_mode, st.st_mtime_ns, p.read_bytes()) if p.is_file() else (st.st_mode, st.st_mtime_ns)
    return out


def _env(data_dir: Path) -> dict:
    # a narrow terminal: the error must stay one line however long it is; one torch thread per
    # process (many run at once: oversubscribed thread pools make tiny steps 50x slower)
    return {**os.environ, "GB_DATA_DIR": str(data_dir), "COLUMNS": "60", "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass
class Outcome:
    returncode: int | None     # None: timed out (killed)
    stdout: str
    stderr: str
    seconds: float


def run_gb(args, work: Path, env: dict | None = None, timeout: float = TIMEOUT, umask: int | None = None,
           memory: int | None = None) -> Outcome:
    start = time.monotonic()

    def preexec():
        if umask is not None:
            os.umask(umask)
        if memory is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    try:
        p = subprocess.run([*GB, *args], cwd=work, env=env or _env(work / "data"), capture_output=True, text=True,
                           errors="replace", timeout=timeout, preexec_fn=preexec if umask is not None or memory is not None else None)
        return Outcome(p.returncode, p.stdout, p.stderr, time.monotonic() - start)
    except subprocess.TimeoutExpired as exc:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return Outcome(None, text(exc.stdout), text(exc.stderr) + f"\n[timed out after {timeout} s]",
                       time.monotonic() - start)


def shown(args, o: Outcome) -> str:
    return (f"gb {' '.join(map(str, args))}\n--- exit {o.returncode} ({o.seconds:.1f} s)\n--- stderr\n{o.stderr}"
            f"\n--- stdout\n{o.stdout[-3000:]}")


def _write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


def _make_base(kind: str, root: Path) -> Path:
    """A real finished run: train-gd (+ fit-svm + compare for the GLN) on the tiny config."""
    work = root / f"base-{kind}"
    work.mkdir()
    (work / "data").mkdir()
    _write(work / "cfg.yaml", dump(BASE_RUNS[kind]))
    steps = [("train-gd", "cfg.yaml", "-q", "--out", "run")]
    if kind == "gln":
        steps += [("fit-svm", "cfg.yaml", "-q", "--out", "run"), ("compare", "run")]
    for args in steps:
        o = run_gb(args, work, timeout=TIMEOUT)
        if o.returncode != 0:
            raise RuntimeError(f"making the base {kind} run failed\n{shown(args, o)}")
    return work / "run"


def _prepare_case(case: Case, work: Path, bases: dict[str, Future]) -> None:
    (work / "data").mkdir(exist_ok=True)
    if isinstance(case.config, dict):
        _write(work / "cfg.yaml", dump(full_config(case.config)))
    elif case.config is not None:
        _write(work / "cfg.yaml", case.config)
    for d in case.dirs:
        (work / d).mkdir(parents=True, exist_ok=True)
    if case.run is not None:
        src = bases[case.run].result()
        shutil.copytree(src, work / "run", ignore=shutil.ignore_patterns("tables", "figures"))
    if case.plot_tables:
        shutil.copytree(bases["gln"].result() / "tables", work / "plotdir" / "tables")
    for rel, data in case.files:
        _write(work / rel, data)
    for rel, op in case.corrupt:
        path = work / rel
        if op is None:
            path.unlink()
        else:
            path.write_bytes(op(path.read_bytes()) if callable(op) else op)


def _launch_case(case: Case, work: Path, bases: dict[str, Future]):
    _prepare_case(case, work, bases)
    outside = {rel: (work / rel).resolve() for rel in case.outside}
    existed = {rel for rel, p in outside.items() if p.exists()}
    before = _tree(work)
    outcome = run_gb(case.args, work, memory=CASE_MEMORY)
    return outcome, work, before, {rel: p for rel, p in outside.items() if rel not in existed}


# ---- flows: a few commands in sequence in one working directory (status words, reruns, umask)


@dataclass(frozen=True)
class Flow:
    config: dict
    steps: tuple[tuple[str, ...], ...]
    umask: int | None = None


FLOWS = {
    "diverge-lr-1e6": Flow(full_config({"name": "div", "training": {"lr": 1.0e6}}),
                           (("train-gd", "cfg.yaml", "-q"), ("compare", "runs/div"))),
    "diverge-lr-1e30": Flow(full_config({"name": "div", "training": {"lr": 1.0e30}}),
                            (("train-gd", "cfg.yaml", "-q"), ("fit-svm", "cfg.yaml", "-q", "--objective", "svm-gln"),
                             ("compare", "runs/div"))),
    "inaccurate-eps": Flow(full_config({"name": "eps", "svm": {"objectives": ["svm-gln"], "eps": 0.01}}),
                           (("fit-svm", "cfg.yaml", "-q"),)),
    "rerun-invalidates": Flow(full_config({"name": "x", "svm": {"objectives": ["svm-gln"]}}),
                              (("train-gd", "cfg.yaml", "-q", "--out", "runs/x"),
                               ("fit-svm", "cfg.yaml", "-q", "--out", "runs/x"),
                               ("train-gd", "cfg.yaml", "-q", "--out", "runs/x", "--set", "model.hidden_units=3"),
                               ("compare", "runs/x"))),
    "fit-svm-other-model": Flow(full_config({"name": "m", "svm": {"objectives": ["svm-gln"]}}),
                                (("train-gd", "cfg.yaml", "-q", "--out", "runs/m"),
                                 ("fit-svm", "cfg.yaml", "-q", "--out", "runs/m", "--set", "model.hidden_units=3"))),
    "umask-022": Flow(full_config({"name": "u"}), (("train-gd", "cfg.yaml", "-q"),), umask=0o022),
    "umask-077": Flow(full_config({"name": "u"}), (("train-gd", "cfg.yaml", "-q"),), umask=0o077),
}


def _launch_flow(flow: Flow, work: Path):
    (work / "data").mkdir(parents=True, exist_ok=True)
    _write(work / "cfg.yaml", dump(flow.config))
    results = []
    for args in flow.steps:
        before = _tree(work)
        results.append((args, run_gb(args, work, timeout=TIMEOUT, umask=flow.umask), before))
    return results, work


@pytest.fixture(scope="module")
def launched(request, tmp_path_factory):
    """Start every selected case and flow at once; returns {'cases': id -> future, 'flows': name -> future}."""
    mine = [item for item in request.session.items if item.module is request.module and hasattr(item, "callspec")]
    cases = {item.callspec.id: item.callspec.params["case"] for item in mine if "case" in item.callspec.params}
    flows = {item.callspec.params["flow"] for item in mine if "flow" in item.callspec.params}
    root = tmp_path_factory.mktemp("hostile")
    pool = ThreadPoolExecutor(max_workers=(os.cpu_count() or 2) + 2)
    needed = {c.run for c in cases.values() if c.run} | ({"gln"} if any(c.plot_tables for c in cases.values()) else set())
    bases = {kind: pool.submit(_make_base, kind, root) for kind in sorted(needed)}
    futures = {"flows": {}, "cases": {}}
    for name in sorted(flows):
        futures["flows"][name] = pool.submit(_launch_flow, FLOWS[name], root / f"flow-{name}")
    # independent cases first, then those that wait for a base run
    for cid, case in sorted(cases.items(), key=lambda kv: bool(kv[1].run or kv[1].plot_tables)):
        work = root / f"case-{cid}"
        work.mkdir()
        futures["cases"][cid] = pool.submit(_launch_case, case, work, bases)
    yield futures
    pool.shutdown(wait=True)


def _check_error_line(o: Outcome, expect: tuple[Expect, ...], what: str, code: int = 2) -> str:
    assert o.returncode is not None, f"timed out (a hang): bad input must be refused at once\n{what}"
    assert "Traceback" not in o.stderr + o.stdout, what
    assert o.returncode == code, what
    err = o.stderr.strip()
    assert len(err.splitlines()) == 1, f"not exactly one stderr line\n{what}"
    assert err.startswith("gb: error: "), what
    for part in expect:
        alternatives = part if isinstance(part, tuple) else (part,)
        assert any(a in err for a in alternatives), f"none of {alternatives!r} in the message\n{what}"
    return err


@pytest.mark.parametrize("case", CASES)
def test_bad_input(case: Case, launched, request):
    outcome, work, before, outside = launched["cases"][request.node.callspec.id].result()
    what = shown(case.args, outcome)
    _check_error_line(outcome, case.expect, what)
    for rel in case.unwritten:
        assert not (work / rel).exists(), f"{rel} was written\n{what}"
    for rel, path in outside.items():
        assert not path.exists(), f"{path} was created (outside the working directory)\n{what}"
    after = _tree(work)
    if case.only_new:
        assert sorted(set(after) - set(before)) == [], f"new files were written\n{what}"
    else:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        assert not changed, f"files were written or changed: {changed}\n{what}"


# ------------------------------------------------------------------ 9. status words


def _flow(launched, name):
    return launched["flows"][name].result()


@pytest.mark.parametrize("flow", ["diverge-lr-1e6", "diverge-lr-1e30"])
def test_diverged_training_is_a_status(flow, launched):
    results, work = _flow(launched, flow)
    (train_args, train, _), (cmp_args, cmp, _) = results[0], results[-1]
    what = shown(train_args, train)
    assert "Traceback" not in train.stderr + train.stdout, what
    assert train.returncode == 1, what
    assert "diverged" in train.stderr, what
    summary = work / "runs" / "div" / "gd" / "summary.json"
    assert summary.is_file(), what
    assert json.loads(summary.read_text())["status"] == "diverged", summary.read_text()
    what = shown(cmp_args, cmp)
    assert "Traceback" not in cmp.stderr + cmp.stdout, what
    assert cmp.returncode == 1, what
    assert "diverged" in cmp.stdout + cmp.stderr, what
    errors = (work / "runs" / "div" / "tables" / "errors.csv")
    assert errors.is_file(), what
    import pandas as pd

    table = pd.read_csv(errors)
    row = table[table["predictor"] == "gd-gln"].iloc[0]
    assert row["status"] == "diverged", table.to_string()
    for col in ("train_error", "val_error"):   # non-finite outputs count as errors, never as 0
        assert not (row[col] == 0), f"{col} is 0 for a diverged network\n{table.to_string()}"
    if len(results) == 3:   # a program solved beside the diverged network: its pair says so
        args, o, _ = results[1]
        assert o.returncode == 0, shown(args, o)
        pairs = pd.read_csv(work / "runs" / "div" / "tables" / "inconsistency.csv")
        assert len(pairs) == 1 and (pairs["gd_status"] == "diverged").all(), pairs.to_string()


@pytest.mark.parametrize("flow", ["inaccurate-eps"])
def test_uncertified_solve_is_inaccurate(flow, launched):
    (args, o, _), = _flow(launched, flow)[0]
    work = _flow(launched, flow)[1]
    what = shown(args, o)
    assert "Traceback" not in o.stderr + o.stdout, what
    assert o.returncode == 1, what
    assert any(line.startswith("gb: warning") for line in o.stderr.splitlines()), what
    result = json.loads((work / "runs" / "eps" / "svm" / "svm-gln" / "result.json").read_text())
    assert result["status"] == "inaccurate", result
    assert result["certified"] is False, result


# ------------------------------------------------------------------ run integrity


@pytest.mark.parametrize("flow", ["rerun-invalidates"])
def test_rerun_invalidates_downstream(flow, launched):
    import pandas as pd

    results, work = _flow(launched, flow)
    for args, o, _ in results[:3]:
        assert o.returncode == 0 and "Traceback" not in o.stderr + o.stdout, shown(args, o)
    run = work / "runs" / "x"
    stale = run / "svm" / "svm-gln" / "result.json"
    if stale.is_file():   # kept only when marked stale
        rec = json.loads(stale.read_text())
        assert rec.get("status") == "stale" or rec.get("stale"), f"the H=2 program survives the H=3 rerun: {rec}"
    args, cmp, _ = results[3]
    what = shown(args, cmp)
    assert "Traceback" not in cmp.stderr + cmp.stdout, what
    if cmp.returncode == 2:
        _check_error_line(cmp, ("svm-gln",), what)
    else:
        assert cmp.returncode in (0, 1), what
        errors = pd.read_csv(run / "tables" / "errors.csv")
        assert set(errors["hidden_units"]) == {3}, f"rows of another network:\n{errors.to_string()}\n{what}"
        assert "svm-gln" not in set(errors["predictor"]) or (errors.loc[errors["predictor"] == "svm-gln", "status"]
                                                           == "stale").all(), errors.to_string()
        incons = pd.read_csv(run / "tables" / "inconsistency.csv")
        assert len(incons) == 0 or set(incons["hidden_units"]) == {3}, incons.to_string()


@pytest.mark.parametrize("flow", ["fit-svm-other-model"])
def test_fit_svm_refuses_another_model(flow, launched):
    results, work = _flow(launched, flow)
    args, o, _ = results[0]
    assert o.returncode == 0, shown(args, o)
    args, o, before = results[1]
    what = shown(args, o)
    _check_error_line(o, ("gd/",), what)
    assert not (work / "runs" / "m" / "svm").exists(), what
    after = _tree(work)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"files were written or changed: {changed}\n{what}"


@pytest.mark.parametrize("flow", ["umask-022", "umask-077"])
def test_result_files_honour_the_umask(flow, launched):
    (args, o, _), = _flow(launched, flow)[0]
    work = _flow(launched, flow)[1]
    assert o.returncode == 0, shown(args, o)
    want = 0o666 & ~FLOWS[flow].umask
    gd_dir = work / "runs" / "u" / "gd"
    modes = {f: oct((gd_dir / f).stat().st_mode & 0o777)
             for f in ("summary.json", "metrics.csv", "model.pt", "predictions.npz", "config.yaml")}
    assert set(modes.values()) == {oct(want)}, f"umask {oct(FLOWS[flow].umask)}: want {oct(want)}, got {modes}"


# ---- processes that overlap or die

LONG = {"dataset": {"name": "digits", "train_size": 1000, "val_size": 700},
        "training": {"epochs": 200, "batch_size": 32}, "model": {"kind": "gln", "hidden_units": 3},
        "contexts": {"count": 4}}   # holds the run lock for a few seconds of training


def _popen(args, work: Path):
    return subprocess.Popen([*GB, *args], cwd=work, env=_env(work / "data"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace")


def _communicate(p: subprocess.Popen, timeout: float = TIMEOUT) -> Outcome:
    out, err = p.communicate(timeout=timeout)
    return Outcome(p.returncode, out, err, 0.0)


def _temp_files(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob(".*.tmp"))


def test_two_concurrent_writers(tmp_path):
    (tmp_path / "data").mkdir()
    _write(tmp_path / "cfg.yaml", dump({"name": "two", **LONG}))
    for trial in range(3):
        procs = [_popen(("train-gd", "cfg.yaml", "-q", "--out", "runs/two"), tmp_path) for _ in range(2)]
        outs = [_communicate(p) for p in procs]
        what = "\n".join(shown(("train-gd", "cfg.yaml", "-q", "--out", "runs/two"), o) for o in outs)
        for o in outs:
            assert "Traceback" not in o.stderr + o.stdout, what
        assert sorted(o.returncode for o in outs) == [0, 2], f"trial {trial}: want one success, one refusal\n{what}"
        loser = next(o for o in outs if o.returncode == 2)
        _check_error_line(loser, (("another", "lock"),), what)
        assert json.loads((tmp_path / "runs/two/gd/summary.json").read_text())["status"] == "ok"
        assert _temp_files(tmp_path) == [], what


def _consistent_or_refused(cmp: Outcome, run: Path, what: str) -> None:
    """After a kill: `compare` refuses with one line, or shows rows of one network only (the gd files
    and every program agree on the model)."""
    import pandas as pd
    import torch

    assert "Traceback" not in cmp.stderr + cmp.stdout, what
    if cmp.returncode == 2:
        _check_error_line(cmp, (str(run.name),), what)
        return
    assert cmp.returncode in (0, 1), what
    errors = pd.read_csv(run / "tables" / "errors.csv")
    units = set(errors["hidden_units"])
    assert len(units) == 1, f"rows of two networks:\n{errors.to_string()}\n{what}"
    gd_cfg = yaml.safe_load((run / "gd" / "config.yaml").read_text())
    assert units == {gd_cfg["model"]["hidden_units"]}, f"the table does not describe gd/config.yaml\n{what}"
    state = torch.load(run / "gd" / "model.pt", weights_only=False)
    w1 = state["state_dict"]["w1"]
    assert w1.shape[0] == gd_cfg["model"]["hidden_units"] * gd_cfg["contexts"]["count"], \
        f"gd/model.pt ({tuple(w1.shape)}) is not the network of gd/config.yaml\n{what}"
    for result in (run / "svm").glob("*/config.yaml"):
        assert yaml.safe_load(result.read_text())["model"] == gd_cfg["model"], f"{result}: another model\n{what}"


KILL_AT = {   # when to kill the rerun: the first moment the condition holds (polled every 0.5 ms)
    "training": lambda run, old: not (run / "gd" / "summary.json").exists(),   # old record removed, training
    "config-written": lambda run, old: _changed(run / "gd" / "config.yaml", old),
    "model-written": lambda run, old: _changed(run / "gd" / "model.pt", old),
}


def _changed(path: Path, old: dict) -> bool:
    try:
        return path.stat().st_mtime_ns != old.get(path.name)
    except FileNotFoundError:
        return False


def _kill_trial(name: str, tmp_path: Path, template: Path) -> tuple[bool, str]:
    """Copy the old run, start the H = 3 rerun, kill -9 at `name`'s moment; then `compare` and a
    full rerun. Returns (ok, report)."""
    run = tmp_path / f"trial-{name}"
    shutil.copytree(template, run)
    old = {p.name: p.stat().st_mtime_ns for p in (run / "gd").iterdir()}
    args = ("train-gd", "new.yaml", "-q", "--out", run.name)
    p = _popen(args, tmp_path)
    start, cond = time.monotonic(), KILL_AT[name]
    while p.poll() is None and not cond(run, old) and time.monotonic() - start < TIMEOUT:
        time.sleep(0.0005)
    killed = p.poll() is None
    if killed:
        p.send_signal(signal.SIGKILL)
    p.communicate()
    files = ", ".join(sorted(str(q.relative_to(run)) for q in run.rglob("*")))
    cmp = run_gb(("compare", run.name), tmp_path, timeout=TIMEOUT)
    what = (f"trial {name}: killed at {time.monotonic() - start:.2f} s (killed: {killed}; files after the kill: "
            f"{files})\n" + shown(("compare", run.name), cmp))
    try:
        _consistent_or_refused(cmp, run, what)
        o = run_gb(args, tmp_path, timeout=TIMEOUT)
        what += "\n--- the rerun\n" + shown(args, o)
        assert o.returncode == 0 and "Traceback" not in o.stderr + o.stdout, what
        assert _temp_files(run) == [], f"temp files remain after the rerun\n{what}"
        assert json.loads((run / "gd" / "summary.json").read_text())["status"] == "ok", what
        for f in ("config.yaml", "metrics.csv", "model.pt", "predictions.npz"):
            assert (run / "gd" / f).is_file(), f"gd/{f} missing after the rerun\n{what}"
        gd_cfg = yaml.safe_load((run / "gd" / "config.yaml").read_text())
        assert gd_cfg["model"]["hidden_units"] == 3, what
        assert not list((run / "svm").glob("*/result.json")), f"the H=2 program survived the H=3 rerun\n{what}"
    except AssertionError as exc:
        return False, str(exc)
    return True, what


def test_kill_during_rerun(tmp_path):
    """An old finished run (H = 2, with svm-gln); a rerun with H = 3 killed (-9) while training, and
    just after it wrote gd/config.yaml (the first file) and gd/model.pt (trials in parallel); after each kill
    `compare` refuses or shows one consistent network, and a rerun succeeds and leaves no temp files."""
    (tmp_path / "data").mkdir()
    _write(tmp_path / "old.yaml", dump(full_config({"name": "k", "svm": {"objectives": ["svm-gln"]}})))
    _write(tmp_path / "new.yaml", dump({"name": "k", **LONG, "training": {"epochs": 10, "batch_size": 32}}))
    template = tmp_path / "template"
    for args in (("train-gd", "old.yaml", "-q", "--out", "template"), ("fit-svm", "old.yaml", "-q", "--out", "template")):
        o = run_gb(args, tmp_path, timeout=TIMEOUT)
        assert o.returncode == 0, shown(args, o)
    with ThreadPoolExecutor(max_workers=len(KILL_AT)) as pool:
        reports = list(pool.map(lambda name: _kill_trial(name, tmp_path, template), KILL_AT))
    failed = [r for ok, r in reports if not ok]
    assert not failed, "\n\n".join(failed)


# ---- a full disk


@pytest.fixture
def full_disk(tmp_path):
    mnt = tmp_path / "full"
    mnt.mkdir()
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a 1 MB tmpfs: {exc}")
    if r.returncode != 0:
        pytest.skip(f"cannot mount a 1 MB tmpfs (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


BIG = {"model": {"kind": "gln", "hidden_units": 100}, "contexts": {"count": 64}}   # model.pt ~1.7 MB
NO_SPACE = ("No space left on device", "disk full")


def test_disk_full_train(tmp_path, full_disk):
    (tmp_path / "data").mkdir()
    _write(tmp_path / "cfg.yaml", dump(full_config({"name": "big", **BIG})))
    out = full_disk / "run"
    args = ("train-gd", "cfg.yaml", "-q", "--out", str(out))
    o = run_gb(args, tmp_path, timeout=TIMEOUT)
    what = shown(args, o)
    assert o.returncode not in (0, None), what
    _check_error_line(o, (NO_SPACE, str(out)), what, code=o.returncode)
    assert not (out / "gd" / "summary.json").exists(), what


def test_disk_full_sweep(tmp_path, full_disk):
    (tmp_path / "data").mkdir()
    _write(tmp_path / "cfg.yaml", dump(full_config({"name": "bigsweep", **BIG,
                                                    "grid": {"model.hidden_units": [100, 101]}})))
    out = full_disk / "sweep"
    args = ("sweep", "cfg.yaml", "-q", "--out", str(out))
    o = run_gb(args, tmp_path, timeout=TIMEOUT)
    what = shown(args, o) + "\nfiles: " + ", ".join(sorted(str(p.relative_to(full_disk)) for p in full_disk.rglob("*")))
    assert o.returncode not in (0, None), what
    assert "Traceback" not in o.stderr + o.stdout, what
    records = [p.read_text(errors="replace") for p in out.rglob("failed.json")]
    records += [p.read_text(errors="replace") for p in out.rglob("failures.csv")]
    recorded = any(any(s in r for s in NO_SPACE) for r in records)
    if not recorded:   # else the sweep stops with one line naming the path
        _check_error_line(o, (NO_SPACE, str(out)), what, code=o.returncode)


def test_disk_full_before_anything(tmp_path, full_disk):
    """Not a byte left: not even the lock's pid can be written; one line naming that file."""
    (tmp_path / "data").mkdir()
    _write(tmp_path / "cfg.yaml", dump(full_config({"name": "nothing", "grid": {"model.hidden_units": [2, 3]}})))
    with open(full_disk / "filler", "wb", buffering=0) as fh:   # fill the tmpfs to the last byte
        try:
            while fh.write(b"\0" * 4096):
                pass
        except OSError:
            pass
    out = full_disk / "sweep"
    args = ("sweep", "cfg.yaml", "-q", "--out", str(out))
    o = run_gb(args, tmp_path)
    what = shown(args, o)
    assert o.returncode not in (0, None), what
    _check_error_line(o, (NO_SPACE, str(out)), what, code=o.returncode)


def test_small_things(tmp_path):
    """`gb --version`; the data commands answer for digits without touching the data directory."""
    (tmp_path / "data").mkdir()
    o = run_gb(("--version",), tmp_path)
    assert o.returncode == 0 and o.stdout.startswith("gb ") and len(o.stdout.split()) == 2, shown(("--version",), o)
    for args, said in ((("data", "fetch", "digits"), "nothing to fetch"), (("data", "verify", "digits"), "ok")):
        o = run_gb(args, tmp_path)
        assert o.returncode == 0 and said in o.stdout and o.stderr == "", shown(args, o)
    assert _tree(tmp_path) == {"data": _tree(tmp_path)["data"]}, "the data commands wrote something for digits"
