"""Every config key is documented, the key snapshot is the live schema's, `gb config show|keys`,
and a typo in a config is reported by the fast check, in the full validation's words, without
importing torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gbcli.config import keys
from gbcli.config.check import first_errors
from gbcli.config.loading import apply_preset, format_errors, load_config, precheck, read_config, validate
from gbcli.errors import GbError

REPO_ROOT = Path(__file__).resolve().parents[1]
TINY = {"dataset": {"name": "digits", "train_size": 100, "val_size": 200}, "model": {"kind": "gln", "hidden_units": 2},
        "training": {"epochs": 2}}
# after the CLI's main() returns or exits: was torch imported on the way?
PROBE = ("import atexit, sys\n"
         "atexit.register(lambda: print(f\"[torch imported: {'torch' in sys.modules}]\", file=sys.stderr))\n"
         "sys.argv = ['gb', *sys.argv[1:]]\n"
         "from gbcli.cli import main\n"
         "main()\n")


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "GB_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "160"}


def gb(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`gb ARGS` in tmp_path, through the CLI's entry, reporting whether torch was imported."""
    return subprocess.run([sys.executable, "-c", PROBE, *args], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600)


def _torch_imported(p: subprocess.CompletedProcess) -> bool:
    assert "[torch imported: " in p.stderr, p.stderr
    return "[torch imported: True]" in p.stderr


def _error_line(p: subprocess.CompletedProcess) -> str:
    lines = [line for line in p.stderr.splitlines() if line.startswith("gb: error: ")]
    assert len(lines) == 1, p.stderr
    return lines[0][len("gb: error: "):]


def _write(path: Path, cfg: dict | str) -> Path:
    path.write_text(cfg if isinstance(cfg, str) else yaml.safe_dump(cfg, sort_keys=False))
    return path


def _full_message(path: Path) -> str:
    """The full validation's one-line message for a config file (the fast check bypassed)."""
    with pytest.raises(GbError) as exc:
        validate(apply_preset(read_config(path), str(path)), str(path))
    return str(exc.value)


# ----------------------------------------------------------------------------- every key described


def _live_sections() -> dict[str, type]:
    """Every section class of the live schema: the top level, each section, every model kind's
    Params (the registry) and every dataset kind (gbcli.data.datasets)."""
    from gbcli.config.schema import Config
    from gbcli.data.datasets import DATASETS
    from gbcli.registry import MODELS
    from gbcli.schema import Section

    out: dict[str, type] = {"(top level)": Config}
    for key, field in Config.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, Section):
            out[key] = field.annotation
    out.update({f"model.{kind}": spec.Params for kind, spec in MODELS.items()})
    out.update({f"dataset.{name}": cls for name, cls in DATASETS.items()})
    return out


def test_every_key_has_a_description():
    sections = _live_sections()
    assert {"training", "contexts", "svm", "output", "sweep", "model.gln", "model.relu", "dataset.mnist",
            "dataset.points"} <= set(sections)
    missing = [f"{name}: {key}" for name, cls in sections.items() for key, field in cls.model_fields.items()
               if not (field.description or "").strip()]
    assert not missing, f"config keys without a pydantic description: {', '.join(missing)}"


def test_the_snapshot_is_the_live_schema():
    live = keys.snapshot_text(keys.live_snapshot())
    assert keys.SNAPSHOT.read_text(encoding="utf-8") == live, \
        "gbcli/config/keys.json is stale: regenerate it with `python -m gbcli.config.keys`"


def test_the_snapshot_has_every_kind_and_every_key():
    from gbcli.data.datasets import DATASETS
    from gbcli.registry import MODELS

    secs = keys.sections()
    assert secs["model"]["kinds"] == list(MODELS) and secs["dataset"]["kinds"] == list(DATASETS)
    for name, cls in _live_sections().items():
        entry = secs["" if name == "(top level)" else name]
        assert list(entry["keys"]) == list(cls.model_fields), name
        assert all(spec["description"] for spec in entry["keys"].values()), name


def test_every_type_in_the_snapshot_is_judged():
    """The fast check reads every type it is given (a type it cannot read is left to the full
    validation: allowed, but then not judged at once)."""
    for name, entry in keys.sections().items():
        for key, spec in entry.get("keys", {}).items():
            if spec["type"] != "section":
                keys.parse_type(spec["type"])   # raises ValueError outside the grammar


