"""Identity: what a stage and a grid point were computed from. A stage's manifest hashes the config
sections it depends on (`problem`: dataset, model, contexts; `config`: those plus its own section) and,
for a program that uses the network, the summary.json it used (`upstream`). A point's id hashes its
values that differ from the defaults. Keys that change nothing computed (the schema's `execution_keys`)
are left out."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from gbcli.config import Config
from gbcli.config.schema import execution_keys
from gbcli.errors import GbError
from gbcli.fs.layout import RunDir
from gbcli.fs.safe import flatten, read_untrusted
from gbcli.registry import DEFAULT_KIND, MODELS

PROBLEM_SECTIONS = ("dataset", "model", "contexts")
GD_SECTIONS = PROBLEM_SECTIONS + ("training",)   # what a trained network is computed from (its manifest's "config")


def _drop(d: dict, keys: frozenset[str]) -> dict:
    """`d` without `keys` (dotted `section.key`, or a top-level key); a section left empty goes too."""
    d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()}
    for key in keys:
        section, _, name = key.partition(".")
        if not name:
            d.pop(section, None)
        elif isinstance(d.get(section), dict):
            d[section].pop(name, None)
            if not d[section]:
                del d[section]
    return d


# Keys added after stage manifests were first written, hashed only when set: a config that does not
# use one hashes as before, so its finished stages and training checkpoints stay valid.
UNSET_SINCE = ("training.init_from", "training.adaptive_step", "training.betas", "training.eps", "training.mirror_p")


def section_hash(cfg, sections: tuple[str, ...]) -> str:
    d = cfg.to_dict()
    how = {k for k in execution_keys("execution") if "." in k}
    # looked up nested, not flattened: a mapping's value (training.adaptive_step) is set, not absent
    how |= {k for k in UNSET_SINCE if (d.get(k.partition(".")[0]) or {}).get(k.partition(".")[2]) is None}
    picked = _drop({s: d.get(s) for s in sections}, how)
    return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:16]


def file_hash(path: Path) -> str:
    try:
        return hashlib.sha256(read_untrusted(path)).hexdigest()[:16]
    except (OSError, ValueError) as exc:
        raise GbError(f"{path}: unreadable ({exc.strerror if isinstance(exc, OSError) else 'not a regular file or too large'})") from None


def gd_manifest(cfg) -> dict:
    out = {"problem": section_hash(cfg, PROBLEM_SECTIONS), "config": section_hash(cfg, GD_SECTIONS)}
    if cfg.training.init_from is not None:   # a warm start: what the file holds, not only its name
        try:
            out["init"] = file_hash(Path(cfg.training.init_from))
        except GbError as exc:
            raise GbError(f"training.init_from: {exc}") from None
    return out


def svm_manifest(cfg, run_dir: Path, needs_trained: bool) -> dict:
    # which programs are asked for is the record's own place; how a solve runs changes nothing it solves
    how = {k.partition(".")[2] for k in execution_keys("execution") if k.startswith("svm.")}
    svm = {k: v for k, v in cfg.to_dict()["svm"].items() if k != "objectives" and k not in how}
    config = hashlib.sha256(json.dumps([section_hash(cfg, PROBLEM_SECTIONS), svm], sort_keys=True).encode()).hexdigest()[:16]
    upstream = file_hash(RunDir(run_dir).summary) if needs_trained else None
    return {"problem": section_hash(cfg, PROBLEM_SECTIONS), "config": config, "upstream": upstream}


def _non_default(values: dict, defaults: dict) -> dict:
    """The entries of `values` that differ from `defaults` (recursively)."""
    out = {}
    for k, v in values.items():
        d = defaults.get(k, object())
        if isinstance(v, dict) and isinstance(d, dict):
            v = _non_default(v, d)
            if v:
                out[k] = v
        elif v != d:
            out[k] = v
    return out


# The defaults point ids were first hashed against: a key keeps its default of then, so existing
# sweeps keep their ids; keys added since compare with their own default (model.kind: `id_defaults`).
ID_DEFAULTS = {
    "dataset": {"name": "digits", "train_size": 500, "val_size": None, "data_seed": 1, "data_dir": None,
                "positive_classes": [0, 1, 2, 3, 4], "classes": None, "n_samples": 500, "dim": 20,
                "synthetic_seed": 0, "margin": 0.0, "bias": False, "x": None, "y": None, "max_norm": None},
    "model": {"hidden_units": 10, "output_bias": True, "init": None, "init_seed": None,
              "init_scale": 1.0, "freeze_gates_after": 0, "depth": 2, "activation": "relu", "patches": 2,
              "weights": None, "leaky_alpha": 0.2, "output_weight": 1.0},
    "contexts": {"count": 2, "seed": 1, "median_init": True, "normal_std": 36.0, "offset_std": 9.0},
    "training": {"batch_size": 128, "lr": 0.04, "momentum": 0.0, "epochs": 100, "lr_milestones": [],
                 "lr_decay": 0.25, "loss": "logistic", "batch_seed": 1, "device": "cpu", "log_points": 50,
                 "log_spacing": "linear", "step_rule": "constant", "descent": "gradient", "track": []},
    "svm": {"objectives": [], "solver": None, "max_iters": None, "eps": None, "certify_tol": 1e-06,
            "restarts": 40, "radii": [0.3, 0.1, 0.03, 0.01, 0.003, 0.001], "search_seed": 0},
}


def id_defaults(cfg: Config) -> dict:
    """ID_DEFAULTS, then the current defaults of the point's model kind and dataset (keys added since)."""
    current = Config.model_construct().model_dump(mode="json")
    current["model"] = MODELS[cfg.model.kind].Params.model_construct().model_dump(mode="json")
    current["dataset"] = type(cfg.dataset).model_construct().model_dump(mode="json")
    out = {}
    frozen = {**ID_DEFAULTS, "model": {"kind": DEFAULT_KIND, **ID_DEFAULTS["model"]}}
    for section in set(current) | set(frozen):
        cur, old = current.get(section), frozen.get(section)
        out[section] = {**cur, **old} if isinstance(cur, dict) and isinstance(old, dict) else (old if old is not None else cur)
    return out


def point_id(cfg: Config) -> str:
    """Stable id of a grid point: a hash of its values that differ from `id_defaults`."""
    d = _drop(_non_default(cfg.to_dict(), id_defaults(cfg)), execution_keys())
    return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:10]


def readable_names(configs: list[Config]) -> list[str]:
    """A readable name for each point of one grid, of what differs between them (`hidden_units=20,seed=2`),
    each key by the shortest ending of its dotted path no other shares; one config: its `name`."""
    if len(configs) < 2:
        return [c.name for c in configs]
    skip = execution_keys()
    flat = [{k: v for k, v in flatten(c.to_dict()).items()
             if k not in skip and k.partition(".")[0] not in skip} for c in configs]
    keys = [k for k in dict.fromkeys(k for f in flat for k in f) if len({repr(f.get(k)) for f in flat}) > 1]
    tails = {k: [".".join(k.split(".")[-n:]) for n in range(1, k.count(".") + 2)] for k in keys}
    short = {k: next((t for t in tails[k] if sum(o == t or o.endswith("." + t) for o in keys) == 1), k) for k in keys}

    def text(v) -> str:
        return json.dumps(v, separators=(",", ":")) if isinstance(v, (list, dict)) else str(v)

    return [",".join(f"{short[k]}={text(f.get(k))}" for k in keys) for f in flat]

