"""Run configuration: a YAML file validated by pydantic, with presets and `--set` overrides.

A config has one section per concept (dataset, model, contexts, training, svm, output).
`preset: paper` fills in the published experiments' settings (protocol sections 2-4), so a
config only states what differs. Every validation problem becomes a one-line `GbError`
naming the offending key.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, Literal, Optional, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, StrictInt, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import GbError

PRESET_DIR = Path(__file__).parent / "presets"

ModelKind = Literal["gln", "shallow", "relu", "frelu", "linear", "leaky", "diagonal", "conv"]
Objective = Literal[
    "svm-shallow", "svm-l2", "svm-gln", "svm-l2-reference", "svm-gln-reference",
    "svm-rc", "svm-lc", "svm-hl", "svm-gates", "svm-l1",
    "svm-pos", "svm-neg", "svm-par",
    # paper 003: Problem 2 in parameter space (min ||theta||^2 s.t. y f >= 1), gbcli.nonconvex
    "nonconvex-global", "local-search", "local-search-global",
]
Solver = Literal["dual", "ecos", "osqp", "clarabel", "scs"]

# Which convex programs describe which GD model (protocol section 5).
OBJECTIVES_FOR_MODEL: dict[str, tuple[str, ...]] = {
    "gln": ("svm-l2", "svm-gln", "svm-l2-reference", "svm-gln-reference"),
    "shallow": ("svm-shallow",),
    "relu": ("svm-rc", "svm-lc", "svm-hl", "svm-gates", "svm-pos", "svm-neg"),
    "frelu": ("svm-rc", "svm-lc", "svm-hl", "svm-gates"),
    "linear": ("svm-shallow", "svm-l1"),
    # paper 002: svm-par is the leaky net's limit in the perfect agreement regime; svm-shallow (no
    # contexts: the plain linear SVM) checks that the data is linearly separable
    "leaky": ("svm-par", "svm-shallow"),
}
# paper 003: Problem 2 in parameter space, for the small explicit networks (gbcli.nonconvex)
NONCONVEX_OBJECTIVES = ("nonconvex-global", "local-search", "local-search-global")
OBJECTIVES_FOR_MODEL["relu"] += NONCONVEX_OBJECTIVES
OBJECTIVES_FOR_MODEL["diagonal"] = NONCONVEX_OBJECTIVES
OBJECTIVES_FOR_MODEL["conv"] = NONCONVEX_OBJECTIVES


# points in each source set (the synthetic sets have dataset.n_samples)
SOURCE_SIZES = {"mnist": 60000, "fashion-mnist": 60000, "digits": 1797}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DatasetConfig(_Section):
    """Which data, how much of it, and how it is split (protocol section 2)."""

    name: Literal["mnist", "fashion-mnist", "digits", "linear-teacher", "orthogonal", "points"] = "digits"
    train_size: StrictInt = Field(500, ge=1)
    val_size: Optional[StrictInt] = Field(None, ge=1, description="default: the last min(12000, rest) points")
    data_seed: int = 1
    data_dir: Optional[str] = None
    positive_classes: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4])
    classes: Optional[list[int]] = Field(
        None, description="image sets: keep only these classes (e.g. a digit pair [3, 5]); set val_size too")
    # synthetic sets only
    n_samples: StrictInt = Field(500, ge=2)
    dim: StrictInt = Field(20, ge=1)
    synthetic_seed: int = 0
    margin: float = Field(0.0, ge=0)
    bias: bool = False
    # points: explicit training points (paper 003's constructions); validation = the same points
    x: Optional[list[list[float]]] = Field(None, description="points: the inputs, one list per point")
    y: Optional[list[int]] = Field(None, description="points: the labels, +1 or -1")
    max_norm: Optional[float] = Field(
        None, gt=0, description="rescale all points by one constant so the largest norm is this "
                                "(paper 004: ||x|| <= 1)")


class ModelConfig(_Section):
    """The GD network (protocol section 4)."""

    kind: ModelKind = "gln"
    hidden_units: StrictInt = Field(10, ge=1, description="H: hidden units (gln, relu, frelu)")
    output_bias: bool = Field(True, description="scalar output bias of gln/shallow (published runs kept it)")
    init: Optional[Literal["orthogonal", "kaiming", "normal", "balanced"]] = Field(
        None, description="default: orthogonal for gln/shallow/linear, kaiming for relu/frelu, normal for leaky; "
                          "balanced (relu/frelu, paper 001): normal first layer, |w2_j| = ||w1_j|| with random signs")
    init_seed: Optional[int] = Field(None, description="default: contexts.seed for gln/shallow, 1 otherwise")
    init_scale: float = Field(1.0, gt=0)
    freeze_gates_after: StrictInt = Field(0, ge=0, description="frelu: epochs of ordinary ReLU training before the gates freeze")
    # paper 003's small networks (gbcli.nonconvex): diagonal of depth m, shared-filter convolution
    depth: StrictInt = Field(2, ge=2, description="diagonal: number of layers m")
    activation: Literal["linear", "relu"] = Field("relu", description="diagonal, conv: the hidden activation")
    patches: StrictInt = Field(2, ge=1, description="conv: disjoint patches the input is split into")
    weights: Optional[dict[str, Any]] = Field(
        None, description="explicit initial weights by parameter name (relu: w1, w2; diagonal: w; conv: w, v)")
    # paper 002 (kind leaky): hidden_units = 2k units max(alpha z, z), output weights fixed to +v, -v
    leaky_alpha: float = Field(0.2, gt=0, lt=1, description="leaky: slope alpha of max(alpha z, z)")
    output_weight: float = Field(1.0, gt=0, description="leaky: v, the fixed output weight (+v first k units, -v last k)")

    @property
    def predictor(self) -> str:
        return f"gd-{self.kind}"

    @property
    def homogeneity(self) -> int:
        """Degree L of the network in its weights (the output bias aside)."""
        if self.kind == "diagonal":
            return self.depth
        return 1 if self.kind in ("shallow", "linear", "leaky") else 2   # leaky: only layer 1 is trained


class ContextsConfig(_Section):
    """Hyperplane gating (protocol section 3); `count` is C per unit (global count for shallow)."""

    count: StrictInt = Field(2, ge=1)
    seed: int = 1
    median_init: bool = True
    normal_std: float = Field(36.0, gt=0)
    offset_std: float = Field(9.0, ge=0)

    @field_validator("count")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        if v & (v - 1):
            raise ValueError(f"must be a power of two (each context is a pattern of hyperplane sides), got {v}")
        return v

    @property
    def hyperplanes(self) -> int:
        return int(math.log2(self.count))


class TrainingConfig(_Section):
    """Gradient descent (protocol section 4). `paper` values are resolved from the train size."""

    batch_size: Optional[StrictInt] = Field(128, ge=1, description="null: full-batch GD")
    lr: float = Field(0.04, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1)
    epochs: Union[StrictInt, Literal["paper"]] = 100
    lr_milestones: Union[list[int], Literal["paper"]] = Field(default_factory=list)
    lr_decay: float = Field(0.25, gt=0)
    loss: Literal["logistic", "exponential"] = "logistic"
    batch_seed: int = 1
    device: Literal["cpu", "cuda"] = "cpu"
    log_points: StrictInt = Field(50, ge=2)
    log_spacing: Literal["linear", "log"] = Field(
        "linear", description="log: geometrically spaced logged steps, for log-x plots of long runs")
    # loss-normalized: eta_t = lr / R(w_t), R the mean loss of the batch the step is taken on (the
    # full training set when batch_size is null, as in paper 004), taken as lr * grad log R in log
    # space. homogeneous-normalized: eta_t = lr / (R(w_t) ||w_t||^(2L-2)) for a degree-L model
    # (the same for L = 1): with L = 2, lr / R alone grows ||w|| geometrically and the margins'
    # relative change per step with it, until the steps oscillate; this keeps it like the linear case.
    step_rule: Literal["constant", "loss-normalized", "homogeneous-normalized"] = "constant"
    descent: Literal["gradient", "coordinate"] = Field(
        "gradient", description="coordinate: greedy coordinate (l1 steepest) descent, AdaBoost's update; linear only")
    track: list[Literal["margin", "kkt", "agreement", "rank", "alignment", "clusters"]] = Field(
        default_factory=list, description="theory instruments logged to metrics.csv (gbcli.theory)")

    @field_validator("epochs")
    @classmethod
    def _positive_epochs(cls, v):
        if isinstance(v, int) and v < 1:
            raise ValueError(f"must be at least 1, got {v}")
        return v


class SvmConfig(_Section):
    """Convex max-margin programs to solve (protocol section 5)."""

    objectives: list[Objective] = Field(default_factory=list)
    solver: Optional[Solver] = Field(None, description="default: dual (certified); ecos, osqp, clarabel, scs solve the primal through cvxpy")
    max_iters: Optional[StrictInt] = Field(None, ge=1)
    eps: Optional[float] = Field(None, gt=0, description="solver tolerance (default: the solver's own; dual: 1e-6)")
    certify_tol: float = Field(1e-6, gt=0, lt=1, description="certified when relative gap and 1 - smallest margin are below this")
    # paper 003's non-convex objectives (gbcli.nonconvex)
    restarts: StrictInt = Field(40, ge=1, description="nonconvex-global, local-search: random starts of each SLSQP solve")
    radii: list[float] = Field(default_factory=lambda: [0.3, 0.1, 0.03, 0.01, 0.003, 0.001],
                               description="local-search: the distances eps to search within")
    search_seed: int = Field(0, description="nonconvex-global, local-search: seed of the random starts")

    @field_validator("radii")
    @classmethod
    def _positive_radii(cls, v: list[float]) -> list[float]:
        if not v or any(not r > 0 for r in v):
            raise ValueError(f"must be a non-empty list of positive distances, got {v}")
        return v


class OutputConfig(_Section):
    dir: Optional[str] = None


class SweepConfig(_Section):
    """How `gb sweep` runs its points (not part of a point's identity); the command line overrides these."""

    executor: Literal["local", "slurm"] = "local"
    jobs: StrictInt = Field(1, ge=1, description="local: processes at once; slurm: array tasks at once")
    partition: Optional[str] = Field(None, description="slurm partition (default: the cluster's default)")
    time_min: StrictInt = Field(60, ge=1, description="slurm time limit per point, minutes")
    cpus: StrictInt = Field(1, ge=1, description="slurm CPUs per point")
    mem_gb: float = Field(4, gt=0, description="slurm memory per point, GB")


class Config(_Section):
    name: str = "run"
    preset: Optional[Literal["paper"]] = None
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    contexts: ContextsConfig = Field(default_factory=ContextsConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    svm: SvmConfig = Field(default_factory=SvmConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    grid: Optional[dict[str, list[Any]]] = Field(None, description="sweep axes: dotted key -> values (full product)")
    zip: Optional[dict[str, list[Any]]] = Field(None, description="sweep axes varied together (equal lengths)")
    sweep: SweepConfig = Field(default_factory=SweepConfig)

    @model_validator(mode="after")
    def _resolve(self) -> "Config":
        t, n, d = self.training, self.dataset.train_size, self.dataset
        if d.val_size is None:  # protocol: 12,000 validation points, or what the set has left
            total = SOURCE_SIZES.get(d.name, d.n_samples)
            d.val_size = max(1, min(12000, total - n))
        # The published schedule: 200*2000/N epochs, lr x0.25 at half (3200 steps at batch 128).
        if t.epochs == "paper":
            t.epochs = max(1, round(200 * 2000 / n))
        if t.lr_milestones == "paper":
            t.lr_milestones = [t.epochs // 2]
        bad = [m for m in t.lr_milestones if not 0 < m < t.epochs]
        if bad:
            raise ValueError(f"training.lr_milestones: epochs {bad} are outside 1..{t.epochs - 1}")
        allowed = OBJECTIVES_FOR_MODEL[self.model.kind]
        for obj in self.svm.objectives:
            if obj not in allowed:
                raise ValueError(
                    f"svm.objectives: {obj} does not describe a {self.model.kind} model "
                    f"(use one of {', '.join(allowed)})")
        if t.track:
            # The instruments are defined for exactly homogeneous models: an output bias shifts every
            # margin by a constant, so neither min y f / ||w||^L nor the KKT conditions of
            # min ||w||^2 s.t. y f >= 1 describe the trained predictor; we refuse rather than
            # silently measure a different (bias-free) predictor.
            if self.model.kind in ("gln", "shallow") and self.model.output_bias:
                raise ValueError("training.track: the instruments need an exactly homogeneous model; "
                                 "set model.output_bias: false")
            if {"margin", "agreement"} & set(t.track) and self.model.kind in ("relu", "frelu", "diagonal", "conv"):
                raise ValueError(f"training.track: margin and agreement need a matching convex program, which a "
                                 f"{self.model.kind} model does not have (kkt works for every model)")
            self._check_paper_instruments()
        self._check_paper_models()
        if t.descent == "coordinate" and self.model.kind != "linear":
            raise ValueError("training.descent: coordinate descent is for model.kind linear")
        if self.model.kind == "shallow" and self.model.hidden_units != 1 and "hidden_units" in self.model.model_fields_set:
            raise ValueError("model.hidden_units: a shallow GLN has exactly one unit (set contexts.count instead)")
        if self.model.kind == "shallow":   # resolved, so a dumped config validates again (sweep points)
            self.model.hidden_units = 1
        return self

    def _check_paper_instruments(self) -> None:
        """Papers 001 / 002: which instruments fit which model."""
        kind, track = self.model.kind, set(self.training.track)
        if "alignment" in track and kind != "relu":
            raise ValueError("training.track: alignment (neurons against svm-pos / svm-neg) is for model.kind relu")
        if "clusters" in track and kind != "leaky":
            raise ValueError("training.track: clusters (the two neuron groups of paper 002) is for model.kind leaky")
        if "rank" in track and kind not in ("relu", "frelu", "leaky"):
            raise ValueError("training.track: rank (singular values of the first layer) is for relu, frelu and leaky")
        if "margin" in track and kind == "leaky":
            raise ValueError("training.track: margin has no best value for a leaky net (use agreement and clusters)")

    def _check_paper_models(self) -> None:
        """Papers 001 / 002: the leaky net, balanced init and digit-pair datasets."""
        m, d = self.model, self.dataset
        if m.kind == "leaky" and m.hidden_units % 2:
            raise ValueError(f"model.hidden_units: a leaky net has 2k units (k per output sign), got {m.hidden_units}")
        if m.init == "balanced" and m.kind not in ("relu", "frelu"):
            raise ValueError("model.init: balanced is for relu and frelu models")
        if d.classes is not None:
            if d.name not in ("mnist", "fashion-mnist", "digits"):
                raise ValueError("dataset.classes: only image sets have classes")
            if not 2 <= len(set(d.classes)) <= 10 or any(not 0 <= c <= 9 for c in d.classes):
                raise ValueError(f"dataset.classes: need at least two distinct classes in 0..9, got {d.classes}")
            if not set(d.classes) & set(d.positive_classes) or set(d.classes) <= set(d.positive_classes):
                raise ValueError(f"dataset.classes: {d.classes} must have both positive and negative classes "
                                 f"(dataset.positive_classes = {d.positive_classes})")

    @model_validator(mode="after")
    def _explicit_points(self) -> "Config":
        """`points`: x and y given, one label per point, equal lengths; the split is every point
        for training and the same points for validation (the constructions have nothing else)."""
        d = self.dataset
        if d.name != "points":
            for key in ("x", "y"):
                if getattr(d, key) is not None:
                    raise ValueError(f"dataset.{key}: only for dataset.name points (got dataset.name {d.name})")
            return self
        if not d.x or d.y is None:
            raise ValueError("dataset.x, dataset.y: dataset.name points needs both (the inputs and their labels)")
        if len({len(r) for r in d.x}) != 1 or not d.x[0]:
            raise ValueError("dataset.x: every point needs the same (non-zero) number of coordinates")
        if len(d.y) != len(d.x):
            raise ValueError(f"dataset.y: {len(d.y)} labels for {len(d.x)} points")
        if any(v not in (-1, 1) for v in d.y):
            raise ValueError(f"dataset.y: labels must be +1 or -1, got {d.y}")
        n = len(d.x)
        if d.train_size != n:   # only when different: assignment re-runs this validator
            d.train_size = n
        if d.val_size != n:
            d.val_size = n
        return self

    @property
    def init_seed(self) -> int:
        if self.model.init_seed is not None:
            return self.model.init_seed
        return self.contexts.seed if self.model.kind in ("gln", "shallow") else 1

    @property
    def units(self) -> int:
        """Number of gated units H (1 for the shallow GLN and the linear model)."""
        return self.model.hidden_units if self.model.kind in ("gln", "relu", "frelu", "leaky") else 1

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={k for k in ("grid", "zip") if getattr(self, k) is None})


# ---------------------------------------------------------------- loading


def deep_merge(base: dict, over: dict) -> dict:
    """Recursively merge `over` into a copy of `base` (dicts merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """`training.lr=0.01` -> (['training', 'lr'], 0.01); the value is read as YAML."""
    if "=" not in text:
        raise GbError(f"--set {text}: expected key.path=value")
    key, value = text.split("=", 1)
    path = [p for p in key.strip().split(".")]
    if not all(path):
        raise GbError(f"--set {text}: empty key")
    try:
        parsed = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError:
        parsed = value
    return path, parsed


def set_path(d: dict, path: list[str], value: Any) -> dict:
    """Return a copy of `d` with the nested key `path` set to `value`."""
    out = copy.deepcopy(d)
    node = out
    for p in path[:-1]:
        if not isinstance(node.get(p, {}), dict):
            raise GbError(f"--set {'.'.join(path)}: {p} is not a section")
        node = node.setdefault(p, {})
    node[path[-1]] = value
    return out


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise GbError(f"{path}: config file not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise GbError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise GbError(f"{path}: cannot read the config ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]  # ReaderError: no .problem
        raise GbError(f"{path}: not valid YAML{where}: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise GbError(f"{path}: a config must be a mapping of sections, got {type(raw).__name__}")
    return raw


def apply_preset(raw: dict, source: str = "config") -> dict:
    """Merge the named preset (if any) under the user's values."""
    preset = raw.get("preset")
    if preset is None:
        return raw
    file = PRESET_DIR / f"{preset}.yaml"
    if not isinstance(preset, str) or not file.is_file():
        known = ", ".join(sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
        raise GbError(f"{source}: preset: unknown preset {preset!r} (known: {known})")
    return deep_merge(yaml.safe_load(file.read_text()), raw)


def validate(raw: dict, source: str = "config") -> Config:
    """Validate a raw dict (preset already applied) into a Config, or raise a one-line GbError."""
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise GbError(f"{source}: {format_validation_error(exc)}") from None


def _config_key(loc: tuple) -> str:
    """The dotted config key of an error location, without pydantic's union-member tags
    (`training.epochs.int` -> `training.epochs`)."""
    parts, section, tag_next = [], Config, False
    for p in loc:
        if tag_next:  # the member of a Union field that failed: not part of the key
            tag_next = False
            continue
        parts.append(str(p))
        field = section.model_fields.get(p) if section is not None and isinstance(p, str) else None
        ann = field.annotation if field is not None else None
        section = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        tag_next = get_origin(ann) is Union and type(None) not in get_args(ann)
    return ".".join(parts)


def format_validation_error(exc: ValidationError) -> str:
    errors = exc.errors()
    err = errors[0]
    loc = _config_key(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{loc}: unknown key"
    msg = err["msg"]
    own = msg.startswith("Value error, ")  # our validators' messages already show the value
    if own:
        msg = msg[len("Value error, "):]
        # messages raised by Config._resolve already carry their key
        if not loc:
            return msg
    if kind == "missing":
        return f"{loc}: required key is missing"
    # a Union field (e.g. training.epochs: int or 'paper'): one error per member, same key
    alternatives = [e["msg"] for e in errors[1:] if e["loc"] != err["loc"] and _config_key(e["loc"]) == loc]
    for alt in alternatives:
        msg += f"; or {alt[0].lower() + alt[1:]}"
    got = err.get("input")
    shown = "" if own or isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
    return f"{loc}: {msg[0].lower() + msg[1:]}{shown}" if loc else msg


def read_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """The raw config dict of a file with `--set` overrides applied (named after the file by default)."""
    raw = read_yaml(path)
    raw.setdefault("name", Path(path).stem)
    for text in overrides:
        key, value = parse_override(text)
        raw = set_path(raw, key, value)
    return raw


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read, override, preset-merge and validate a config file."""
    return validate(apply_preset(read_config(path, overrides), str(path)), str(path))


def run_dir_for(cfg: Config, out: str | Path | None) -> Path:
    """The run directory: --out, else output.dir, else runs/<name>."""
    if out is not None:
        path, key = Path(out), "--out"
    elif cfg.output.dir:
        path, key = Path(cfg.output.dir), "output.dir"
    else:
        path, key = Path("runs") / cfg.name, "name"
    blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:  # refuse now rather than fail at the first write, after the work
        raise GbError(f"{key}: {blocker} exists and is not a directory")
    return path


def dump_config(cfg: Config) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
