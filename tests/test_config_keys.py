"""Every config key is documented, `gb config show|keys`, and a typo in a config is answered by the
one validator (the pydantic schema) in one line naming the key, without importing torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gbcli.config import listing
from gbcli.config.loading import apply_preset, load_config, read_config, validate
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
    """The validation's one-line message for a config file."""
    with pytest.raises(GbError) as exc:
        validate(apply_preset(read_config(path), str(path)), str(path))
    return str(exc.value)


def _message(raw: dict) -> str:
    """The validation's one-line message for a raw config, without its source."""
    with pytest.raises(GbError) as exc:
        validate(raw, "cfg")
    return str(exc.value).removeprefix("cfg: ")


# ----------------------------------------------------------------------------- every key described


def _live_sections() -> dict[str, type]:
    """Every section class of the live schema: the top level, each section, every model kind's
    Params (the registry) and every dataset kind (gbcli.data.sources)."""
    from gbcli.config.schema import Config
    from gbcli.data.sources import DATASETS
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


def test_the_reference_has_every_kind_and_every_key():
    from gbcli.data.sources import DATASETS
    from gbcli.registry import MODELS

    secs = listing.sections()
    assert secs["model"]["kinds"] == list(MODELS) and secs["dataset"]["kinds"] == list(DATASETS)
    for name, cls in _live_sections().items():
        entry = secs["" if name == "(top level)" else name]
        assert list(entry["keys"]) == list(cls.model_fields), name
        assert all(spec["description"] for spec in entry["keys"].values()), name


def test_every_type_in_the_reference_is_written_plainly():
    """A key's type is written in the reference's notation (int, float, 'a' | 'b', list[T], ...),
    never as Python prints a type it does not know."""
    for name, entry in listing.sections().items():
        for key, spec in entry.get("keys", {}).items():
            unread = ("typing", "<class", "Annotated", "ForwardRef")
            assert spec["type"] and not any(s in spec["type"] for s in unread), f"{name}.{key}: {spec['type']}"


# ----------------------------------------------------------------------------- one validator, one line


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
    pytest.param({"training": {"track": ["margins"]}}, "training.track: 'margins' is not an instrument",
                 id="unknown-instrument"),
    pytest.param({"svm": {"solver": "nonsense"}}, "svm.solver: 'nonsense' is not a solver", id="unknown-solver"),
]


@pytest.mark.parametrize("cfg, expect", BAD)
def test_a_bad_value_is_one_line_naming_its_key(cfg, expect, tmp_path):
    path = _write(tmp_path / "cfg.yaml", {**TINY, **cfg})
    message = _full_message(path)
    assert message.startswith(f"{path}: {expect}"), message
    assert "\n" not in message and "Traceback" not in message
    with pytest.raises(GbError) as exc:   # reading the file and validating it are one path
        load_config(path)
    assert str(exc.value) == message


def test_the_union_member_tags_are_not_part_of_the_key():
    """pydantic names the member of a union-typed key and the kind of a model or dataset section in
    an error's location; the message names the key as it is written in a config."""
    from gbcli.config.loading import config_key

    assert config_key(("training", "epochs", "int")) == "training.epochs"
    assert config_key(("training", "lr_milestones", "list[int]", 1)) == "training.lr_milestones.1"
    assert config_key(("model", "gln", "leaky_alpha")) == "model.leaky_alpha"
    assert config_key(("model", "convnet", "convs", 0, 3)) == "model.convs.0.3"
    assert config_key(("sweep", "slurm", "int")) == "sweep.slurm.int"   # a dict's key is a key
    assert config_key(("bogus",)) == "bogus"


def test_a_missing_required_key_is_named():
    """The first error in the order of the sections: here the points set's train_size comes before
    the model's missing weights."""
    cfg = {**TINY, "dataset": {"name": "points", "x": [[1.0, 2.0]], "y": [1], "train_size": 100},
           "model": {"kind": "diagonal", "wieghts": {"w": [[1.0, 1.0]]}}}
    assert _message(cfg).startswith("dataset.train_size:")
    del cfg["dataset"]
    assert _message(cfg) == "model.weights: required key is missing"


