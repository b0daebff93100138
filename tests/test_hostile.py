"""Hostile input: non-finite numbers, loose types, out-of-range seeds, unbounded sizes, YAML
hazards, escaping paths, corrupt run files; the status words of failed work (diverged,
inaccurate); and what a run directory must survive: reruns, kill -9, two writers, a full disk,
the umask.

Bad input ends with exit code 2, exactly one stderr line `gb: error: ...` naming the config key
(dotted) or the file and why, no traceback, and nothing written (the working directory tree,
with contents and mtimes, is unchanged; `runs/` does not appear).

Every case runs the real CLI in its own process and working directory, forked from a process that
has imported gb (tests/forked_gb.py; the flows that signal or race a command start it with
`python -c "from gbcli.cli import main; main()"`). The module fixture
`launched` starts every selected case and flow at once on a thread pool; each test then checks
its own outcome. The corrupt-run cases copy a real finished run (made once by `train-gd`,
`fit-svm` and `compare` on a tiny digits config) and break one file.
"""

from __future__ import annotations

import builtins
import copy
import io
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Union

import numpy as np
import pytest
import yaml

import forked_gb

pytestmark = pytest.mark.slow   # subprocesses of gb, end to end: `make test-fast` leaves the file out

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
    # a finished sweep of one point (OUT/points/<id>/, OUT/solves/<key>.npz, OUT/tables/, OUT/figures/)
    "sweep": full_config({"name": "base", "svm": {"objectives": ["svm-gln"]}, "grid": {"model.hidden_units": [2]},
                          "sweep": {"jobs": 1}}),
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
    # ---- received run and sweep directories (paths may hold {point}: the copied sweep's one point
    # id, and {key}: its one solve-cache key)
    links: tuple[tuple[str, str], ...] = ()   # (path, target): real symlinks, made last; "@/x" is OUTSIDE/x
    outside_files: tuple[tuple[str, str | bytes], ...] = ()   # files in OUTSIDE, a folder beside the work dir
    setup: Callable[[Path], None] | None = None   # a last preparation step, given the work dir
    reports: bool = False                    # copy the base run's tables/ and figures/ too (a sweep's always are)
    max_line: int | None = None              # the error line is shorter than this
    quote: tuple[str, int] | None = None     # (character, n): the error line holds at most n of it
    timeout: float = TIMEOUT                 # a hang is reported after this
    codes: tuple[int, ...] = (2,)            # test_received_run: the exit codes allowed
    check: Callable | None = None            # test_received_run: check(work, outcome, before, what)
    outside_written: bool = False            # test_received_run: OUTSIDE may change (the user's --out link)


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
    # records without a manifest are not stages of this gb (no layout before manifests is read any more)
    pytest.param(compare_run(("run/gd/summary.json", without_manifest), ("run/svm/svm-gln/result.json", without_manifest),
                             ("run/svm/svm-gln/config.yaml", other_units),
                             expect=("run/gd/summary.json", "no manifest")),
                 id="stages-without-manifest-of-another-model"),
    pytest.param(compare_run(("run/svm/svm-gln/result.json", without_manifest), expect=("run/svm/svm-gln", "no manifest")),
                 id="program-without-manifest"),
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


# ------------------------------------------------------------------ a run directory you can hand to a colleague
# Nothing in a received run or sweep directory is executed (model.pt is read with
# torch.load(weights_only=True), arrays never with allow_pickle, YAML never with python tags);
# nothing outside it is written, truncated or removed (a symlink inside is refused: one line naming
# the path and "symlink", the target keeps its bytes and mtime); no result is lost without being
# asked (--force); a run and a sweep directory know what they are (gb-run.json); bounded work; every
# refusal comes before the directory or its lock is created.