# ----------------------------------------------------------------------------- the fast check


BAD = [
    pytest.param({"training": {"epochs": 2, "momentun": 0.9}}, "training.momentun: unknown key", id="unknown-key"),
    pytest.param({"trainig": {"lr": 0.1}}, "trainig: unknown key", id="unknown-section"),
    pytest.param({"model": {"kind": "gln", "hiden_units": 3}}, "model.hiden_units: unknown key",
                 id="unknown-model-key"),
    pytest.param({"model": {"kind": "gln", "leaky_alpha": 0.5}}, "model.leaky_alpha: unknown key",
                 id="key-of-another-kind"),
    pytest.param({"dataset": {"margin": 0.3}}, "dataset.margin: unknown key", id="key-of-another-dataset"),
    pytest.param({"model": {"kind": "mlp"}}, "model.kind: unknown kind 'mlp'", id="unknown-model-kind"),
    pytest.param({"dataset": {"name": "cifar"}}, "dataset.name: unknown name 'cifar'", id="unknown-dataset"),
    pytest.param({"training": {"lr": "abc"}}, "training.lr:", id="float-not-a-number"),
    pytest.param({"training": {"epochs": "abc"}}, "training.epochs:", id="union-type"),
    pytest.param({"training": {"epochs": 2.5}}, "training.epochs:", id="int-not-float"),
    pytest.param({"training": {"optimizer": "sdg"}}, "training.optimizer:", id="literal"),
    pytest.param({"training": {"lr_milestones": [1, "x"]}}, "training.lr_milestones.1:", id="list-item"),
    pytest.param({"dataset": {"positive_classes": "0,1"}}, "dataset.positive_classes:", id="list-not-str"),
    pytest.param({"model": {"kind": "convnet", "convs": [[32, 3, 1]]}}, "model.convs.0.3:", id="tuple-length"),
    pytest.param({"name": 5}, "name:", id="top-level-type"),
]


@pytest.mark.parametrize("cfg, expect", BAD)
def test_the_fast_check_speaks_as_the_full_validation(cfg, expect, tmp_path):
    path = _write(tmp_path / "cfg.yaml", {**TINY, **cfg})
    raw = apply_preset(read_config(path), str(path))
    errors = first_errors(raw)
    assert errors, "the fast check found nothing"
    fast = f"{path}: {format_errors(errors)}"
    assert expect in fast
    assert fast == _full_message(path)


def test_a_missing_required_key_is_left_to_the_full_validation(tmp_path):
    """Its first error may be in a section before (a check the snapshot cannot make): here the points
    set's train_size, which the full validation reports before the model's missing weights."""
    cfg = {**TINY, "dataset": {"name": "points", "x": [[1.0, 2.0]], "y": [1], "train_size": 100},
           "model": {"kind": "diagonal", "wieghts": {"w": [[1.0, 1.0]]}}}
    path = _write(tmp_path / "cfg.yaml", cfg)
    assert first_errors(apply_preset(read_config(path), str(path))) == []
    assert "dataset.train_size:" in _full_message(path)
    del cfg["dataset"]
    path = _write(tmp_path / "cfg.yaml", cfg)
    assert first_errors(apply_preset(read_config(path), str(path))) == []
    assert _full_message(path).endswith("model.weights: required key is missing")


def test_what_the_snapshot_cannot_judge_is_left_to_the_full_validation(tmp_path):
    """A section that is not a mapping comes before the typo: the full validation reports it first."""
    path = _write(tmp_path / "cfg.yaml", {**TINY, "contexts": 5, "training": {"momentun": 0.9}})
    assert first_errors(apply_preset(read_config(path), str(path))) == []
    assert _full_message(path).startswith(f"{path}: contexts: input should be a valid dictionary")
    # an error before it is still found at once
    path = _write(tmp_path / "cfg.yaml", {**TINY, "model": {"kind": "mlp"}, "contexts": 5})
    assert format_errors(first_errors(apply_preset(read_config(path), str(path)))).startswith("model.kind: unknown")