def test_the_first_error_in_the_order_of_the_sections_is_told():
    """A section that is not a mapping comes before a typo in a later section; an unknown model kind
    before it."""
    assert _message({**TINY, "contexts": 5, "training": {"momentun": 0.9}}).startswith(
        "contexts: input should be a valid dictionary")
    assert _message({**TINY, "model": {"kind": "mlp"}, "contexts": 5}).startswith("model.kind: unknown")


def test_a_typo_gets_a_suggestion():
    assert _message({"training": {"momentun": 0.9}}) == \
        "training.momentun: unknown key (did you mean training.momentum?)"
    assert _message({"model": {"kind": "gln", "depth": 3}}) == \
        "model.depth: unknown key (a key of model.kind diagonal, deep-linear, residual, not gln)"
    assert _message({"dataset": {"margin": 0.3}}) == \
        "dataset.margin: unknown key (a key of dataset.name linear-teacher, symmetric-gaussians, not digits)"
    assert _message({"nmae": "x"}) == "nmae: unknown key (did you mean name?)"
    assert "did you mean" not in _message({"x" * 10_000: 1})


def _all_defaults(entry: dict) -> dict:
    filler = {"dict[str, any]": {"w": [1.0]}, "list[list[float]]": [[1.0, 2.0]], "list[int]": [1]}
    return {k: s.get("default", filler.get(s["type"])) for k, s in entry["keys"].items() if s["type"] != "section"}


def test_no_valid_value_is_refused():
    """Every key of every section and kind at the default the reference lists (or a valid value)
    validates, and so does every config of the repository."""
    from gbcli.config.schema import UNIONS, Config, section_of

    for name, entry in listing.sections().items():
        if "keys" not in entry:
            continue
        top, _, kind = name.partition(".")
        cls = Config if not name else UNIONS[top].classes[kind] if kind else section_of(top)
        cls.model_validate(_all_defaults(entry))
    configs = sorted((REPO_ROOT / "configs").rglob("*.yaml"))
    assert configs
    for path in configs:
        load_config(path)


def test_a_valid_config_loads_as_before(tmp_path):
    path = _write(tmp_path / "tiny.yaml", TINY)
    cfg = load_config(path, ("training.lr=0.1",))
    assert cfg.training.lr == 0.1 and cfg.model.hidden_units == 2 and cfg.dataset.val_size == 200


# ----------------------------------------------------------------------------- the keys of how, not what


def test_one_list_of_the_keys_that_do_not_change_what_is_computed():
    """The schema marks them where they are declared; `execution_keys` reads the marks."""
    from gbcli.config.schema import execution_keys

    how = {"name", "output", "sweep", "training.checkpoint_seconds", "svm.time_limit", "svm.device", "tracking"}
    assert execution_keys("execution") == how
    assert execution_keys("logging") == {"training.validation"}
    assert execution_keys("resolved") == {"preset", "grid", "zip"}
    assert execution_keys() == how | {"training.validation", "preset", "grid", "zip"}
    with pytest.raises(ValueError, match="not a role"):
        execution_keys("speed")


def test_the_schema_imports_without_torch(tmp_path):
    """The one validator, the registry and every model kind's declaration import without torch, and
    a config that names no solver nor instrument validates without it."""
    path = _write(tmp_path / "tiny.yaml", TINY)
    probe = ("import sys\n"
             "import gbcli.config.schema, gbcli.config.loading, gbcli.config.listing, gbcli.registry\n"
             "from gbcli.config import load_config\n"
             f"load_config({str(path)!r})\n"
             "gbcli.config.listing.rows()\n"
             "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'gbcli.programs'))))\n")
    p = subprocess.run([sys.executable, "-c", probe], env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", p.stdout


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
    assert {r["section"] for r in kinds} == {"model"} | {f"model.{k}" for k in listing.sections()["model"]["kinds"]}
    table = gb(tmp_path, "config", "keys", "dataset.mnist", "--format", "table")
    assert table.returncode == 0 and "dataset.positive_classes" in table.stdout and "┃" in table.stdout
    bad = gb(tmp_path, "config", "keys", "trainig")
    assert bad.returncode == 2 and "did you mean training?" in _error_line(bad)
    bad = gb(tmp_path, "config", "keys", "-f", "yaml")
    assert bad.returncode == 2 and _error_line(bad).startswith("--format:")