class _Payload:
    """Pickles as a call: unpickling it runs fn(*args) (what a hostile model.pt or .npz may hold)."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _touch_marker():
    return _Payload(os.system, ("touch MARKER",))


def checkpoint_with_payload(data: bytes) -> bytes:
    """The real checkpoint (its tensors kept) with one more entry: a call of os.system."""
    import torch

    state = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    state = dict(state) if isinstance(state, dict) else {"state": state}
    state["extra"] = _touch_marker()
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def pickle_open_payload(data: bytes) -> bytes:
    """A bare pickle (not torch's zip format) whose loading opens MARKER for writing."""
    return pickle.dumps(_Payload(builtins.open, ("MARKER", "w")), protocol=2)


def _npz_arrays(data: bytes) -> dict:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def npz_object_array(data: bytes) -> bytes:
    """The same arrays, but val_out an object array (a pickle inside the npz) holding the payload."""
    arrays = _npz_arrays(data)
    evil = np.empty(arrays["val_out"].shape, dtype=object)
    evil[...] = 0.0
    evil.flat[0] = _touch_marker()
    arrays["val_out"] = evil
    buf = io.BytesIO()
    np.savez(buf, **arrays)   # np.save pickles object arrays
    return buf.getvalue()


def npz_wrong_shape(data: bytes) -> bytes:
    arrays = _npz_arrays(data)
    arrays["train_out"] = np.zeros(3)
    arrays["val_out"] = np.zeros((7, 7))
    return npz_bytes(**arrays)


def npz_strings(data: bytes) -> bytes:
    arrays = _npz_arrays(data)
    arrays["val_out"] = np.array(["x"] * len(arrays["val_out"]))
    return npz_bytes(**arrays)


def set_json(**kv) -> Callable[[bytes], bytes]:
    def f(data: bytes) -> bytes:
        rec = json.loads(data)
        rec.update(kv)
        return json.dumps(rec).encode()
    return f


def _fifo(rel: str) -> Callable[[Path], None]:
    def setup(work: Path) -> None:
        path = work / rel
        _remove(path)
        os.mkfifo(path)
    return setup


def _tables_outside(link_file: bool) -> Callable[[Path], None]:
    """plotdir/tables moved OUTSIDE and linked back (the folder, or each file)."""
    def setup(work: Path) -> None:
        tables, target = work / "plotdir" / "tables", outside_of(work) / "tables"
        shutil.move(str(tables), str(target))
        if link_file:
            tables.mkdir()
            for f in target.iterdir():
                os.symlink(f, tables / f.name)
        else:
            os.symlink(target, tables)
    return setup


def _received(*args: str, config=None, **kw) -> Case:
    """A command on a copy of a finished base run (./run); the base run's lock file is removed, so
    that a refusal must leave the whole tree (dotfiles included) as it was."""
    corrupt = (("run/.gb.lock", None),) + tuple(kw.pop("corrupt", ()))
    return Case(args, config=config, corrupt=corrupt, **kw)


NO_LOCK = (("run/.gb.lock", None),)
VICTIM = b"precious: not gb's file\n"
OUTSIDE = (("victim.txt", VICTIM), ("folder/a.txt", b"not gb's\n"), ("folder/sub/b.txt", b"not gb's either\n"))
SYMLINK = ("symlink",)
KIND_SWEEP = ("sweep",)
GLN_CFG, RELU_CFG, SWEEP_CFG = BASE_RUNS["gln"], BASE_RUNS["relu"], BASE_RUNS["sweep"]
MB = 1_000_000
SEVEN_AXES = {k: list(range(1, 11)) for k in ("training.epochs", "training.batch_seed", "contexts.seed",
                                              "dataset.data_seed", "model.init_seed", "training.lr",
                                              "training.momentum")}   # 10**7 points


def linked(args: tuple[str, ...], links, expect, run: str | None = "gln", config=None, **kw) -> Case:
    """`args` on a run (a copy of a base run, or a fresh directory) holding symlinks to OUTSIDE."""
    corrupt = (NO_LOCK if run in ("gln", "relu") else ()) + tuple(kw.pop("corrupt", ()))
    return Case(tuple(args), config=config, run=run, links=tuple(links), outside_files=OUTSIDE, corrupt=corrupt,
                expect=(*expect, "symlink"), unwritten=kw.pop("unwritten", ("MARKER", "runs")), **kw)


HANDED = [
    # ---- A. nothing in a run directory is executed
    pytest.param(_received("fit-svm", "cfg.yaml", "-q", "--out", "run", "--objective", "svm-lc", config=RELU_CFG,
                           run="relu", corrupt=(("run/gd/model.pt", checkpoint_with_payload),),
                           expect=("model.pt",), unwritten=("run/svm", "MARKER")), id="model-pt-os-system-payload"),
    pytest.param(_received("fit-svm", "cfg.yaml", "-q", "--out", "run", "--objective", "svm-lc", config=RELU_CFG,
                           run="relu", corrupt=(("run/gd/model.pt", pickle_open_payload),),
                           expect=("model.pt",), unwritten=("run/svm", "MARKER")), id="model-pt-bare-pickle-open"),
    pytest.param(_received("compare", "run", run="gln", corrupt=(("run/gd/predictions.npz", npz_object_array),),
                           expect=("run/gd/predictions.npz",), unwritten=("run/tables", "MARKER")),
                 id="gd-predictions-object-array"),
    pytest.param(_received("compare", "run", run="gln",
                           corrupt=(("run/svm/svm-gln/predictions.npz", npz_object_array),),
                           expect=("run/svm/svm-gln/predictions.npz",), unwritten=("run/tables", "MARKER")),
                 id="svm-predictions-object-array"),
    pytest.param(_received("compare", "run", run="gln",
                           corrupt=(("run/gd/config.yaml", b'!!python/object/apply:os.system ["touch MARKER"]\n'),),
                           expect=("run/gd/config.yaml",), unwritten=("run/tables", "MARKER")),
                 id="gd-config-python-tag"),
    pytest.param(gd(config='!!python/object/apply:os.system ["touch MARKER"]\n', expect=("cfg.yaml",),
                    unwritten=("runs", "MARKER")), id="cli-config-python-tag"),
    pytest.param(gd(config=YAML_HEAD + 'model: !!python/object/apply:builtins.open ["MARKER", "w"]\n',
                    expect=("cfg.yaml",), unwritten=("runs", "MARKER")), id="cli-config-nested-python-tag"),
    # ---- B. symlinks inside a run or sweep directory: refused, their targets untouched
    pytest.param(linked(("train-gd", "cfg.yaml", "-q", "--out", "run"), (("run/.gb.lock", "@/victim.txt"),),
                        ("run/.gb.lock",), run=None, config=GLN_CFG), id="link-gb-lock-train-gd"),
    pytest.param(linked(("fit-svm", "cfg.yaml", "-q", "--out", "run", "--objective", "svm-l2"),
                        (("run/.gb.lock", "@/victim.txt"),), ("run/.gb.lock",), config=GLN_CFG),
                 id="link-gb-lock-fit-svm"),
    pytest.param(linked(("compare", "run"), (("run/.gb.lock", "@/victim.txt"),), ("run/.gb.lock",)),
                 id="link-gb-lock-compare"),
    pytest.param(linked(("sweep", "cfg.yaml", "-q", "--out", "out"), (("out/.sweep.lock", "@/victim.txt"),),
                        ("out/.sweep.lock",), run=None, config=SWEEP_CFG), id="link-sweep-lock"),
    pytest.param(linked(("train-gd", "cfg.yaml", "-q", "--out", "run", "--force"), (("run/svm", "@/folder"),),
                        ("run/svm",), config=GLN_CFG), id="link-svm-train-gd-force"),
    pytest.param(linked(("fit-svm", "cfg.yaml", "-q", "--out", "run"), (("run/svm", "@/folder"),), ("run/svm",),
                        config=GLN_CFG), id="link-svm-fit-svm"),
    pytest.param(linked(("compare", "run"), (("run/svm", "@/folder"),), ("run/svm",)), id="link-svm-compare"),
    pytest.param(linked(("fit-svm", "cfg.yaml", "-q", "--out", "run", "--force"), (("run/svm/svm-gln", "@/folder"),),
                        ("run/svm/svm-gln",), config=GLN_CFG), id="link-svm-gln-fit-svm-force"),
    pytest.param(linked(("fit-svm", "cfg.yaml", "-q", "--out", "run", "--objective", "svm-l2"),
                        (("run/svm/svm-l2", "@/folder"),), ("run/svm/svm-l2",), config=GLN_CFG),
                 id="link-new-objective-dir"),
    pytest.param(linked(("train-gd", "cfg.yaml", "-q", "--out", "run", "--force"), (("run/gd", "@/folder"),),
                        ("run/gd",), config=GLN_CFG), id="link-gd-train-gd-force"),
    pytest.param(linked(("train-gd", "cfg.yaml", "-q", "--out", "run"), (("run/gd", "@/folder"),), ("run/gd",),
                        run=None, config=GLN_CFG), id="link-gd-fresh-run"),
    pytest.param(linked(("compare", "run"), (("run/tables", "@/folder"),), ("run/tables",)), id="link-tables-compare"),
    pytest.param(linked(("compare", "run"), (("run/figures", "@/folder"),), ("run/figures",)),
                 id="link-figures-compare"),
    pytest.param(linked(("plot", "plotdir"), (("plotdir/figures", "@/folder"),), ("plotdir/figures",), run=None,
                        plot_tables=True), id="link-figures-plot"),
    pytest.param(Case(("plot", "plotdir"), config=None, plot_tables=True, setup=_tables_outside(link_file=True),
                      expect=("plotdir/tables/", "symlink"), unwritten=("plotdir/figures",)), id="link-table-files-plot"),
    pytest.param(Case(("plot", "plotdir"), config=None, plot_tables=True, setup=_tables_outside(link_file=False),
                      expect=("plotdir/tables", "symlink"), unwritten=("plotdir/figures",)), id="link-tables-dir-plot"),
    pytest.param(linked(("train-gd", "cfg.yaml", "-q", "--out", "run", "--force"),
                        (("run/gd/summary.json", "@/victim.txt"),), ("run/gd/summary.json",), config=GLN_CFG),
                 id="link-summary-json-train-gd-force"),
    pytest.param(linked(("fit-svm", "cfg.yaml", "-q", "--out", "run", "--objective", "svm-lc"),
                        (("run/gd/model.pt", "@/victim.txt"),), ("run/gd/model.pt",), run="relu", config=RELU_CFG),
                 id="link-model-pt-fit-svm"),
    pytest.param(linked(("fit-svm", "cfg.yaml", "-q", "--out", "run", "--force"),
                        (("run/svm/svm-gln/result.json", "@/victim.txt"),), ("run/svm/svm-gln/result.json",),
                        config=GLN_CFG), id="link-result-json-fit-svm-force"),
    pytest.param(linked(("train-gd", "cfg.yaml", "-q", "--out", "run"), (("run/gb-run.json", "@/victim.txt"),),
                        ("run/gb-run.json",), run=None, config=GLN_CFG), id="link-marker-train-gd"),
    pytest.param(linked(("sweep", "cfg.yaml", "-q", "--out", "run"), (("run/points/{point}/log.txt", "@/victim.txt"),),
                        ("log.txt",), run="sweep", config=SWEEP_CFG,
                        corrupt=(("run/points/{point}/tables", None),)),   # the point is rerun: it would log
                 id="link-sweep-point-log"),
    pytest.param(linked(("sweep", "cfg.yaml", "-q", "--out", "run"), (("run/points/{point}", "@/folder"),),
                        ("run/points/",), run="sweep", config=SWEEP_CFG), id="link-sweep-point-dir"),
    pytest.param(linked(("sweep", "cfg.yaml", "-q", "--out", "run"), (("run/solves", "@/folder"),), ("run/solves",),
                        run="sweep", config=SWEEP_CFG), id="link-sweep-solves-dir"),
    pytest.param(linked(("sweep", "cfg.yaml", "-q", "--out", "run"), (("run/solves/{key}.lock", "@/victim.txt"),),
                        ("run/solves/", ".lock"), run="sweep", config=SWEEP_CFG), id="link-sweep-solve-lock"),
    # ---- C. a run directory and a sweep directory know what they are
    pytest.param(Case(("train-gd", "cfg.yaml", "-q", "--out", "run"), config=GLN_CFG, run="sweep",
                      expect=("run", KIND_SWEEP)), id="train-gd-into-sweep-dir"),
    pytest.param(Case(("fit-svm", "cfg.yaml", "-q", "--out", "run"), config=GLN_CFG, run="sweep",
                      expect=("run", KIND_SWEEP)), id="fit-svm-into-sweep-dir"),
    pytest.param(_received("sweep", "cfg.yaml", "-q", "--out", "run", config=SWEEP_CFG, run="gln", reports=True,
                           expect=("run", "run directory")), id="sweep-into-finished-run"),
    pytest.param(Case(("train-gd", "cfg.yaml", "-q", "--out", "run"), config=GLN_CFG, run="sweep",
                      corrupt=(("run/gb-run.json", None),), expect=("run", KIND_SWEEP)), id="train-gd-into-legacy-sweep"),
    pytest.param(_received("sweep", "cfg.yaml", "-q", "--out", "run", config=SWEEP_CFG, run="gln", reports=True,
                           corrupt=(("run/gb-run.json", None),), expect=("run", "run directory")),
                 id="sweep-into-legacy-run"),
    pytest.param(gd("--out", "run", config=GLN_CFG, files=(("run/gb-run.json", GARBAGE),), expect=("gb-run.json",)),
                 id="marker-garbage"),
    pytest.param(_received("fit-svm", "cfg.yaml", "-q", "--out", "run", "--objective", "svm-l2", config=GLN_CFG,
                           run="gln", corrupt=(("run/gb-run.json", b"[1, 2]\n"),), expect=("gb-run.json",)),
                 id="marker-a-list"),
    pytest.param(_received("compare", "run", run="gln", corrupt=(("run/gb-run.json", b'{"kind": "notebook"}\n'),),
                           expect=("gb-run.json",), unwritten=("run/tables",)), id="marker-unknown-kind"),
    pytest.param(gd("--out", "run", config=GLN_CFG, dirs=("run/gb-run.json",), expect=("gb-run.json",)),
                 id="marker-a-directory"),
    pytest.param(_received("train-gd", "cfg.yaml", "-q", "--out", "run", config=GLN_CFG, run="gln",
                           corrupt=(("run/gb-run.json", b'{"kind": "sweep"}\n'),), expect=("run", KIND_SWEEP)),
                 id="marker-sweep-over-run-files"),
    pytest.param(_received("train-gd", "cfg.yaml", "-q", "--out", "run", config=GLN_CFG, run="gln",
                           dirs=("run/points/0123456789",), expect=("run", ("mixed", "both"))),
                 id="mixed-points-and-gd-train-gd"),
    pytest.param(_received("sweep", "cfg.yaml", "-q", "--out", "run", config=SWEEP_CFG, run="gln",
                           dirs=("run/points/0123456789",), expect=("run", ("mixed", "both"))),
                 id="mixed-points-and-gd-sweep"),
    pytest.param(gd(config={"grid": {"model.hidden_units": [2, 3]}}, expect=("grid", "gb sweep")),
                 id="grid-config-to-train-gd"),
    pytest.param(svm(config={"svm": {"objectives": ["svm-gln"]}, "zip": {"contexts.seed": [1, 2]}},
                     expect=("zip", "gb sweep")), id="zip-config-to-fit-svm"),
    # ---- D. bounded work, bounded messages
    pytest.param(sweep(config={"grid": SEVEN_AXES}, expect=("grid", ("10,000,000", "10000000", "10,000", "10000")),
                       timeout=300), id="grid-ten-million-points"),
    pytest.param(sweep(config={"grid": {"contexts.seed": [1, 2]}, "zip": {"contexts.seed": [3, 4]}},
                       expect=("contexts.seed",)), id="key-in-grid-and-zip"),
    pytest.param(gd(config={"name": "Q" * MB}, expect=("name",), max_line=500, quote=("Q", 250)), id="name-1mb"),
    pytest.param(sweep(config={"grid": {"model.kind": ["Q" * MB]}}, expect=("model.kind",), max_line=500,
                       quote=("Q", 250)), id="grid-value-1mb"),
    pytest.param(gd("--set", "model.kind=" + "Q" * 100_000, expect=("model.kind",), max_line=500, quote=("Q", 250)),
                 id="set-value-100k"),
    # ---- E. refusals before the run directory or its lock exists
    pytest.param(gd(config={"training": {"device": "cuda"}}, expect=("training.device",)), id="device-cuda"),
    pytest.param(gd("--out", "fresh/run", config={"training": {"device": "cuda"}}, expect=("training.device",),
                    unwritten=("runs", "fresh")), id="device-cuda-fresh-out"),
    pytest.param(_received("train-gd", "cfg.yaml", "-q", "--out", "run", "--force",
                           config=deep_merge(GLN_CFG, {"training": {"device": "cuda"}}), run="gln",
                           expect=("training.device",)), id="device-cuda-on-finished-run"),
    pytest.param(_received("fit-svm", "cfg.yaml", "-q", "--out", "run", "--objective", "svm-lc", config=RELU_CFG,
                           run="relu", corrupt=(("run/gd/model.pt", truncate),), expect=("model.pt",),
                           unwritten=("run/svm",)), id="model-pt-truncated-no-lock"),
    pytest.param(_received("fit-svm", "cfg.yaml", "-q", "--out", "run", "--objective", "svm-lc", config=RELU_CFG,
                           run="gln", expect=("model.kind",)), id="relu-config-on-gln-run"),
    # ---- F. corrupt or foreign files of a received run
    pytest.param(_received("compare", "run", run="gln", corrupt=(("run/gd/predictions.npz", npz_wrong_shape),),
                           expect=("run/gd/predictions.npz",), unwritten=("run/tables",)), id="gd-predictions-wrong-shape"),
    pytest.param(_received("compare", "run", run="gln", corrupt=(("run/gd/predictions.npz", npz_strings),),
                           expect=("run/gd/predictions.npz",), unwritten=("run/tables",)), id="gd-predictions-strings"),
    pytest.param(_received("compare", "run", run="gln",
                           corrupt=(("run/svm/svm-gln/result.json", set_json(certified="yes")),),
                           expect=("run/svm/svm-gln/result.json", "certified"), unwritten=("run/tables",)),
                 id="result-certified-yes"),
    pytest.param(_received("compare", "run", run="gln",
                           corrupt=(("run/svm/svm-gln/result.json", set_json(objective="2.65")),),
                           expect=("run/svm/svm-gln/result.json", "objective"), unwritten=("run/tables",)),
                 id="result-objective-string"),
    pytest.param(_received("compare", "run", run="gln",
                           corrupt=(("run/svm/svm-gln/result.json", set_json(status="splendid")),),
                           expect=("run/svm/svm-gln/result.json", "status"), unwritten=("run/tables",)),
                 id="result-status-unknown"),
    pytest.param(_received("compare", "run", run="gln",
                           corrupt=(("run/gd/summary.json", set_json(train_error=1e308, val_error=-3.0)),),
                           expect=("run/gd/summary.json", ("train_error", "val_error")), unwritten=("run/tables",)),
                 id="summary-errors-out-of-range"),
    pytest.param(_received("compare", "run", run="gln", corrupt=(("run/gd/summary.json", set_json(status=["ok"])),),
                           expect=("run/gd/summary.json", "status"), unwritten=("run/tables",)), id="summary-status-list"),
    pytest.param(_received("compare", "run", run="gln", corrupt=(("run/gd/config.yaml", b" " * (11 * MB)),),
                           expect=("run/gd/config.yaml",), unwritten=("run/tables",)), id="gd-config-11mb-spaces"),
    pytest.param(_received("compare", "run", run="gln", setup=_fifo("run/gd/summary.json"), timeout=300,
                           expect=("run/gd/summary.json",), unwritten=("run/tables",)), id="fifo-summary-compare"),
    pytest.param(_received("fit-svm", "cfg.yaml", "-q", "--out", "run", "--objective", "svm-lc", config=RELU_CFG,
                           run="relu", setup=_fifo("run/gd/summary.json"), timeout=300, expect=("run/gd",),
                           unwritten=("run/svm",)), id="fifo-summary-fit-svm"),
    pytest.param(sweep("--out", "afile/sub", config=SWEEP_CFG, files=(("afile", "keep me\n"),), expect=("--out", "afile")),
                 id="sweep-out-below-a-file"),
    pytest.param(svm("--out", "afile/sub", config=GLN_CFG, files=(("afile", "keep me\n"),), expect=("--out", "afile")),
                 id="fit-svm-out-below-a-file"),
]
CASES += HANDED


# ---- received directories where a command may succeed: what it must never do


def _unchanged(work: Path, outcome: "Outcome", before: dict, what: str) -> None:
    after = _tree(work)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"read only, but files were written or changed: {changed}\n{what}"


def _prints_sweep_tables(work: Path, outcome: "Outcome", before: dict, what: str) -> None:
    assert "svm-gln" in outcome.stdout and "gd-gln" in outcome.stdout, f"the aggregated tables are not shown\n{what}"
    _unchanged(work, outcome, before, what)


def _trained_through_link(work: Path, outcome: "Outcome", before: dict, what: str) -> None:
    assert (work / "linked").is_symlink(), what
    summary = outside_of(work) / "real" / "gd" / "summary.json"
    assert json.loads(summary.read_text())["status"] == "ok", what


def _foreign_point_kept(work: Path, outcome: "Outcome", before: dict, what: str) -> None:
    keep = work / "run" / "points" / "not-a-point" / "keep.txt"
    assert keep.is_file() and keep.read_bytes() == b"mine\n", f"a folder that is not gb's was changed\n{what}"


def _failed_json_replaced(work: Path, outcome: "Outcome", before: dict, what: str) -> None:
    for failed in (work / "run" / "points").glob("*/failed.json"):
        assert isinstance(json.loads(failed.read_text()), dict), f"{failed} is still not a record\n{what}"


RECEIVED = [
    pytest.param(_received("compare", "run", run="gln", corrupt=(("run/gd/model.pt", checkpoint_with_payload),),
                           expect=("model.pt",), codes=(0, 1, 2), unwritten=("MARKER",)), id="gln-payload-compare"),
    pytest.param(_received("fit-svm", "cfg.yaml", "-q", "--out", "run", "--objective", "svm-gln", "--force",
                           config=GLN_CFG, run="gln", corrupt=(("run/gd/model.pt", checkpoint_with_payload),),
                           expect=("model.pt",), codes=(0, 2), unwritten=("MARKER",)), id="gln-payload-fit-svm-gln"),
    pytest.param(Case(("compare", "run"), config=None, run="sweep", expect=(), codes=(0,), check=_prints_sweep_tables),
                 id="compare-sweep-dir-read-only"),
    pytest.param(gd("--out", "linked", config=GLN_CFG, links=(("linked", "@/real"),),
                    outside_files=(("real/.keep", b""),), expect=(), codes=(0,), outside_written=True,
                    check=_trained_through_link), id="out-itself-a-symlink"),
    pytest.param(Case(("sweep", "cfg.yaml", "-q", "--out", "run"), config=SWEEP_CFG, run="sweep",
                      files=(("run/points/not-a-point/keep.txt", b"mine\n"),), expect=("not-a-point",), codes=(0, 2),
                      check=_foreign_point_kept), id="sweep-point-dir-not-an-id"),
    pytest.param(Case(("sweep", "cfg.yaml", "-q", "--out", "run"), config=SWEEP_CFG, run="sweep",
                      corrupt=(("run/points/{point}/tables", None),),
                      files=(("run/points/{point}/failed.json", b"[1, 2]\n"),), expect=("failed.json",),
                      codes=(0, 1, 2), check=_failed_json_replaced), id="sweep-failed-json-a-list"),
]


# ------------------------------------------------------------------ issue 34: every name, path and number is hostile
# Every command, flag and export target that takes a name or a path; every file gb reads from a
# run; every number a record can hold. Bad input: one line `gb: error: ...` naming the key or file
# and why, exit code 2, nothing written. Read-only commands (`gb runs`, `gb runs show`, `gb verify`)
# on a damaged record: no traceback, and the damaged thing is never reported as fine
# (test_i34_read_only). Cases gb gets wrong today are xfail(strict) with the bug in `reason`.

LONG_NAME = "a" * 10_000   # a path longer than PATH_MAX (4096) and NAME_MAX (255)
ESC = "\x1b[31mred"         # an ANSI escape: the error line shows it escaped (\x1b), never raw
MARKUP = "m[/b]"            # rich markup: shown as text, never a MarkupError
NOT_A_DIR = ("not a directory", "not a folder", "no such", "not found", "no run", "does not exist", "exists and is not")
FINE = ("complete", "solved", "ok", "optimal")   # what `gb runs` says of a run whose records are sound
HUGE = 10 ** 35            # an integer no size, count or seed of gb can be (int64 overflows at ~9.2e18)
DEEP_JSON = b"[" * 100_000 + b"]" * 100_000   # JSON nested 100,000 deep (json.loads recurses)


def _bug(reason: str):
    """A case gb gets wrong today: expected to fail on one of its own assertions (a base run that
    could not be made, or any other error, still fails the case)."""
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"BUG: {reason}")


