"""Bad input: one line `gb: error: ...` on stderr naming the key or file and why, exit code 2,
no traceback, and nothing written (no runs/, no --out dir, no tables/).

Every case runs the real CLI in its own process and working directory, forked from a process that
has imported gb (tests/forked_gb.py: the import is most of a short command's time). The module
fixture `outcomes` launches all selected cases at once on a thread pool; each test then only
checks its own outcome.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

import forked_gb

from gbcli.config import deep_merge

pytestmark = pytest.mark.slow   # subprocesses of gb, end to end: `make test-fast` leaves the file out

REPO_ROOT = Path(__file__).resolve().parents[1]
DIGITS = {"dataset": {"name": "digits", "train_size": 100, "val_size": 200}, "training": {"epochs": 2}}


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]                    # after `gb`; `cfg.yaml` is the config written from `config`
    expect: tuple[str, ...]                  # substrings of the error line: the key or file, and why
    config: dict | str | bytes | None = field(default_factory=dict)  # dict: merged into DIGITS; str/bytes: verbatim; None: no cfg.yaml
    data: str = "empty"                      # GB_DATA_DIR: an "empty" folder, or the "shared" MNIST folder
    files: tuple[tuple[str, str], ...] = ()  # extra files in the working directory (path, text)
    unwritten: tuple[str, ...] = ("runs",)   # must not exist afterwards (besides: the tree is unchanged)


def gd(*args: str, **kw) -> Case:
    return Case(("train-gd", "cfg.yaml", "-q", *args), **kw)


def svm(*args: str, **kw) -> Case:
    return Case(("fit-svm", "cfg.yaml", "-q", *args), **kw)


RELU = {"model": {"kind": "relu", "hidden_units": 4}}
CASES = [
    # ---- config values
    pytest.param(gd(config={"bogus": 1}, expect=("cfg.yaml: bogus: unknown key",)), id="unknown-top-level-key"),
    pytest.param(gd(config={"model": {"hiden_units": 3}}, expect=("model.hiden_units: unknown key",)),
                 id="unknown-nested-key"),
    pytest.param(gd(config={"training": {"lr": "abc"}}, expect=("training.lr:", "valid number", "'abc'")),
                 id="wrong-type"),
    pytest.param(gd(config={"training": {"epochs": "abc"}}, expect=("training.epochs:", "integer", "'paper'")),
                 id="wrong-type-union-field"),
    pytest.param(gd(config={"contexts": {"count": 3}}, expect=("contexts.count:", "power of two")),
                 id="contexts-count-not-power-of-two"),
    pytest.param(gd(config={"model": {"hidden_units": 0}}, expect=("model.hidden_units:", "greater than or equal to 1")),
                 id="hidden-units-zero"),
    pytest.param(gd(config={"training": {"lr": -0.1}}, expect=("training.lr:", "greater than 0")), id="negative-lr"),
    pytest.param(gd("--out", "out/run", config={"training": {"momentum": 1.5}}, expect=("training.momentum:", "less than 1"),
                    unwritten=("runs", "out")), id="momentum-too-large-with-out"),
    pytest.param(gd(config={"training": {"batch_size": 0}}, expect=("training.batch_size:", "greater than or equal to 1")),
                 id="batch-size-zero"),
    pytest.param(gd(config={"dataset": {"train_size": 1000, "val_size": 1000}},
                    expect=("dataset.train_size + dataset.val_size", "1797")), id="split-larger-than-digits"),
    pytest.param(gd(config={"model": {"kind": "mlp"}}, expect=("model.kind:", "'mlp'")), id="unknown-model-kind"),
    pytest.param(gd(config={**RELU, "svm": {"objectives": ["svm-gln"]}},
                    expect=("svm.objectives:", "svm-gln", "relu model")), id="objective-does-not-match-model"),
    pytest.param(gd(config={"preset": "papr"}, expect=("preset:", "'papr'")), id="unknown-preset"),
    # papers 001 / 002
    pytest.param(gd(config={"model": {"kind": "leaky", "hidden_units": 5}}, expect=("model.hidden_units:", "2k")),
                 id="leaky-odd-units"),
    pytest.param(gd(config={"model": {"kind": "leaky", "hidden_units": 4, "leaky_alpha": 1.5}},
                    expect=("model.leaky_alpha:", "less than 1")), id="leaky-alpha-too-large"),
    pytest.param(gd(config={"model": {"kind": "gln", "output_bias": False}, "training": {"track": ["alignment"]}},
                    expect=("training.track:", "alignment", "relu")), id="alignment-needs-relu"),
    pytest.param(gd(config={"dataset": {"classes": [3, 5], "positive_classes": [0]}},
                    expect=("dataset.classes:", "positive and negative")), id="digit-pair-without-positive-class"),
    pytest.param(gd(config={"training": {"lr_milestones": [5]}}, expect=("training.lr_milestones:", "outside")),
                 id="lr-milestones-outside-epochs"),
    pytest.param(gd(config={"model": {"kind": "gln", "hidden_units": 2}, "training": {"track": ["kkt"]}},
                    expect=("training.track:", "model.output_bias: false")), id="track-needs-homogeneous-model"),
    pytest.param(gd(config={"training": {"track": ["margins"]}}, expect=("training.track", "'margins'")),
                 id="track-unknown-instrument"),
    pytest.param(gd(config={"training": {"step_rule": "fast"}}, expect=("training.step_rule:", "'fast'")),
                 id="unknown-step-rule"),
    # paper 003: explicit points and explicit weights
    pytest.param(gd(config={"dataset": {"name": "points", "x": [[1, 2], [3, 4]], "y": [1]}},
                    expect=("dataset.y:", "1 labels for 2 points")), id="points-labels-do-not-match"),
    pytest.param(gd(config={"dataset": {"name": "points", "x": [[1, 2]], "y": [1], "train_size": 1, "val_size": 1},
                            "model": {"kind": "diagonal", "weights": {"w": [1, 0]}}},
                    expect=("model.weights.w:", "shape")), id="explicit-weights-wrong-shape"),
    pytest.param(gd(config={"dataset": {"name": "points", "x": [[1, 2]], "y": [1]}, "model": {"kind": "diagonal"}},
                    expect=("dataset.train_size:", "all its 1 points")), id="points-with-another-train-size"),
    # keys that the chosen kind does not have (the model and dataset sections are per kind)
    pytest.param(gd(config={"model": {"kind": "gln", "leaky_alpha": 0.5}}, expect=("model.leaky_alpha: unknown key",)),
                 id="key-of-another-model-kind"),
    pytest.param(gd(config={"model": {"kind": "gln", "depth": 7}}, expect=("model.depth: unknown key",)),
                 id="depth-for-a-gln"),
    pytest.param(gd(config={"svm": {"restarts": 3}}, expect=("svm.restarts:", "gln")), id="svm-option-of-another-model"),
    pytest.param(gd(config={"dataset": {"margin": 0.3}}, expect=("dataset.margin: unknown key",)),
                 id="key-of-another-dataset"),
    pytest.param(gd(config={"model": {"kind": "relu", "output_bias": False}}, expect=("model.output_bias: unknown key",)),
                 id="output-bias-for-relu"),
    pytest.param(svm("--objective", "svm-l1", "--solver", "dual", config={"model": {"kind": "linear"}},
                     expect=("--solver dual", "svm-l1", "linear program")), id="dual-solver-for-svm-l1"),
    pytest.param(svm("--objective", "svm-l2", config={"dataset": {"positive_classes": [0, 12]}},
                     expect=("dataset.positive_classes", "subset of 0..9")), id="positive-classes-out-of-range"),
    # the real configs/mnist-gln-small.yaml and MNIST files: all ten classes positive leaves nothing negative
    pytest.param(Case(("train-gd", "mnist-gln-small.yaml", "-q", "--out", "out/mnist",
                       "--set", "dataset.positive_classes=[0,1,2,3,4,5,6,7,8,9]"),
                      config=None, data="shared", files=(("mnist-gln-small.yaml",
                                                          (REPO_ROOT / "configs/mnist-gln-small.yaml").read_text()),),
                      expect=("dataset.positive_classes", "proper subset"), unwritten=("runs", "out")),
                 id="positive-classes-all-ten-mnist"),
    # ---- files
    pytest.param(gd(config={"dataset": {"name": "mnist"}}, expect=("mnist/train-images-idx3-ubyte.gz", "missing")),
                 id="mnist-files-missing"),
    pytest.param(Case(("train-gd", "nope.yaml"), config=None, expect=("nope.yaml: config file not found",)),
                 id="config-not-found"),
    pytest.param(gd(config="model: {kind: gln\ntraining: {epochs: 2}\n", expect=("cfg.yaml: not valid YAML",)),
                 id="invalid-yaml"),
    pytest.param(gd(config="name: a\x07b\n", expect=("cfg.yaml: not valid YAML", "#x0007")),
                 id="yaml-control-character"),
    pytest.param(gd(config=b"\xff\xfe\x00name: x\n", expect=("cfg.yaml: not a UTF-8 text file",)), id="config-not-utf8"),
    pytest.param(gd(config="- dataset\n- model\n", expect=("cfg.yaml: a config must be a mapping", "list")),
                 id="config-is-a-list"),
    pytest.param(gd("--out", "afile", files=(("afile", "keep me\n"),), expect=("--out: afile", "not a directory")),
                 id="out-is-a-file"),
    # ---- --set
    pytest.param(gd("--set", "training.lr", expect=("--set training.lr:", "key.path=value")), id="set-without-equals"),
    pytest.param(gd("--set", "training.learning_rate=0.1", expect=("training.learning_rate: unknown key",)),
                 id="set-unknown-key"),
    pytest.param(gd("--set", "training.epochs.max=3", expect=("--set training.epochs.max", "not a section")),
                 id="set-below-a-value"),
    # ---- fit-svm
    pytest.param(svm(config={**RELU, "svm": {"objectives": ["svm-lc"]}}, expect=("gd/model.pt", "svm-lc", "gb train-gd")),
                 id="svm-lc-without-trained-relu"),
    pytest.param(svm("--objective", "svm-gln", "--solver", "osqp", expect=("--solver osqp", "svm-gln", "group norm")),
                 id="osqp-for-group-norm"),
    pytest.param(svm("--objective", "svm-l2", "--solver", "nonsense", expect=("--solver", "'nonsense'")),
                 id="unknown-solver"),
    pytest.param(svm("--objective", "nonsense", expect=("svm.objectives", "'nonsense'")), id="unknown-objective"),
    # ---- compare
    pytest.param(Case(("compare", "nothere"), config=None, expect=("nothere: no such run directory",),
                      unwritten=("nothere",)), id="compare-missing-dir"),
    pytest.param(Case(("compare", "run"), config=None, files=(("run/notes.txt", "nothing yet\n"),),
                      expect=("run: no results yet",), unwritten=("run/tables",)), id="compare-no-results"),
    pytest.param(Case(("compare", "run"), config=None, files=(("run/gd/summary.json", "{\n"),
                                                               ("run/gd/config.yaml", "name: x\n")),
                      expect=("run/gd/summary.json",), unwritten=("run/tables",)), id="compare-corrupt-summary"),
    # ---- sweep
    pytest.param(Case(("sweep", "cfg.yaml", "-q"), config={"grid": {"training.lr": 0.1}}, expect=("cfg.yaml: grid", "list")),
                 id="sweep-grid-not-a-list"),
    pytest.param(Case(("sweep", "cfg.yaml", "-q"), config={"grid": {"model.hidden_units": [2, 0]}},
                      expect=("grid point", "model.hidden_units:")), id="sweep-invalid-grid-point"),
    pytest.param(Case(("sweep", "cfg.yaml", "-q"), config={"grid": {"dataset.train_size": [100, 1700]}},
                      expect=("dataset.train_size + dataset.val_size", "1797")), id="sweep-split-too-large-late-point"),
    # ---- command line (click usage errors)
    pytest.param(gd("--bogus", expect=("No such option: --bogus",)), id="unknown-option"),
    pytest.param(Case(("trian-gd", "cfg.yaml"), expect=("No such command 'trian-gd'",)), id="unknown-command"),
    pytest.param(Case(("train-gd",), expect=("Missing argument 'CONFIG'",)), id="missing-argument"),
    pytest.param(svm("--solver", expect=("--solver", "requires an argument")), id="option-without-value"),
]


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _prepare(case: Case, work: Path, data_dir: Path) -> dict:
    if isinstance(case.config, dict):
        (work / "cfg.yaml").write_text(yaml.safe_dump(deep_merge(DIGITS, case.config)))
    elif isinstance(case.config, bytes):
        (work / "cfg.yaml").write_bytes(case.config)
    elif case.config is not None:
        (work / "cfg.yaml").write_text(case.config)
    for rel, text in case.files:
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    # a narrow terminal: the error must stay one line however long it is
    return {**os.environ, "GB_DATA_DIR": str(data_dir), "COLUMNS": "60", "PYTHONDONTWRITEBYTECODE": "1"}


def _run(args: tuple[str, ...], work: Path, env: dict) -> subprocess.CompletedProcess:
    return forked_gb.run(args, work, env, timeout=300)   # a real process forked from one that has imported gb


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory):
    """Run every selected case (in parallel); id -> (CompletedProcess, work dir, tree before), or None if skipped."""
    selected = {item.callspec.id: item.callspec.params["case"] for item in request.session.items
                if item.module is request.module and getattr(item, "originalname", "") == "test_bad_input"}
    shared = None
    if any(c.data == "shared" for c in selected.values()):
        try:
            shared = request.getfixturevalue("shared_data_dir")
        except pytest.skip.Exception:
            pass
    jobs, results = {}, {}
    for cid, case in selected.items():
        if case.data == "shared" and shared is None:
            results[cid] = None
            continue
        work = tmp_path_factory.mktemp(cid)
        data_dir = shared if case.data == "shared" else work / "data"
        data_dir.mkdir(exist_ok=True)
        env = _prepare(case, work, data_dir)
        jobs[cid] = (work, env, _tree(work))
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {cid: pool.submit(_run, selected[cid].args, work, env) for cid, (work, env, _) in jobs.items()}
        for cid, fut in futures.items():
            results[cid] = (fut.result(), jobs[cid][0], jobs[cid][2])
    return results


@pytest.mark.parametrize("case", CASES)
def test_bad_input(case: Case, outcomes, request):
    outcome = outcomes[request.node.callspec.id]
    if outcome is None:
        pytest.skip("MNIST files not found: set GB_DATA_DIR to a folder with mnist/")
    proc, work, before = outcome
    shown = f"gb {' '.join(case.args)}\n--- exit {proc.returncode}\n--- stderr\n{proc.stderr}\n--- stdout\n{proc.stdout}"
    assert "Traceback" not in proc.stderr + proc.stdout, shown
    assert proc.returncode == 2, shown
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, shown
    assert err.startswith("gb: error: "), shown
    for part in case.expect:
        assert part in err, f"{part!r} not in the message\n{shown}"
    for rel in case.unwritten:
        assert not (work / rel).exists(), f"{rel} was written\n{shown}"
    assert _tree(work) == before, f"files were written or changed\n{shown}"


def test_the_cli_names_every_registered_solver():
    """`gb fit-svm --solver` declares its choices without importing the solvers: they must be the registry's."""
    from gbcli.cli import SOLVER_NAMES
    from gbcli.programs.solvers import SOLVERS

    assert set(SOLVER_NAMES) == set(SOLVERS)