def test_a_typo_gets_a_suggestion():
    assert first_errors({"training": {"momentun": 0.9}})
    assert format_errors(first_errors({"training": {"momentun": 0.9}})) == \
        "training.momentun: unknown key (did you mean training.momentum?)"
    assert format_errors(first_errors({"model": {"kind": "gln", "depth": 3}})) == \
        "model.depth: unknown key (a key of model.kind diagonal, deep-linear, residual, not gln)"
    assert "did you mean" not in format_errors(first_errors({"x" * 10_000: 1}))


def _all_defaults(entry: dict) -> dict:
    filler = {"dict[str, any]": {"w": [1.0]}, "list[list[float]]": [[1.0, 2.0]], "list[int]": [1]}
    return {k: s.get("default", filler.get(s["type"])) for k, s in entry["keys"].items() if s["type"] != "section"}


def test_the_fast_check_refuses_no_valid_value():
    """Every key of every section and kind at its default (or a valid value) passes, and so do the
    repository's configs: the fast check never refuses what the full validation accepts."""
    secs = keys.sections()
    for name, entry in secs.items():
        if "keys" not in entry or not name:
            continue
        top = name.split(".")[0]
        raw = {top: _all_defaults(entry)}
        assert first_errors(raw) == [], name
    assert first_errors(_all_defaults(secs[""])) == []
    configs = sorted((REPO_ROOT / "configs").rglob("*.yaml"))
    assert configs
    for path in configs:
        precheck(apply_preset(read_config(path), str(path)), str(path))


def test_a_valid_config_loads_as_before(tmp_path):
    path = _write(tmp_path / "tiny.yaml", TINY)
    cfg = load_config(path, ("training.lr=0.1",))
    assert cfg.training.lr == 0.1 and cfg.model.hidden_units == 2 and cfg.dataset.val_size == 200


# ----------------------------------------------------------------------------- the CLI without torch


@pytest.mark.parametrize("cfg, expect", [
    pytest.param({"training": {"epochs": 2, "momentun": 0.9}}, "training.momentun: unknown key", id="unknown-key"),
    pytest.param({"model": {"kind": "mlp"}}, "model.kind: unknown kind 'mlp'", id="unknown-kind"),
    pytest.param({"training": {"lr": "fast"}}, "training.lr: input should be a valid number", id="wrong-type"),
])
def test_a_typo_is_reported_without_torch(cfg, expect, tmp_path):
    path = _write(tmp_path / "typo.yaml", {**TINY, **cfg})
    p = gb(tmp_path, "train-gd", "typo.yaml")
    assert p.returncode == 2, p.stderr
    line = _error_line(p)
    assert line.startswith(f"typo.yaml: {expect}"), line
    assert not _torch_imported(p)
    assert line == _full_message(path).replace(str(path), "typo.yaml", 1)   # the full validation's words
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["fit-svm", "sweep", "config show"])
def test_every_command_that_reads_a_config_reports_a_typo_without_torch(command, tmp_path):
    _write(tmp_path / "typo.yaml", {**TINY, "training": {"epochs": 2, "momentun": 0.9},
                                    **({"grid": {"contexts.seed": [1, 2]}} if command == "sweep" else {})})
    p = gb(tmp_path, *command.split(), "typo.yaml")
    assert p.returncode == 2, p.stderr
    assert _error_line(p).startswith("typo.yaml: training.momentun: unknown key"), p.stderr
    assert not _torch_imported(p)
    assert not (tmp_path / "runs").exists()


def test_a_typo_in_an_override_is_reported_without_torch(tmp_path):
    _write(tmp_path / "tiny.yaml", TINY)
    p = gb(tmp_path, "train-gd", "tiny.yaml", "--set", "training.learning_rate=0.1")
    assert p.returncode == 2
    assert _error_line(p) == "tiny.yaml: training.learning_rate: unknown key"
    assert not _torch_imported(p)


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("train-gd", "--help"), ("config", "keys", "training")])
def test_help_version_and_keys_need_no_torch(args, tmp_path):
    p = gb(tmp_path, *args)
    assert p.returncode == 0, p.stderr
    assert not _torch_imported(p)


# ----------------------------------------------------------------------------- gb config show