def _deep_tree(rel: str, depth: int = 100) -> Callable[[Path], None]:
    """`depth` nested folders `d/d/...` below work/`rel`, made without recursion and without chdir
    (the cases are prepared on threads: the process's cwd is shared). 100 levels: deeper than gb's
    64, shallow enough for pytest's recursive cleanup."""
    def setup(work: Path) -> None:
        fd = os.open(work / rel, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for _ in range(depth):
                os.mkdir("d", dir_fd=fd)
                nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = nxt
        finally:
            os.close(fd)
    return setup


def _edit_table(rel: str, column: str, value: str) -> Callable[[Path], None]:
    """Set `column` of every row of the CSV table work/`rel` to the text `value`."""
    def setup(work: Path) -> None:
        import csv

        path = work / rel
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert rows and column in rows[0], f"{rel} has no column {column}"
        for r in rows:
            r[column] = value
        with open(path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return setup


def _npz_set(**arrays) -> Callable[[bytes], bytes]:
    """The same npz with some arrays replaced (or added)."""
    def f(data: bytes) -> bytes:
        out = _npz_arrays(data)
        out.update(arrays)
        return npz_bytes(**out)
    return f


def _npz_scaled(name: str, factor: float) -> Callable[[bytes], bytes]:
    def f(data: bytes) -> bytes:
        out = _npz_arrays(data)
        with np.errstate(all="ignore"):
            out[name] = out[name] * factor
        return npz_bytes(**out)
    return f


def _compact_claims(**claims) -> Callable[[bytes], bytes]:
    """A compact solution whose `meta` JSON claims these values."""
    def f(data: bytes) -> bytes:
        out = _npz_arrays(data)
        meta = json.loads(str(out["meta"]))
        meta["claims"].update(claims)
        out["meta"] = np.array(json.dumps(meta))
        return npz_bytes(**out)
    return f


def _compact_meta(text: str) -> Callable[[bytes], bytes]:
    def f(data: bytes) -> bytes:
        out = _npz_arrays(data)
        out["meta"] = np.array(text)
        return npz_bytes(**out)
    return f


LOOP = (("loop1", "loop2"), ("loop2", "loop1"))   # a symlink loop in the working directory
DANGLING = (("dangling", "no-such-target"),)
EXPORT_WRITES = ("run/mlflow.db", "run/mlflow-artifacts", "mlflow.db", "mlflow-artifacts", "mlruns")
C_GLN = "run/svm/svm-gln/compact.npz"
R_GLN = "run/svm/svm-gln/result.json"
SUMMARY = "run/gd/summary.json"


def _i34_export(*args: str, **kw) -> Case:
    """`gb runs export mlflow --dir run ...` on a copy of the finished GLN run: refused, nothing written."""
    return _received("runs", "export", "mlflow", "--dir", "run", *args, run="gln",
                     unwritten=kw.pop("unwritten", EXPORT_WRITES), **kw)


def _i34_verify(*args: str, **kw) -> Case:
    return _received("verify", "run", *args, run="gln", **kw)


I34_CASES = [
    # ---- names and paths of the read-only commands: newline, ANSI escape, rich markup, file, FIFO, links
    pytest.param(Case(("runs", "show", "no\nsuch"), config=None, expect=("RUN", "no such", NOT_A_DIR)),
                 id="i34-runs-show-newline"),
    pytest.param(Case(("runs", "show", ESC), config=None, expect=("\\x1b[31mred", NOT_A_DIR)), id="i34-runs-show-ansi"),
    pytest.param(Case(("runs", "show", MARKUP), config=None, expect=(MARKUP, NOT_A_DIR)), id="i34-runs-show-markup"),
    pytest.param(Case(("runs", "show", "afile"), config=None, files=(("afile", VICTIM),), expect=("afile", NOT_A_DIR)),
                 id="i34-runs-show-a-file"),
    pytest.param(Case(("runs", "show", "fifo"), config=None, setup=_fifo("fifo"), timeout=300,
                      expect=("fifo", NOT_A_DIR)), id="i34-runs-show-fifo"),
    pytest.param(Case(("runs", "show", "loop1"), config=None, links=LOOP, expect=("loop1",)), id="i34-runs-show-symlink-loop"),
    pytest.param(Case(("runs", "show", ""), config=None, run="gln", corrupt=NO_LOCK, expect=("RUN",)),
                 id="i34-runs-show-empty"),
    pytest.param(_received("runs", "diff", "run", "dangling", run="gln", links=DANGLING, expect=("dangling", NOT_A_DIR)),
                 id="i34-runs-diff-dangling-link"),
    pytest.param(_received("runs", "diff", "run", "", run="gln", expect=("B",)), id="i34-runs-diff-empty"),
    pytest.param(Case(("runs", "--dir", "afile"), config=None, files=(("afile", VICTIM),),
                      expect=(("--dir", "afile"), NOT_A_DIR)), id="i34-runs-dir-a-file"),
    pytest.param(Case(("runs", "--dir", "fifo"), config=None, setup=_fifo("fifo"), timeout=300,
                      expect=(("--dir", "fifo"), NOT_A_DIR)), id="i34-runs-dir-fifo"),
    pytest.param(Case(("compare", "no\nsuch"), config=None, expect=("no such", NOT_A_DIR)), id="i34-compare-newline"),
    pytest.param(Case(("compare", MARKUP), config=None, expect=(MARKUP, NOT_A_DIR)), id="i34-compare-markup"),
    pytest.param(Case(("plot", ESC), config=None, expect=("\\x1b[31mred",)), id="i34-plot-ansi"),
    pytest.param(Case(("plot", "loop1"), config=None, links=LOOP, expect=("loop1",)), id="i34-plot-symlink-loop"),
    pytest.param(Case(("verify", MARKUP), config=None, expect=("DIR", MARKUP, NOT_A_DIR)), id="i34-verify-markup"),
    pytest.param(Case(("verify", "fifo"), config=None, setup=_fifo("fifo"), timeout=300, expect=("DIR", "fifo")),
                 id="i34-verify-fifo"),
    pytest.param(Case(("verify", "dangling"), config=None, links=DANGLING, expect=("DIR", "dangling")),
                 id="i34-verify-dangling-link"),
    pytest.param(_received("verify", "", run="gln", expect=("DIR",)), id="i34-verify-empty"),
    # ---- names longer than the system takes: bad input (exit 2, one short line), not an I/O failure (exit 1)
    pytest.param(gd("--out", LONG_NAME, expect=("--out", "too long"), max_line=1000), id="i34-train-gd-out-10k"),
    pytest.param(Case(("sweep", "cfg.yaml", "-q", "--dry-run", "--out", LONG_NAME),
                      config={"grid": {"model.hidden_units": [2, 3]}}, expect=("--out", "too long"), max_line=1000),
                 id="i34-sweep-dry-run-out-10k"),
    pytest.param(Case(("config", "show", LONG_NAME), config=None, expect=("too long",), max_line=1000),
                 id="i34-config-show-10k"),
    pytest.param(Case(("compare", LONG_NAME), config=None, expect=("too long",), max_line=1000), id="i34-compare-10k"),
    pytest.param(Case(("plot", LONG_NAME), config=None, expect=("too long",), max_line=1000), id="i34-plot-10k"),
    pytest.param(Case(("verify", LONG_NAME), config=None, expect=("too long",), max_line=1000), id="i34-verify-10k"),
    pytest.param(Case(("runs", "show", LONG_NAME), config=None, expect=("too long",), max_line=1000),
                 id="i34-runs-show-10k"),
    pytest.param(Case(("runs", "--dir", LONG_NAME), config=None, expect=("--dir", "too long"), max_line=1000),
                 id="i34-runs-dir-10k"),
    pytest.param(Case(("runs", "export", "mlflow", "--dir", LONG_NAME), config=None, expect=("--dir", "too long"),
                      max_line=1000), id="i34-export-dir-10k"),
    # ---- gb verify: --tol and --export
    *[pytest.param(_i34_verify("--tol", tol, expect=("--tol",)), id=f"i34-verify-tol-{name}")
      for name, tol in (("0", "0"), ("minus-1", "-1"), ("nan", "nan"), ("inf", "inf"), ("1e400", "1e400"), ("abc", "abc"))],
    pytest.param(_i34_verify("--export", "afile", files=(("afile", VICTIM),), expect=("--export", "afile")),
                 id="i34-verify-export-a-file"),
    pytest.param(_i34_verify("--export", "dangling", links=DANGLING, expect=("--export", "dangling")),
                 id="i34-verify-export-dangling-link"),
    pytest.param(_i34_verify("--export", "dest", links=(("dest/solutions", "@/folder"),), outside_files=OUTSIDE,
                             expect=("dest/solutions", "symlink")), id="i34-verify-export-solutions-a-symlink"),
    pytest.param(_i34_verify("--export", "dest", files=(("dest/solutions", VICTIM),),
                             expect=("dest/solutions", ("not a folder", "not a directory", "Not a directory"))),
                 id="i34-verify-export-solutions-a-file"),
    pytest.param(_i34_verify("--export", "/proc/gb-i34", expect=("--export", "/proc/gb-i34")),
                 id="i34-verify-export-proc"),
    pytest.param(_i34_verify("--export", "", expect=("--export",), unwritten=("solutions",)), id="i34-verify-export-empty"),
    # ---- gb runs export mlflow: experiment names, --dir, tracking URIs
    pytest.param(_i34_export("--experiment", "../x", expect=("--experiment", "../x")), id="i34-export-experiment-dotdot"),
    pytest.param(_i34_export("--experiment", "/abs", expect=("--experiment", "/abs")), id="i34-export-experiment-absolute"),
    pytest.param(_i34_export("--experiment", "", expect=("--experiment",)), id="i34-export-experiment-empty"),
    pytest.param(_i34_export("--experiment", "a\nb", expect=("--experiment",)), id="i34-export-experiment-newline"),
    pytest.param(Case(("runs", "export", "mlflow", "--dir", "q?x"), config=None, dirs=("q?x",),
                      expect=("--dir", "?"), unwritten=("q?x/mlflow.db", "mlflow.db")), id="i34-export-dir-question-mark"),
    pytest.param(Case(("runs", "export", "mlflow", "--dir", "h#x"), config=None, dirs=("h#x",),
                      expect=("--dir", "#"), unwritten=("h#x/mlflow.db", "mlflow.db")), id="i34-export-dir-hash"),
    pytest.param(_i34_export("--tracking-uri", "foo://x", expect=("--tracking-uri", "foo://x")), id="i34-export-uri-foo"),
    pytest.param(_i34_export("--tracking-uri", "http://127.0.0.1:9/", expect=("127.0.0.1:9",), timeout=120),
                 id="i34-export-uri-closed-port"),
    pytest.param(_i34_export("--tracking-uri", "file:mlruns", expect=("file:mlruns",)), id="i34-export-uri-file"),
    pytest.param(_i34_export("--tracking-uri", "sqlite:////proc/gb-i34.db", expect=("/proc/gb-i34.db",), timeout=60),
                 id="i34-export-uri-sqlite-proc"),
    pytest.param(_received("runs", "export", "mlflow", "--dir", "", run="gln", expect=("--dir",),
                           unwritten=EXPORT_WRITES), id="i34-export-dir-empty"),
    # ---- config and data names
    pytest.param(Case(("config", "keys", "training\nlr"), config=None, expect=("SECTION",)), id="i34-config-keys-newline"),
    pytest.param(Case(("config", "keys", ESC), config=None, expect=("SECTION", "\\x1b[31m")), id="i34-config-keys-ansi"),
    pytest.param(Case(("config", "show", "fifo"), config=None, setup=_fifo("fifo"), timeout=300,
                      expect=("fifo", "not a regular file")), id="i34-config-show-fifo"),
    pytest.param(Case(("config", "show", "loop1"), config=None, links=LOOP, expect=("loop1",)),
                 id="i34-config-show-symlink-loop"),
    pytest.param(Case(("data", "verify", "mnist\n"), config=None, expect=("NAME",)), id="i34-data-verify-newline"),
    pytest.param(Case(("data", "fetch", "../mnist"), config=None, expect=("NAME", "'../mnist'")), id="i34-data-fetch-dotdot"),
    pytest.param(Case(("data", "verify", "mnist", "--data-dir", "afile"), config=None, files=(("afile", VICTIM),),
                      expect=(("--data-dir", "afile"), ("not a folder", "not a directory"))),
                 id="i34-data-verify-data-dir-a-file"),
    # ---- numbers the config can hold: refused before any work, never a traceback
    pytest.param(gd("--set", f"training.epochs={HUGE}", expect=("training.epochs",)), id="i34-epochs-1e35"),
    pytest.param(gd("--set", "training.lr=1e308", expect=("training.lr",)), id="i34-lr-1e308"),
    pytest.param(gd("--set", f"model.hidden_units={2 ** 63 - 1}", expect=("model.hidden_units",)),
                 id="i34-hidden-units-2-63"),
    pytest.param(gd("--set", f"contexts.count={HUGE}", expect=("contexts.count",)), id="i34-contexts-count-1e35"),
    pytest.param(gd("--set", f"training.lr_milestones=[{HUGE}]", expect=("training.lr_milestones",)),
                 id="i34-lr-milestones-1e35"),
    pytest.param(gd("--set", f"dataset.train_size={HUGE}", expect=("dataset.train_size",)), id="i34-train-size-1e35"),
    pytest.param(gd("--threads", "0", expect=("--threads",)), id="i34-train-gd-threads-0"),
    pytest.param(svm("--threads", "100000", config=GLN_CFG, expect=("--threads",)), id="i34-fit-svm-threads-100000"),
    pytest.param(svm("--objective", "../x", config=GLN_CFG, expect=("objective", "'../x'")), id="i34-fit-svm-objective-dotdot"),
    pytest.param(svm("--solver", MARKUP, config=GLN_CFG, expect=("--solver", MARKUP)), id="i34-fit-svm-solver-markup"),
    pytest.param(gd("--out", "fifo", setup=_fifo("fifo"), timeout=300, expect=("--out", "fifo")), id="i34-train-gd-out-fifo"),
    pytest.param(gd("--out", "loop1", links=LOOP, expect=("--out", "loop1")), id="i34-train-gd-out-symlink-loop"),
    pytest.param(sweep(config={"grid": {"model.hidden_units": [10 ** 9]}}, expect=("model.hidden_units", MEMORY)),
                 id="i34-sweep-grid-hidden-units-1e9"),
    # ---- damaged records a writing command reads: refused with one line naming the file
    pytest.param(compare_run((SUMMARY, set_json(val_error=NAN)), expect=(SUMMARY, "val_error")),
                 id="i34-compare-summary-val-error-nan"),
    pytest.param(compare_run((R_GLN, set_json(objective=NAN)), expect=(R_GLN, "objective")),
                 id="i34-compare-result-objective-nan"),
    pytest.param(compare_run((R_GLN, set_json(objective=-1e308)), expect=(R_GLN, "objective")),
                 id="i34-compare-result-objective-minus-1e308"),
    pytest.param(compare_run((R_GLN, set_json(objective=10 ** 400)), expect=(R_GLN, "objective")),
                 id="i34-compare-result-objective-1e400-int"),
    pytest.param(compare_run((SUMMARY, DEEP_JSON), expect=(SUMMARY,)), id="i34-compare-summary-deep-json"),
    pytest.param(compare_run((R_GLN, DEEP_JSON), expect=(R_GLN,)), id="i34-compare-result-deep-json"),
    pytest.param(compare_run(("run/gb-run.json", DEEP_JSON), expect=("gb-run.json",)), id="i34-compare-marker-deep-json"),
    pytest.param(_received("compare", "run", run="gln", setup=_fifo("run/gd/metrics.csv"), timeout=300,
                           expect=("run/gd/metrics.csv",), unwritten=("run/tables",)), id="i34-compare-metrics-fifo"),
    pytest.param(_received("compare", "run", run="gln", setup=_fifo(C_GLN), timeout=300, expect=(C_GLN,),
                           unwritten=("run/tables",)), id="i34-compare-compact-fifo"),
    # ---- a folder tree more than 64 deep inside a run: refused with one line, before any work
    pytest.param(_received("compare", "run", run="gln", setup=_deep_tree("run/svm/svm-gln"), unwritten=("run/tables",),
                           expect=("run/svm/svm-gln/d/", "more than 64 deep")), id="i34-deep-tree-compare"),
    pytest.param(_received("plot", "run", run="gln", reports=True, setup=_deep_tree("run"), unwritten=("run/figures",),
                           expect=("run/d/", "more than 64 deep")), id="i34-deep-tree-plot"),
    pytest.param(_received("fit-svm", "cfg.yaml", "-q", "--out", "run", "--objective", "svm-l2", config=GLN_CFG, run="gln",
                           setup=_deep_tree("run/gd"), unwritten=("run/svm/svm-l2",),
                           expect=("run/gd/d/", "more than 64 deep")), id="i34-deep-tree-fit-svm"),
    pytest.param(_received("train-gd", "cfg.yaml", "-q", "--out", "run", "--force", config=GLN_CFG, run="gln",
                           setup=_deep_tree("run"), expect=("run/d/", "more than 64 deep")), id="i34-deep-tree-train-gd-force"),
    pytest.param(_i34_export(setup=_deep_tree("run"), expect=("run/d/", "more than 64 deep")), id="i34-deep-tree-export"),
    # ---- tables and curves gb plot reads
    pytest.param(Case(("plot", "plotdir"), config=None, plot_tables=True,
                      setup=_edit_table("plotdir/tables/errors.csv", "val_error", "1e400"),
                      expect=("plotdir/tables/errors.csv", "val_error"), unwritten=("plotdir/figures",)),
                 id="i34-plot-val-error-1e400"),
    pytest.param(Case(("plot", "plotdir"), config=None, plot_tables=True,
                      setup=_edit_table("plotdir/tables/errors.csv", "hidden_units", "abc"),
                      expect=("plotdir/tables/errors.csv", "hidden_units"), unwritten=("plotdir/figures",)),
                 id="i34-plot-hidden-units-string"),
    pytest.param(Case(("plot", "plotdir"), config=None, plot_tables=True,
                      setup=_edit_table("plotdir/tables/errors.csv", "hidden_units", str(10 ** 41)),
                      expect=("plotdir/tables/errors.csv", "hidden_units"), unwritten=("plotdir/figures",)),
                 id="i34-plot-hidden-units-1e41"),
    pytest.param(Case(("plot", "plotdir"), config=None, plot_tables=True,
                      setup=_edit_table("plotdir/tables/errors.csv", "hidden_units", "-5"),
                      expect=("plotdir/tables/errors.csv", "hidden_units"), unwritten=("plotdir/figures",)),
                 id="i34-plot-hidden-units-negative"),
    pytest.param(_received("plot", "run", run="gln", reports=True,
                           setup=_edit_table("run/gd/metrics.csv", "weight_norm", "x"),
                           expect=("run/gd/metrics.csv", "weight_norm"), unwritten=("run/figures",)),
                 id="i34-plot-metrics-string"),
]
CASES += I34_CASES


# ---- read-only commands on damaged records: no traceback; the damaged thing is never reported as fine


def _json_out(outcome: "Outcome", what: str):
    try:
        return json.loads(outcome.stdout)
    except ValueError:
        raise AssertionError(f"stdout is not the JSON asked for\n{what}") from None


def _runs_not_fine(work: Path, outcome: "Outcome", before: dict, what: str) -> None:
    """`gb runs --dir . -f json`: the damaged ./run is listed, with a status that is not fine."""
    if outcome.returncode == 2:
        return
    rows = [r for r in _json_out(outcome, what) if r.get("run") == "run"]
    assert rows, f"the damaged run is not listed\n{what}"
    assert rows[0]["status"] not in FINE, f"a damaged run reported as {rows[0]['status']!r}: {rows[0]}\n{what}"


def _runs_listed_fine(work: Path, outcome: "Outcome", before: dict, what: str) -> None:
    """`gb runs --dir . -f json`: the sound ./run is still listed, as fine (the deep junk beside it is skipped)."""
    rows = [r for r in _json_out(outcome, what) if r.get("run") == "run"]
    assert rows and rows[0]["status"] in FINE, f"{rows}\n{what}"


def _show_not_fine(work: Path, outcome: "Outcome", before: dict, what: str) -> None:
    if outcome.returncode == 2:
        return
    rec = _json_out(outcome, what)
    assert rec.get("status") not in FINE, f"a damaged run shown as {rec.get('status')!r}: {rec.get('stages')}\n{what}"


def _not_verified(objective: str):
    def check(work: Path, outcome: "Outcome", before: dict, what: str) -> None:
        rows = [r for r in _json_out(outcome, what) if r.get("objective") == objective]
        assert rows, f"no row for {objective}\n{what}"
        assert all(r["verified"] != "yes" for r in rows), f"a damaged {objective} reported as verified: {rows}\n{what}"
        noise = [line for line in outcome.stderr.splitlines() if line.strip() and not line.startswith("gb: ")]
        assert not noise, f"stderr holds more than gb's own lines: {noise[:4]}\n{what}"
    return check


def _i34_runs(*corrupt, setup=None, check=_runs_not_fine, **kw) -> Case:
    return _received("runs", "--dir", ".", "-f", "json", run="gln", corrupt=corrupt, setup=setup, expect=("run",),
                     codes=(0, 2), check=check, **kw)


def _i34_show(*corrupt, setup=None, **kw) -> Case:
    return _received("runs", "show", "run", "-f", "json", run="gln", corrupt=corrupt, setup=setup, expect=("run",),
                     codes=(0, 2), check=_show_not_fine, **kw)


def _i34_verified(*corrupt, setup=None, objective="svm-gln", **kw) -> Case:
    return _received("verify", "run", "-f", "json", run="gln", corrupt=corrupt, setup=setup, expect=("run",),
                     codes=(1,), check=_not_verified(objective), **kw)


INT_400 = 10 ** 400
I34_READ = [
    # gb runs / gb runs show
    pytest.param(_i34_runs((R_GLN, set_json(objective=NAN))), id="i34-runs-result-objective-nan"),
    pytest.param(_i34_runs((R_GLN, set_json(objective=-1e308))), id="i34-runs-result-objective-minus-1e308"),
    pytest.param(_i34_runs((R_GLN, set_json(objective=INT_400))), id="i34-runs-result-objective-1e400-int"),
    pytest.param(_i34_show((SUMMARY, set_json(val_error=INT_400))), id="i34-runs-show-summary-val-error-1e400-int"),
    pytest.param(_i34_show((R_GLN, set_json(rel_gap="tiny"))), id="i34-runs-show-result-rel-gap-string"),
    pytest.param(_i34_runs((R_GLN, DEEP_JSON)), id="i34-runs-result-deep-json"),
    pytest.param(_i34_show(("run/gb-run.json", DEEP_JSON)), id="i34-runs-show-marker-deep-json"),
    pytest.param(_i34_runs(setup=_fifo(SUMMARY), timeout=300), id="i34-runs-summary-fifo"),
    pytest.param(_i34_show(links=((R_GLN, "@/victim.txt"),), outside_files=OUTSIDE), id="i34-runs-show-result-symlink"),
    pytest.param(_i34_runs(("run/gb-run.json", b""),), id="i34-runs-marker-empty"),
    pytest.param(_i34_runs(setup=_deep_tree("."), check=_runs_listed_fine), id="i34-runs-deep-tree-beside-run"),
    # gb verify: exit 1, the program not verified
    pytest.param(_i34_verified((R_GLN, set_json(objective=NAN))), id="i34-verify-result-objective-nan"),
    pytest.param(_i34_verified((R_GLN, set_json(objective=INT_400))), id="i34-verify-result-objective-1e400-int"),
    pytest.param(_i34_verified((R_GLN, set_json(status="failed"))), id="i34-verify-result-status-failed"),
    pytest.param(_i34_verified((R_GLN, DEEP_JSON)), id="i34-verify-result-deep-json"),
    pytest.param(_i34_verified(setup=_fifo(R_GLN), timeout=300), id="i34-verify-result-fifo"),
    pytest.param(_i34_verified((C_GLN, truncate)), id="i34-verify-compact-truncated"),
    pytest.param(_i34_verified((C_GLN, b"")), id="i34-verify-compact-empty"),
    pytest.param(_i34_verified((C_GLN, GARBAGE)), id="i34-verify-compact-binary"),
    pytest.param(_i34_verified(links=((C_GLN, "@/victim.txt"),), outside_files=OUTSIDE), id="i34-verify-compact-symlink"),
    pytest.param(_i34_verified((C_GLN, _npz_set(zeta=np.full((4, 65), NAN)))), id="i34-verify-compact-zeta-nan"),
    pytest.param(_i34_verified((C_GLN, _npz_set(lam_value=np.full(100, -1e308)))), id="i34-verify-compact-lam-minus-1e308"),
    pytest.param(_i34_verified((C_GLN, _npz_set(lam_index=np.full(100, 2 ** 31 - 1, dtype=np.int32)))),
                 id="i34-verify-compact-lam-index-huge"),
    pytest.param(_i34_verified((C_GLN, _npz_set(zeta=np.full((4, 65), "x")))), id="i34-verify-compact-zeta-strings"),
    pytest.param(_i34_verified((C_GLN, _compact_meta("[" * 100_000 + "]" * 100_000))), id="i34-verify-compact-meta-deep"),
    pytest.param(_i34_verified((C_GLN, _compact_claims(objective=INT_400))), id="i34-verify-compact-claim-1e400-int"),
    pytest.param(_i34_verified((C_GLN, _npz_scaled("zeta", 1e308))), id="i34-verify-compact-zeta-1e308"),
    pytest.param(_i34_verified(("run/gd/config.yaml", b"x: " + b"[" * 100_000 + b"]" * 100_000)),
                 id="i34-verify-gd-config-deep-yaml"),
    pytest.param(_i34_verified(setup=_deep_tree("run/svm"), objective="d"), id="i34-verify-deep-tree-in-svm"),
]


# ------------------------------------------------------------------ numbers and words computed, not copied
# What a table shows is computed from the arrays where it can be: a status from the network's
# outputs, a pair of records checked against their predictions' disagreement, a sweep point's
# tables computed again from its records (a point whose files changed since is run again).

LIE = 0.123456789   # no error rate of 200 validation points (a multiple of 0.005)


def npz_nan(key: str) -> Callable[[bytes], bytes]:
    def f(data: bytes) -> bytes:
        arrays = _npz_arrays(data)
        arrays[key] = np.full_like(arrays[key], NAN)
        return npz_bytes(**arrays)
    return f


def npz_complex(data: bytes) -> bytes:
    arrays = _npz_arrays(data)
    arrays["val_out"] = arrays["val_out"] + 1j
    return npz_bytes(**arrays)


def csv_set(predictor: str, column: str, value) -> Callable[[bytes], bytes]:
    """A gb table with one cell of the row of `predictor` replaced."""
    def f(data: bytes) -> bytes:
        head, *rows = data.decode().splitlines()
        cols = head.split(",")
        out = [head]
        for row in rows:
            cells = row.split(",")
            if cells[cols.index("predictor")] == predictor:
                cells[cols.index(column)] = str(value)
            out.append(",".join(cells))
        return ("\n".join(out) + "\n").encode()
    return f


def _rows(path: Path) -> list[dict]:
    import csv

    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _statuses(table: str, **want: str):
    """The run's (or sweep's) errors table gives these predictors these statuses."""
    def check(work: Path, outcome: Outcome, before: dict, what: str) -> None:
        got = {r["predictor"]: r["status"] for r in _rows(work / "run" / "tables" / table)}
        for predictor, status in want.items():
            assert got.get(predictor.replace("_", "-")) == status, f"{got}\n{what}"
    return check


def _failed_point(reason: str):
    """The sweep lists its one point as failed, for this reason."""
    def check(work: Path, outcome: Outcome, before: dict, what: str) -> None:
        rows = _rows(work / "run" / "tables" / "failures.csv")
        assert len(rows) == 1 and rows[0]["status"] == "failed" and reason in rows[0]["message"], f"{rows}\n{what}"
    return check


def _no_lie_left(work: Path, outcome: Outcome, before: dict, what: str) -> None:
    for table in work.glob("run/**/tables/*.csv"):
        assert str(LIE) not in table.read_text(), f"{table} still shows the edited number\n{what}"
    assert "1 points, 0 done, running 1" in outcome.stdout, f"the edited point was not run again\n{what}"


def _retrained(work: Path, outcome: Outcome, before: dict, what: str) -> None:
    point = next(work.glob("run/points/*/gd/summary.json"), None)
    assert point is not None, f"the point's network was not trained again\n{what}"
    assert {r["status"] for r in _rows(work / "run" / "tables" / "errors.csv")} == {"ok", "optimal"}, what


def _warns(*parts: str):
    def check(work: Path, outcome: Outcome, before: dict, what: str) -> None:
        assert all(part in outcome.stderr for part in parts), what
    return check


COMPUTED = [
    # a sweep's points that are not done are not results: `gb compare` on the sweep says so and exits 1
    pytest.param(_received("compare", "run", run="sweep",
                           corrupt=(("run/tables/failures.csv",
                                     b"point,status,stage,message,log\nabc123,failed,train-gd,diverged,\n"),),
                           expect=("run",), codes=(1,), check=_warns("point abc123 (failed)")),
                 id="sweep-compare-with-a-failed-point"),
    pytest.param(_received("compare", "run", run="gln", corrupt=(("run/gd/predictions.npz", npz_nan("val_out")),),
                           expect=("run",), codes=(1,), check=_statuses("errors.csv", gd_gln="diverged")),
                 id="nan-gd-outputs-are-diverged"),
    pytest.param(_received("compare", "run", run="gln", corrupt=(("run/gd/predictions.npz", npz_nan("train_out")),),
                           expect=("run",), codes=(1,), check=_statuses("errors.csv", gd_gln="diverged")),
                 id="nan-gd-train-outputs-are-diverged"),
    pytest.param(_received("compare", "run", run="gln",
                           corrupt=(("run/svm/svm-gln/predictions.npz", npz_nan("val_out")),),
                           expect=("run",), codes=(1,), check=_statuses("errors.csv", svm_gln="unverified")),
                 id="nan-svm-outputs-are-unverified"),
    # a sweep point whose files changed since it finished is run again: its tables come from its records
    pytest.param(_received("sweep", "cfg.yaml", "-q", "--out", "run", config=SWEEP_CFG, run="sweep",
                           corrupt=(("run/points/{point}/tables/errors.csv", csv_set("svm-gln", "val_error", LIE)),),
                           expect=("run",), codes=(0,), check=_no_lie_left), id="sweep-point-table-edited"),
    pytest.param(_received("sweep", "cfg.yaml", "-q", "--out", "run", config=SWEEP_CFG, run="sweep",
                           corrupt=(("run/points/{point}/svm/svm-gln/result.json", set_json(certified=False)),),
                           expect=("run",), codes=(1,), check=_failed_point("not certified")),
                 id="sweep-point-record-uncertified"),
    pytest.param(_received("sweep", "cfg.yaml", "-q", "--out", "run", config=SWEEP_CFG, run="sweep",
                           corrupt=(("run/points/{point}/gd/summary.json", None),),
                           expect=("run",), codes=(0,), check=_retrained), id="sweep-point-summary-removed"),
]


CASES += [
    # records that contradict their own files: refused as a mixed run is
    pytest.param(compare_run(("run/gd/config.yaml", other_units), expect=("run/gd/config.yaml", "not the config")),
                 id="gd-config-edited"),
    pytest.param(compare_run(("run/svm/svm-gln/config.yaml", other_units),
                             expect=("run/svm/svm-gln/config.yaml", "not the config")), id="svm-config-edited"),
    pytest.param(compare_run(("run/svm/svm-gln/result.json", set_json(val_error=0.0)),
                             ("run/gd/summary.json", set_json(val_error=0.0)),
                             expect=("run/svm/svm-gln/result.json", "cannot come from")), id="val-errors-edited"),
    pytest.param(compare_run(("run/gd/predictions.npz", npz_complex), expect=("run/gd/predictions.npz", "complex")),
                 id="gd-outputs-complex"),
]


@pytest.mark.parametrize("case", COMPUTED)
def test_numbers_are_computed_not_copied(case: Case, launched, request):
    """A damaged copy of a finished run or sweep: the status words come from the arrays and records,
    never from a file that says otherwise, and the exit code follows them."""
    test_received_run(case, launched, request)


@pytest.mark.parametrize("case", I34_READ)
def test_i34_read_only(case: Case, launched, request):
    """`gb runs`, `gb runs show`, `gb verify` on a damaged copy of a finished run: never a hang or a
    traceback, nothing written, an allowed exit code (a refusal: one line), and the damaged thing
    never reported as fine (case.check)."""
    outcome, work, before, _, outside_before = launched["cases"][request.node.callspec.id].result()
    what = _allowed_outcome(case, outcome)
    assert _tree(outside_of(work)) == outside_before, f"files outside the working directory changed\n{what}"
    _unchanged(work, outcome, before, what)
    case.check(work, outcome, before, what)


def _allowed_outcome(case: Case, outcome) -> str:
    """What every command on a received or damaged directory must do: finish (no hang), no
    traceback, an exit code the case allows, and a refusal in one line naming what it expects.
    Returns the description of the command and its output for the next assertions."""
    what = shown(case.args, outcome)
    assert outcome.returncode is not None, f"timed out (a hang)\n{what}"
    assert "Traceback" not in outcome.stderr + outcome.stdout, what
    assert outcome.returncode in case.codes, what
    if outcome.returncode == 2:
        _check_error_line(outcome, case.expect, what)
    return what


def _check_length(case: Case, err: str, what: str) -> None:
    if case.max_line is not None:
        assert len(err) < case.max_line, f"an error line of {len(err)} characters\n{what[:2000]}"
    if case.quote is not None:
        ch, n = case.quote
        assert err.count(ch) <= n, f"the error line quotes {err.count(ch)} characters of the value\n{what[:2000]}"



# ------------------------------------------------------------------ running


def _tree(root: Path) -> dict[str, tuple]:
    """Every path under `root`: (mode, mtime_ns, contents) of files, (mode, mtime_ns) of directories."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        rel = str(p.relative_to(root))
        out[rel] = (st.st_mode, st.st_mtime_ns, p.read_bytes()) if p.is_file() else (st.st_mode, st.st_mtime_ns)
    return out


# os.environ as the main thread saw it when the cases were launched: the pool's threads must not
# copy os.environ itself while pytest sets and removes PYTEST_CURRENT_TEST in it (a KeyError, seen in CI)
_LAUNCH_ENV: dict[str, str] = {}


def _snapshot_env() -> None:
    """Called in the main thread before a pool starts."""
    _LAUNCH_ENV.clear()
    _LAUNCH_ENV.update({k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"})


def _env(data_dir: Path) -> dict:
    # a narrow terminal: the error must stay one line however long it is; one torch thread per
    # process (many run at once: oversubscribed thread pools make tiny steps 50x slower)
    base = _LAUNCH_ENV if threading.current_thread() is not threading.main_thread() else os.environ
    return {**base, "GB_DATA_DIR": str(data_dir), "COLUMNS": "60", "PYTHONDONTWRITEBYTECODE": "1",
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
    try:   # a real process forked from one that has imported gb (tests/forked_gb.py)
        p = forked_gb.run(args, work, env or _env(work / "data"), timeout=timeout, umask=umask, memory=memory)
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
    if kind == "sweep":
        steps = [("sweep", "cfg.yaml", "-q", "--out", "run")]
    if kind == "gln":
        steps += [("fit-svm", "cfg.yaml", "-q", "--out", "run"), ("compare", "run")]
    for args in steps:
        o = run_gb(args, work, timeout=TIMEOUT)
        if o.returncode != 0:
            raise RuntimeError(f"making the base {kind} run failed\n{shown(args, o)}")
    return work / "run"


def outside_of(work: Path) -> Path:
    """OUTSIDE: a folder beside the work directory, where the symlinks of a case point."""
    return work.parent / f"{work.name}.outside"


def _fill(rel: str, work: Path) -> str:
    """`rel` with {point} (the copied sweep's point id) and {key} (its solve-cache key) filled in."""
    if "{point}" in rel:
        rel = rel.replace("{point}", next((work / "run" / "points").iterdir()).name)
    if "{key}" in rel:
        rel = rel.replace("{key}", next((work / "run" / "solves").glob("*.npz")).stem)
    return rel


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _prepare_case(case: Case, work: Path, bases: dict[str, Future]) -> None:
    (work / "data").mkdir(exist_ok=True)
    if isinstance(case.config, dict):
        _write(work / "cfg.yaml", dump(full_config(case.config)))
    elif case.config is not None:
        _write(work / "cfg.yaml", case.config)
    if case.run is not None:
        src = bases[case.run].result()
        full = case.reports or case.run == "sweep"
        shutil.copytree(src, work / "run", ignore=None if full else shutil.ignore_patterns("tables", "figures"))
    for d in case.dirs:   # after the copy: folders added to a received run
        (work / d).mkdir(parents=True, exist_ok=True)
    if case.plot_tables:
        shutil.copytree(bases["gln"].result() / "tables", work / "plotdir" / "tables")
    for rel, data in case.files:
        _write(work / _fill(rel, work), data)
    for rel, op in case.corrupt:
        path = work / _fill(rel, work)
        if op is None:
            _remove(path)
        else:
            path.write_bytes(op(path.read_bytes()) if callable(op) else op)
    outside = outside_of(work)
    outside.mkdir(exist_ok=True)
    for rel, data in case.outside_files:
        _write(outside / rel, data)
    for rel, target in case.links:
        path = work / _fill(rel, work)
        _remove(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(outside / target[2:] if target.startswith("@/") else target, path)
    if case.setup is not None:
        case.setup(work)


def _launch_case(case: Case, work: Path, bases: dict[str, Future]):
    _prepare_case(case, work, bases)
    outside = {rel: (work / rel).resolve() for rel in case.outside}
    existed = {rel for rel, p in outside.items() if p.exists()}
    before = _tree(work)
    outside_before = _tree(outside_of(work))
    outcome = run_gb(case.args, work, memory=CASE_MEMORY, timeout=case.timeout)
    return outcome, work, before, {rel: p for rel, p in outside.items() if rel not in existed}, outside_before


# ---- flows: a few commands in sequence in one working directory (status words, reruns, umask)


@dataclass(frozen=True)
class Flow:
    config: dict
    steps: tuple[tuple[str, ...], ...]
    umask: int | None = None
    base: str | None = None                  # copy this finished base run (BASE_RUNS) to ./run first
    before: tuple[tuple[int, Callable[[Path], None]], ...] = ()   # (step index, f(work)): run before that step


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
                               ("train-gd", "cfg.yaml", "-q", "--out", "runs/x", "--set", "model.hidden_units=3",
                                "--force"),
                               ("compare", "runs/x"))),
    "fit-svm-other-model": Flow(full_config({"name": "m", "svm": {"objectives": ["svm-gln"]}}),
                                (("train-gd", "cfg.yaml", "-q", "--out", "runs/m"),
                                 ("fit-svm", "cfg.yaml", "-q", "--out", "runs/m", "--set", "model.hidden_units=3"))),
    "umask-022": Flow(full_config({"name": "u"}), (("train-gd", "cfg.yaml", "-q"),), umask=0o022),
    "umask-077": Flow(full_config({"name": "u"}), (("train-gd", "cfg.yaml", "-q"),), umask=0o077),
}


def _flip(data: bytes) -> bytes:
    i = len(data) // 2
    return data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1:]


