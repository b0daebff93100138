"""Config resolution: the paper preset, defaults and overrides."""

import pytest
import yaml

from gbcli.config import load_config, run_dir_for
from gbcli.runs.sweep import expand, point_id


@pytest.mark.parametrize("n,epochs", [(500, 800), (1000, 400), (2000, 200)])
def test_paper_preset_is_3200_steps_with_decay_at_half(tmp_path, n, epochs):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"preset": "paper", "dataset": {"train_size": n}, "model": {"kind": "gln"}}))
    cfg = load_config(path)
    t = cfg.training
    assert (t.epochs, t.lr_milestones, t.lr, t.lr_decay, t.batch_size) == (epochs, [epochs // 2], 0.04, 0.25, 128)
    assert epochs * -(-n // 128) == 3200                    # steps in all
    assert cfg.dataset.name == "mnist" and cfg.dataset.val_size == 12000 and cfg.contexts.median_init
    assert (cfg.contexts.normal_std, cfg.contexts.offset_std) == (36.0, 9.0)
    assert cfg.init_seed == cfg.contexts.seed               # GLN weights are seeded by the context seed


def test_overrides_defaults_and_run_dir(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text("model: {kind: relu}\n")
    cfg = load_config(path, ["training.momentum=0.9", "model.hidden_units=20", "dataset.train_size=100"])
    assert (cfg.training.momentum, cfg.model.hidden_units, cfg.units) == (0.9, 20, 20)
    assert cfg.dataset.val_size == 1697                     # digits: the rest of the 1797 images
    assert cfg.init_seed == 1 and cfg.name == "small"
    assert run_dir_for(cfg, None).as_posix() == "runs/small"
    assert run_dir_for(cfg, tmp_path / "x") == tmp_path / "x"


def test_grid_points_have_stable_distinct_ids(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"name": "g", "grid": {"contexts.seed": [1, 2, 3], "training.momentum": [0.0, 0.9]}}))
    base, points = expand(path)
    ids = [point_id(p) for p in points]
    assert len(points) == 6 and len(set(ids)) == 6
    assert ids == [point_id(p) for p in expand(path)[1]]
    renamed = path.read_text().replace("name: g", "name: other")
    path.write_text(renamed)
    assert ids == [point_id(p) for p in expand(path)[1]]    # the name is not part of the identity


def test_overrides_of_what_is_trained_get_their_own_run_dir(tmp_path):
    """Issue 24: `--set model.hidden_units=50` wrote into runs/<name> and deleted the plain run's results.
    Overrides of what is trained get runs/<name>-<tag>; svm, name, output and sweep overrides do not."""
    path = tmp_path / "small.yaml"
    path.write_text("model: {kind: gln}\n")
    cfg = load_config(path)
    plain = run_dir_for(cfg, None, [])
    assert plain.as_posix() == "runs/small"
    units = run_dir_for(cfg, None, ["model.hidden_units=50"])
    assert units.parent.as_posix() == "runs" and units.name.startswith("small-") and len(units.name) == len("small-") + 8
    assert units == run_dir_for(cfg, None, ["model.hidden_units=50"])                  # stable
    assert units == run_dir_for(cfg, None, ["model.hidden_units=7", "model.hidden_units=50"])   # the last value counts
    assert units != run_dir_for(cfg, None, ["model.hidden_units=51"])
    both = run_dir_for(cfg, None, ["model.hidden_units=50", "training.momentum=0.9"])
    assert both == run_dir_for(cfg, None, ["training.momentum=0.9", "model.hidden_units=50"])   # order-free
    assert both != units
    for same in (["svm.certify_tol=1e-5"], ["svm.objectives=[svm-gln]"], ["sweep.jobs=2"], ["name=small"],
                 ["training.checkpoint_seconds=5"], ["output.dir=elsewhere"]):   # how a run is done, not what
        assert run_dir_for(cfg, None, same) == plain, same
    for other in (["training.validation=final"], ["preset=paper"]):   # metrics.csv differs; a preset's values
        assert run_dir_for(cfg, None, other) != plain, other
    assert run_dir_for(cfg, tmp_path / "x", ["model.hidden_units=50"]) == tmp_path / "x"   # --out wins


def test_grid_limits_are_checked_before_expanding(tmp_path):
    from gbcli.errors import GbError
    from gbcli.runs.sweep import MAX_POINTS

    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"name": "g", "grid": {f"training.x{i}": list(range(10)) for i in range(7)}}))
    with pytest.raises(GbError, match="10,000,000 points"):
        expand(path)   # counted, never expanded: the unknown keys would fail validation point by point
    path.write_text(yaml.safe_dump({"name": "g", "grid": {"contexts.seed": [1, 2]}, "zip": {"contexts.seed": [3, 4]}}))
    with pytest.raises(GbError, match="contexts.seed"):
        expand(path)
    assert MAX_POINTS == 10_000


def test_a_network_larger_than_the_machine_is_refused_before_training(tmp_path):
    """The memory a network needs is sized on the meta device when the training is asked for
    (`gbcli.training.memory`), not when the config is read: `gb config show` stays torch-free."""
    from gbcli.errors import GbError
    from gbcli.training.memory import check_memory

    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump({"model": {"kind": "gln", "hidden_units": 10 ** 9}}))
    cfg = load_config(path)   # a valid config: the machine is asked by the stage that trains
    with pytest.raises(GbError, match=r"^model\.hidden_units: this network needs about [0-9.]+ GB"):
        check_memory(cfg)
    check_memory(load_config(path, ["model.hidden_units=10"]))


def test_a_stored_config_is_read_one_way_and_bounded(tmp_path, monkeypatch):
    """read_stored_config: a stored config.yaml's mapping; None (or, strict, the error) for a missing
    file, a link, one over MAX_CONFIG_BYTES, an alias or a non-mapping."""
    from gbcli.config import loading
    from gbcli.config.loading import read_stored_config

    good = tmp_path / "config.yaml"
    good.write_text("training: {lr: 0.5}\n")
    assert read_stored_config(good) == {"training": {"lr": 0.5}}
    (tmp_path / "link.yaml").symlink_to(good)
    (tmp_path / "list.yaml").write_text("- 1\n")
    (tmp_path / "alias.yaml").write_text("a: &x [1]\nb: *x\n")
    for name in ("missing.yaml", "link.yaml", "list.yaml", "alias.yaml"):
        assert read_stored_config(tmp_path / name) is None, name
    with pytest.raises(FileNotFoundError):
        read_stored_config(tmp_path / "missing.yaml", strict=True)
    monkeypatch.setattr(loading, "MAX_CONFIG_BYTES", 10)
    assert read_stored_config(good) is None
    with pytest.raises(ValueError, match="bytes"):
        read_stored_config(good, strict=True)