@pytest.mark.slow
def test_config_show_is_what_train_gd_runs_and_saves(tmp_path):
    _write(tmp_path / "tiny.yaml", TINY)
    sets = ("--set", "training.lr=0.05", "--set", "contexts.seed=3")
    shown = gb(tmp_path, "config", "show", "tiny.yaml", *sets)
    assert shown.returncode == 0, shown.stderr
    trained = gb(tmp_path, "train-gd", "tiny.yaml", "-q", "--out", "run", *sets)
    assert trained.returncode == 0, trained.stderr
    assert shown.stdout == (tmp_path / "run" / "gd" / "config.yaml").read_text()
    # the printed config is a config file that validates to the same Config
    again = _write(tmp_path / "shown.yaml", shown.stdout)
    assert load_config(again) == load_config(tmp_path / "tiny.yaml", ("training.lr=0.05", "contexts.seed=3"))
    cfg = yaml.safe_load(shown.stdout)
    assert cfg["training"]["lr"] == 0.05 and cfg["dataset"]["val_size"] == 200 and cfg["name"] == "tiny"


@pytest.mark.slow
def test_config_show_resolves_derived_values(tmp_path):
    _write(tmp_path / "p.yaml", {**TINY, "training": {"epochs": "paper", "lr_milestones": "paper"}})
    p = gb(tmp_path, "config", "show", "p.yaml")
    assert p.returncode == 0, p.stderr
    t = yaml.safe_load(p.stdout)["training"]
    assert t["epochs"] == 4000 and t["lr_milestones"] == [2000]   # 200 * 2000 / 100


@pytest.mark.slow
def test_config_show_bad_input_is_one_line(tmp_path):
    _write(tmp_path / "bad.yaml", {**TINY, "training": {"lr": -1}})
    p = gb(tmp_path, "config", "show", "bad.yaml")
    assert p.returncode == 2 and p.stdout == ""
    assert _error_line(p).startswith("bad.yaml: training.lr: input should be greater than 0")
    p = gb(tmp_path, "config", "show", "missing.yaml")
    assert p.returncode == 2 and "missing.yaml: config file not found" in _error_line(p)


# ----------------------------------------------------------------------------- gb config keys


def test_config_keys_lists_every_key_with_its_description(tmp_path):
    p = gb(tmp_path, "config", "keys")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    lr = [line for line in lines if line.startswith("training.lr ")]
    assert len(lr) == 1 and "float" in lr[0] and "0.04" in lr[0] and "step size" in lr[0]
    for key in ("contexts.count", "training.momentum", "training.epochs", "svm.objectives", "sweep.jobs",
                "model.hidden_units", "dataset.positive_classes", "dataset.n_samples", "model.depth", "name"):
        assert any(line.startswith(f"{key} ") for line in lines), key
    p = gb(tmp_path, "config", "keys", "model.gln")
    assert p.returncode == 0
    units = [line for line in p.stdout.splitlines() if line.startswith("model.hidden_units ")]
    assert len(units) == 1 and "H: hidden units" in units[0]
    assert "model.leaky_alpha" not in p.stdout


@pytest.mark.slow
def test_config_keys_json_and_selectors(tmp_path):
    p = gb(tmp_path, "config", "keys", "--format", "json")
    rows = json.loads(p.stdout)
    assert all(r["description"] for r in rows)
    assert len({(r["section"], r["key"]) for r in rows}) == len(rows)
    assert {r["section"] for r in rows} >= {"", "training", "model.gln", "model.residual", "dataset.points"}
    one = json.loads(gb(tmp_path, "config", "keys", "training.lr", "-f", "json").stdout)
    assert [(r["key"], r["type"], r["default"]) for r in one] == [("training.lr", "float", 0.04)]
    kinds = json.loads(gb(tmp_path, "config", "keys", "model", "-f", "json").stdout)
    assert {r["section"] for r in kinds} == {"model"} | {f"model.{k}" for k in keys.sections()["model"]["kinds"]}
    table = gb(tmp_path, "config", "keys", "dataset.mnist", "--format", "table")
    assert table.returncode == 0 and "dataset.positive_classes" in table.stdout and "┃" in table.stdout
    bad = gb(tmp_path, "config", "keys", "trainig")
    assert bad.returncode == 2 and "did you mean training?" in _error_line(bad)
    bad = gb(tmp_path, "config", "keys", "-f", "yaml")
    assert bad.returncode == 2 and _error_line(bad).startswith("--format:")