def _break_solve_entry(how: str) -> Callable[[Path], None]:
    """Corrupt the copied sweep's one solve-cache entry and remove its point's program and tables,
    so that the rerun asks the cache for it (the corrupted bytes are kept in ./entry.corrupted)."""
    def f(work: Path) -> None:
        run = work / "run"
        entry = next((run / "solves").glob("*.npz"))
        data = entry.read_bytes()
        bad = {"truncated": truncate(data), "empty": b"", "bit-flipped": _flip(data)}[how]
        entry.write_bytes(bad)
        (work / "entry.corrupted").write_bytes(bad)
        for point in (run / "points").iterdir():
            shutil.rmtree(point / "svm")
            shutil.rmtree(point / "tables")
    return f


def _gd(*args: str) -> tuple[str, ...]:
    return ("train-gd", "cfg.yaml", "-q", *args)


def _svm(*args: str) -> tuple[str, ...]:
    return ("fit-svm", "cfg.yaml", "-q", *args)


FLOWS.update({
    # one directory per configuration: --set of what is trained -> runs/<name>-<hash>; svm.* does not move it
    "default-dir": Flow(full_config({"name": "h", "svm": {"objectives": ["svm-gln"]}}),
                        (_gd(), _gd("--set", "model.hidden_units=3"), _svm("--set", "model.hidden_units=3"),
                         _svm("--set", "svm.certify_tol=2e-6"))),
    "already-trained": Flow(full_config({"name": "a"}),
                            (_gd("--out", "runs/a"), _gd("--out", "runs/a"), _gd("--out", "runs/a", "--force"))),
    "already-trained-diverged": Flow(full_config({"name": "d", "training": {"lr": 1.0e6}}),
                                     (_gd("--out", "runs/d"), _gd("--out", "runs/d"))),
    "other-config": Flow(full_config({"name": "o", "svm": {"objectives": ["svm-gln"]}}),
                         (_gd("--out", "runs/o"), _svm("--out", "runs/o"),
                          _gd("--out", "runs/o", "--set", "model.hidden_units=3"),
                          _gd("--out", "runs/o", "--set", "training.epochs=3"),
                          _gd("--out", "runs/o", "--set", "model.hidden_units=3", "--force"))),
    "svm-options": Flow(full_config({"name": "s", "svm": {"objectives": ["svm-gln"]}}),
                        (_gd("--out", "runs/s"), _svm("--out", "runs/s"), _svm("--out", "runs/s"),
                         _svm("--out", "runs/s", "--set", "svm.certify_tol=1e-5"),
                         _svm("--out", "runs/s", "--solver", "ecos"),
                         _svm("--out", "runs/s", "--set", "svm.certify_tol=1e-5", "--force"))),
    **{f"heal-{how}": Flow(BASE_RUNS["sweep"], (("sweep", "cfg.yaml", "-q", "--out", "run"),), base="sweep",
                           before=((0, _break_solve_entry(how)),))
       for how in ("truncated", "empty", "bit-flipped")},
})


def _launch_flow(flow: Flow, work: Path, bases: dict[str, Future]):
    (work / "data").mkdir(parents=True, exist_ok=True)
    _write(work / "cfg.yaml", dump(flow.config))
    if flow.base is not None:
        shutil.copytree(bases[flow.base].result(), work / "run")
    results = []
    for i, args in enumerate(flow.steps):
        for at, f in flow.before:
            if at == i:
                f(work)
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
    _snapshot_env()
    pool = ThreadPoolExecutor(max_workers=(os.cpu_count() or 2) + 2)
    needed = {c.run for c in cases.values() if c.run} | ({"gln"} if any(c.plot_tables for c in cases.values()) else set())
    needed |= {FLOWS[name].base for name in flows if FLOWS[name].base}
    bases = {kind: pool.submit(_make_base, kind, root) for kind in sorted(needed)}
    futures = {"flows": {}, "cases": {}}
    for name in sorted(flows):
        futures["flows"][name] = pool.submit(_launch_flow, FLOWS[name], root / f"flow-{name}", bases)
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


def test_the_payloads_are_live(tmp_path):
    """Positive control of the payload cases: loaded the unsafe way (torch.load with
    weights_only=False, pickle.loads, numpy with allow_pickle=True, yaml's unsafe loader), each
    payload really touches MARKER, so a case that finds no MARKER shows gb did not run it."""
    import torch

    net = torch.nn.Linear(3, 1)
    buf = io.BytesIO()
    torch.save({"state_dict": net.state_dict()}, buf)
    base_npz = io.BytesIO()
    np.savez(base_npz, val_out=np.zeros(4), train_out=np.zeros(4))
    unsafe = {
        "checkpoint": lambda: torch.load(io.BytesIO(checkpoint_with_payload(buf.getvalue())), weights_only=False),
        "bare-pickle": lambda: pickle.loads(pickle_open_payload(b"")),
        "npz-object": lambda: dict(np.load(io.BytesIO(npz_object_array(base_npz.getvalue())), allow_pickle=True)),
        "yaml-tag": lambda: yaml.unsafe_load('!!python/object/apply:os.system ["touch MARKER"]\n'),
    }
    for name, load in unsafe.items():
        work = tmp_path / name
        work.mkdir()
        cwd = os.getcwd()
        os.chdir(work)
        try:
            obj = load()
            if isinstance(obj, dict):
                [v.tolist() for v in obj.values() if isinstance(v, np.ndarray)]   # unpickles the object array
        finally:
            os.chdir(cwd)
        assert (work / "MARKER").exists(), f"the {name} payload did not run when loaded unsafely"


@pytest.mark.parametrize("case", CASES)
def test_bad_input(case: Case, launched, request):
    outcome, work, before, outside, outside_before = launched["cases"][request.node.callspec.id].result()
    what = shown(case.args, outcome)
    err = _check_error_line(outcome, case.expect, what)
    _check_length(case, err, what)
    ext = _tree(outside_of(work))
    changed = sorted(k for k in set(outside_before) | set(ext) if outside_before.get(k) != ext.get(k))
    assert not changed, f"files outside the working directory were written, changed or removed: {changed}\n{what}"
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
        procs = [_popen(("train-gd", "cfg.yaml", "-q", "--out", "runs/two", "--force"), tmp_path) for _ in range(2)]
        outs = [_communicate(p) for p in procs]
        what = "\n".join(shown(("train-gd", "cfg.yaml", "-q", "--out", "runs/two", "--force"), o) for o in outs)
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
    args = ("train-gd", "new.yaml", "-q", "--out", run.name, "--force")   # another config: replaces results
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
    _snapshot_env()
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


# ------------------------------------------------------------------ a run directory you can hand to a colleague


@pytest.mark.parametrize("case", RECEIVED)
def test_received_run(case: Case, launched, request):
    """A received directory on which the command may succeed: it never executes what the directory
    holds, never touches what is outside it, and refuses (if at all) with one line."""
    outcome, work, before, _, outside_before = launched["cases"][request.node.callspec.id].result()
    what = _allowed_outcome(case, outcome)
    for rel in case.unwritten:
        assert not (work / rel).exists(), f"{rel} was written (code from the run directory was executed?)\n{what}"
    if not case.outside_written:
        ext = _tree(outside_of(work))
        assert ext == outside_before, f"files outside the working directory changed\n{what}"
    if case.check is not None:
        case.check(work, outcome, before, what)


def _changed_but_locks(before: dict, after: dict) -> list[str]:
    """Paths written, changed or removed, besides the pid in a lock file that existed before."""
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)
                  and not (Path(k).name in (".gb.lock", ".sweep.lock") and k in before and k in after))


def _tree_after(results: list, work: Path, i: int) -> dict:
    return results[i + 1][2] if i + 1 < len(results) else _tree(work)


def _ok(args, o: Outcome, code: int = 0) -> str:
    what = shown(args, o)
    assert o.returncode is not None and "Traceback" not in o.stderr + o.stdout, what
    assert o.returncode == code, what
    return what


@pytest.mark.parametrize("flow", ["default-dir"])
def test_default_run_dir_per_configuration(flow, launched):
    results, work = _flow(launched, flow)
    for args, o, _ in results:
        _ok(args, o)
    runs = work / "runs"
    names = sorted(p.name for p in runs.iterdir())
    tagged = [n for n in names if n != "h"]
    assert "h" in names and len(tagged) == 1 and re.fullmatch(r"h-[0-9a-f]{8}", tagged[0]), \
        f"want runs/h and runs/h-<8 hex>, got {names}"
    plain = {k: v for k, v in results[1][2].items() if k.startswith("runs/h/")}
    assert plain == {k: v for k, v in results[2][2].items() if k.startswith("runs/h/")}, \
        f"`train-gd --set model.hidden_units=3` changed runs/h\n{shown(*results[1][:2])}"
    cfg_of = lambda d: yaml.safe_load((runs / d / "gd" / "config.yaml").read_text())["model"]["hidden_units"]  # noqa: E731
    assert cfg_of("h") == 2 and cfg_of(tagged[0]) == 3, (cfg_of("h"), cfg_of(tagged[0]))
    assert (runs / tagged[0] / "svm" / "svm-gln" / "result.json").is_file(), \
        f"fit-svm with the same --set did not find {tagged[0]}\n{shown(*results[2][:2])}"
    assert not any(k.startswith("runs/h/svm") for k in results[3][2]), "fit-svm --set model.* wrote into runs/h"
    assert (runs / "h" / "svm" / "svm-gln" / "result.json").is_file(), \
        f"fit-svm --set svm.* did not solve in runs/h\n{shown(*results[3][:2])}"


@pytest.mark.parametrize("flow", ["already-trained", "already-trained-diverged"])
def test_already_trained_is_not_retrained(flow, launched):
    results, work = _flow(launched, flow)
    code = 1 if flow.endswith("diverged") else 0
    _ok(*results[0][:2], code=code)
    args, o, before = results[1]
    what = _ok(args, o, code=code)
    assert "already" in (o.stdout + o.stderr).lower(), f"does not say it is already trained\n{what}"
    changed = _changed_but_locks(before, _tree_after(results, work, 1))
    assert not changed, f"the same config again wrote or changed: {changed}\n{what}"
    if len(results) > 2:   # --force retrains
        args, o, before = results[2]
        what = _ok(args, o)
        after = _tree(work)
        for f in ("runs/a/gd/summary.json", "runs/a/gd/model.pt"):
            assert after[f][1] != before[f][1], f"--force did not retrain ({f} unchanged)\n{what}"


def _refused_unchanged(results, work: Path, steps: tuple[int, ...], expect: tuple) -> None:
    """Each of `steps` refused with one line naming `expect`, and wrote or changed nothing but locks
    (finished results would have been lost)."""
    for i in steps:
        args, o, before = results[i]
        what = shown(args, o)
        _check_error_line(o, expect, what)
        changed = _changed_but_locks(before, _tree_after(results, work, i))
        assert not changed, f"a refusal wrote or changed: {changed}\n{what}"


@pytest.mark.parametrize("flow", ["other-config"])
def test_other_config_needs_force(flow, launched):
    results, work = _flow(launched, flow)
    for args, o, _ in results[:2]:
        _ok(args, o)
    _refused_unchanged(results, work, (2, 3), ("runs/o", "--force"))   # another model, then another training
    args, o, _ = results[4]
    what = _ok(args, o)
    run = work / "runs" / "o"
    assert yaml.safe_load((run / "gd" / "config.yaml").read_text())["model"]["hidden_units"] == 3, what
    assert json.loads((run / "gd" / "summary.json").read_text())["status"] == "ok", what
    assert not (run / "svm" / "svm-gln" / "result.json").exists(), f"the H=2 program survived --force\n{what}"


@pytest.mark.parametrize("flow", ["svm-options"])
def test_solved_programs_are_kept(flow, launched):
    results, work = _flow(launched, flow)
    for args, o, _ in results[:2]:
        _ok(args, o)
    args, o, before = results[2]   # solved with the same config: skipped
    what = _ok(args, o)
    assert "already" in (o.stdout + o.stderr).lower(), f"does not say it is already solved\n{what}"
    changed = _changed_but_locks(before, _tree_after(results, work, 2))
    assert not changed, f"the same config again wrote or changed: {changed}\n{what}"
    _refused_unchanged(results, work, (3, 4), ("svm/svm-gln", "--force"))   # other certify_tol, then solver
    args, o, before = results[5]
    what = _ok(args, o)
    result = "runs/s/svm/svm-gln/result.json"
    assert _tree(work)[result][1] != before[result][1], f"--force did not solve again\n{what}"
    saved = yaml.safe_load((work / "runs" / "s" / "svm" / "svm-gln" / "config.yaml").read_text())
    assert saved["svm"]["certify_tol"] == 1e-5, f"{saved['svm']}\n{what}"


@pytest.mark.parametrize("flow", ["heal-truncated", "heal-empty", "heal-bit-flipped"])
def test_solve_cache_heals(flow, launched):
    """A sweep's solve-cache entry that is truncated, empty or bit-flipped counts as missing: a
    warning names it, the program is solved again, the entry replaced, exit 0."""
    results, work = _flow(launched, flow)
    (args, o, _), = results
    what = _ok(args, o)
    run = work / "run"
    entry = next((run / "solves").glob("*.npz"))
    logs = "".join(p.read_text(errors="replace") for p in (run / "points").glob("*/log.txt"))
    said = (o.stdout + o.stderr + logs).splitlines()
    assert any(entry.stem in line and "warn" in line.lower() for line in said), \
        f"no warning names {entry.name}\n{what}\n--- logs\n{logs[-3000:]}"
    assert entry.read_bytes() != (work / "entry.corrupted").read_bytes(), f"{entry.name} was not replaced\n{what}"
    with np.load(entry, allow_pickle=False) as z:
        assert z.files, f"{entry.name}: an empty archive\n{what}"
    records = [json.loads(p.read_text()) for p in (run / "points").glob("*/svm/svm-gln/result.json")]
    assert records and all(r["status"] == "optimal" and r["certified"] is True for r in records), f"{records}\n{what}"


# ---- two commands at once on one directory: the first is stopped (SIGSTOP) while it holds its lock


def _hold(p: subprocess.Popen, lock: Path, timeout: float = TIMEOUT) -> bool:
    """Wait until `p` holds `lock` (its pid written in it), give it 0.3 s to write its marker, then
    stop it: the lock stays held. False when it ended first."""
    start = time.monotonic()
    while p.poll() is None and time.monotonic() - start < timeout:
        try:
            if lock.read_text().strip() == str(p.pid):
                time.sleep(0.3)
                if p.poll() is not None:
                    return False
                os.kill(p.pid, signal.SIGSTOP)
                return True
        except OSError:
            pass
        time.sleep(0.002)
    return False


def _while_held(tmp: Path, first: tuple[str, ...], lock: str, second: tuple[str, ...]) -> tuple[Outcome, Outcome, str]:
    p = _popen(first, tmp)
    try:
        held = _hold(p, tmp / lock)
        o2 = run_gb(second, tmp, timeout=300) if held else None
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
    o1 = _communicate(p)
    what = shown(first, o1) + ("\n" + shown(second, o2) if o2 else "")
    assert held, f"the first command was not caught holding {lock}\n{what}"
    return o1, o2, what


LONG_SWEEP = {"name": "long", **LONG, "grid": {"model.hidden_units": [3]}, "sweep": {"jobs": 1}}


def test_two_sweeps_at_once(tmp_path):
    (tmp_path / "data").mkdir()
    _write(tmp_path / "cfg.yaml", dump(LONG_SWEEP))
    args = ("sweep", "cfg.yaml", "-q", "--out", "out")
    o1, o2, what = _while_held(tmp_path, args, "out/.sweep.lock", args)
    _check_error_line(o2, (("another", "lock", "running"),), what)
    assert o1.returncode == 0 and "Traceback" not in o1.stderr + o1.stdout, what


@pytest.mark.parametrize("first", ["train-gd", "sweep"])
def test_train_gd_and_sweep_at_once(first, tmp_path):
    """`gb train-gd` and `gb sweep` on one --out: whichever comes second is refused with one line,
    and writes nothing of its kind into the other's directory."""
    (tmp_path / "data").mkdir()
    _write(tmp_path / "run.yaml", dump({"name": "long", **LONG}))
    _write(tmp_path / "cfg.yaml", dump(LONG_SWEEP))
    train = ("train-gd", "run.yaml", "-q", "--out", "shared")
    sweep_ = ("sweep", "cfg.yaml", "-q", "--out", "shared")
    if first == "train-gd":
        o1, o2, what = _while_held(tmp_path, train, "shared/.gb.lock", sweep_)
        _check_error_line(o2, (("run", "lock", "another"),), what)
        assert not (tmp_path / "shared" / "points").exists(), f"the sweep wrote points into a run directory\n{what}"
        assert not (tmp_path / "shared" / ".sweep.lock").exists(), what
    else:
        o1, o2, what = _while_held(tmp_path, sweep_, "shared/.sweep.lock", train)
        _check_error_line(o2, (("sweep", "lock", "another"),), what)
        assert not (tmp_path / "shared" / "gd").exists(), f"train-gd wrote gd/ into a sweep directory\n{what}"
        assert not (tmp_path / "shared" / ".gb.lock").exists(), what
    assert o1.returncode == 0 and "Traceback" not in o1.stderr + o1.stdout, what
    marker = json.loads((tmp_path / "shared" / "gb-run.json").read_text())
    assert marker["kind"] == ("run" if first == "train-gd" else "sweep"), f"{marker}\n{what}"


# ---- a received run whose config.yaml is an alias bomb (issue 49, item 11)


def mapping_bomb(levels: int = 9, width: int = 9) -> str:
    """Billion laughs of nested mappings: `levels` anchors, each `width` aliases of the one before
    (9 ** 9 = 387 million leaves in 10 lines): a walk of it, such as the comparison of keys behind
    "a network trained with another config: ...", never ends."""
    lines = ["l0: &l0 {" + ", ".join(f"k{j}: 1" for j in range(width)) + "}"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} {{" + ", ".join(f"k{j}: *l{i - 1}" for j in range(width)) + "}")
    return "\n".join(lines) + f"\nmodel: {{kind: gln, hidden_units: 2, extra: *l{levels - 1}}}\n" \
                              f"training: {{epochs: 2, extra: *l{levels - 1}}}\n"


def test_train_gd_on_a_received_run_whose_config_is_an_alias_bomb(tmp_path):
    """Before: `gb train-gd` ran until killed (the refusal that names the differing keys walked the
    bomb). Now the bomb is not read (no alias in YAML gb reads back): refused in one line. The
    timeout is a hang guard, not a speed check."""
    config = {"name": "bombed", "dataset": {"name": "digits", "train_size": 40, "val_size": 40},
              "model": {"kind": "gln", "hidden_units": 2}, "contexts": {"count": 2, "seed": 1},
              "training": {"epochs": 2}, "svm": {"objectives": []}}
    (tmp_path / "data").mkdir()
    _write(tmp_path / "cfg.yaml", dump(config))
    first = run_gb(("train-gd", "cfg.yaml", "-q", "--out", "run"), tmp_path, timeout=TIMEOUT)
    assert first.returncode == 0, first.stderr
    (tmp_path / "run" / "gd" / "config.yaml").write_text(mapping_bomb())
    config["training"]["epochs"] = 3   # another config: the refusal says what differs
    _write(tmp_path / "cfg.yaml", dump(config))
    before = _tree(tmp_path / "run")
    args = ("train-gd", "cfg.yaml", "-q", "--out", "run")
    o = run_gb(args, tmp_path, timeout=120)   # a hang guard: returncode None when it expanded the bomb
    err = _check_error_line(o, ("gd/ (a network trained with another config", "config.yaml is unreadable"), shown(args, o))
    assert "--force" in err
    assert _tree(tmp_path / "run") == before   # nothing written
