"""The config schema, the only validator of a config: one pydantic section per concept, importing without torch
(solvers and instruments are asked only once every key is valid). `model` and `dataset` are unions over the
registered kinds (`UNIONS`). Validators only check: derived values (`resolution`) are filled in by
`loading.validate`, which validates again."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Discriminator, Field, StrictFloat, StrictInt, Tag, field_validator, model_validator

from gbcli.data.sources import DATASETS, SEED
from gbcli.optimizers import GEOMETRY
from gbcli.registry import DEFAULT_KIND, MODELS, instruments, kinds_with_instrument, programs
from gbcli.schema import Section
from gbcli.text import quoted, shorten

PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
GB = 1024 ** 3


def machine_memory() -> int:
    """Physical memory of this machine in bytes (what a run may use at most)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):   # not a POSIX sysconf: assume 16 GB
        return 16 * GB


DEFAULT_DATASET = "digits"

# What a key is when not what the run computes, as its field's metadata; `execution_keys()` says what each means.
ROLES = ("execution", "logging", "resolved")
EXECUTION, LOGGING, RESOLVED = ({"identity": role} for role in ROLES)


@dataclass(frozen=True)
class Kinds:
    """A section of several kinds (model, dataset): the key naming the kind, each kind's class, the default kind."""

    key: str
    classes: dict[str, type[Section]]
    default: str

    def annotation(self):
        def tag(value: Any) -> str | None:
            if isinstance(value, dict):
                return value.get(self.key, self.default)
            return getattr(value, self.key, None)

        members = tuple(Annotated[cls, Tag(kind)] for kind, cls in self.classes.items())
        return Annotated[Union[members], Discriminator(tag)]


UNIONS = {"model": Kinds("kind", {k: s.Params for k, s in MODELS.items()}, DEFAULT_KIND),
          "dataset": Kinds("name", dict(DATASETS), DEFAULT_DATASET)}
ModelSection = UNIONS["model"].annotation()
DatasetSection = UNIONS["dataset"].annotation()


class ContextsConfig(Section):
    """Hyperplane gating (protocol section 3); `count` is C per unit (global count for shallow)."""

    count: StrictInt = Field(2, ge=1, le=2 ** 20,
                             description="C: contexts per unit, a power of two (log2 C random hyperplanes per unit; "
                                         "the shallow GLN: C global contexts)")
    seed: StrictInt = Field(1, **SEED, description="seed of the hyperplane draws (and the GLNs' default "
                                                   "model.init_seed)")
    median_init: bool = Field(True, description="true: each offset is the median projection of the data pool "
                                                "(every hyperplane halves the data); false: the offsets drawn "
                                                "N(0, offset_std^2)")
    normal_std: StrictFloat = Field(36.0, gt=0, allow_inf_nan=False,
                              description="standard deviation of the hyperplane normals' coordinates, N(0, std^2)")
    offset_std: StrictFloat = Field(9.0, ge=0, allow_inf_nan=False,
                              description="standard deviation of the drawn offsets (kept only when median_init is "
                                          "false)")
    draws: Literal["ours", "published"] = Field(
        "ours", description="ours: float64 from a seeded generator; published: the published code's draw "
                            "sequence and float32 gating (protocol section 10)")

    @field_validator("count")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        if v & (v - 1):
            raise ValueError(f"must be a power of two (each context is a pattern of hyperplane sides), got {v}")
        return v


MAX_EPOCHS = 10 ** 12   # passes over the data: any more and steps overflow int64 at batch 1


class AdaptiveStepConfig(Section):
    """`training.adaptive_step`: the base step of a normalized step_rule re-estimated along the run
    (`gbcli.training.step.AdaptiveStep`)."""

    every: StrictInt = Field(100, ge=1, le=10 ** 12, description="steps between two estimates of the sharpness")
    power_iters: StrictInt = Field(10, ge=1, le=1000, description="power iterations (Hessian-vector products) per "
                                                                 "estimate")
    fraction: StrictFloat = Field(0.5, gt=0, lt=1, allow_inf_nan=False,
                                  description="the step on log R as a fraction of its stability bound 2 / sharpness")
    max_growth: StrictFloat = Field(2.0, ge=1, le=1e6, allow_inf_nan=False,
                                    description="the most eta_0 may grow from one estimate to the next")


class TrainingConfig(Section):
    """Gradient descent (protocol section 4). `paper` values are resolved from the train size."""

    batch_size: Optional[StrictInt] = Field(128, ge=1, description="null: full-batch GD")
    lr: StrictFloat = Field(0.04, gt=0, le=3.4e38, allow_inf_nan=False,   # torch trains in float32
                      description="step size (learning rate) before the milestones decay it; the base step eta_0 of a "
                                  "normalized step_rule")
    momentum: StrictFloat = Field(0.0, ge=0, lt=1, allow_inf_nan=False,
                            description="heavy-ball momentum of torch.optim.SGD (0: plain SGD; sgd only)")
    optimizer: Literal[tuple(GEOMETRY)] = Field(
        "sgd", description="the update rule (docs/optimizers.md): sgd (heavy-ball, `momentum`); adam (torch's Adam at "
                           "step lr, paper 001's appendix D; `betas`, `eps`); sign (sign descent); steepest-l1 "
                           "(greedy coordinate); steepest-l2 (normalized gradient); mirror (p-norm potential, "
                           "`mirror_p`)")
    betas: Optional[tuple[StrictFloat, StrictFloat]] = Field(
        None, description="Adam's moment decays (beta1, beta2), each in [0, 1); null: torch's (0.9, 0.999)")
    eps: Optional[StrictFloat] = Field(None, gt=0, le=1, allow_inf_nan=False,
                                       description="Adam's epsilon; null: torch's 1e-8")
    mirror_p: Optional[StrictFloat] = Field(None, gt=1, le=2, allow_inf_nan=False,
                                            description="mirror descent's p in (1, 2] (its potential ||w||_p^p / p); "
                                                        "null: 1.5")
    epochs: Union[StrictInt, Literal["paper"]] = Field(
        100, description="passes over the training set; paper: round(200 * 2000 / dataset.train_size), the published "
                         "schedule")
    lr_milestones: Union[list[StrictInt], Literal["paper"]] = Field(
        default_factory=list, description="epochs (in 1..epochs-1) at which lr is multiplied by lr_decay; paper: "
                                          "[epochs // 2]")
    lr_decay: StrictFloat = Field(0.25, gt=0, allow_inf_nan=False, description="factor lr is multiplied by at each milestone")
    loss: Literal["logistic", "exponential"] = Field(
        "logistic", description="of the margins m = y f(x), averaged: logistic log(1 + e^-m), exponential e^-m")
    batch_seed: StrictInt = Field(1, **SEED, description="seed of the minibatch order (one shuffle per epoch)")
    device: Literal["cpu", "cuda"] = Field("cpu", description="torch device to train on (cuda: refused when torch "
                                                              "sees no CUDA device)")
    log_points: StrictInt = Field(50, ge=2, le=1_000_000,
                                  description="steps logged to metrics.csv (the full training and validation sets; "
                                              "step 0 and the last included)")
    log_spacing: Literal["linear", "log"] = Field(
        "linear", description="log: geometrically spaced logged steps, for log-x plots of long runs")
    # homogeneous-normalized: with L = 2, lr / R alone grows ||w|| geometrically and the margins'
    # relative change per step with it, until the steps oscillate; this keeps it like the linear case.
    step_rule: Literal["constant", "loss-normalized", "homogeneous-normalized"] = Field(
        "constant", description="step size at step t: constant lr; loss-normalized lr / R(w_t), R the batch's mean "
                                "loss (the step on log R; for adam, Adam on log R); homogeneous-normalized lr / (R(w_t) ||w_t||^(2L-2)) for a degree-L model")
    descent: Literal["gradient", "coordinate"] = Field(
        "gradient", description="coordinate: greedy coordinate (l1 steepest) descent, AdaBoost's update")
    adaptive_step: Optional[AdaptiveStepConfig] = Field(
        None, description="re-estimate the base step of a normalized step_rule along the run from the sharpness "
                          "of log R (full batch, plain gradient descent only); null: the fixed lr. Keys: every (int >= "
                          "1, 100: steps between estimates), power_iters (int >= 1, 10), fraction (float in (0, 1), "
                          "0.5: of the stability bound 2 / sharpness), max_growth (float >= 1, 2.0: per estimate)")
    track: list[str] = Field(default_factory=list, description="instruments logged to metrics.csv (gbcli.instruments)")
    # a sweep point's id leaves it out (the results are the same), the gd manifest keeps it (metrics.csv differs)
    validation: Literal["logged", "final"] = Field(
        "logged", json_schema_extra=LOGGING,
        description="steps at which the validation error is evaluated: every logged step, or only the last "
                    "(grids that use only the final values; it changes no result, only metrics.csv)")
    # a warm start: the file's contents (not only its path) are part of the gd manifest
    init_from: Optional[str] = Field(
        None, min_length=1, max_length=4096,
        description="the gd/model.pt of a finished run of the same model (kind, sizes and gating): training starts "
                    "from its weights instead of the seeded init (read tensors-only, never through a link)")
    # in no identity (EXECUTION): an interrupted run resumes under another interval
    checkpoint_seconds: StrictFloat = Field(
        300, ge=0, allow_inf_nan=False, json_schema_extra=EXECUTION,
        description="save the training state to gd/checkpoint.pt every this many seconds and when interrupted "
                    "(SIGTERM, Ctrl-C); the same command resumes from it, bit-identical (0: no checkpoints)")

    @field_validator("epochs")
    @classmethod
    def _positive_epochs(cls, v):
        if isinstance(v, int) and not 1 <= v <= MAX_EPOCHS:
            raise ValueError(f"must be in 1..{MAX_EPOCHS:,} (the step counter is a 64-bit integer), got {shorten(str(v))}")
        return v

    @model_validator(mode="after")
    def _adaptive_alone(self) -> "TrainingConfig":
        """The adaptive step estimates the sharpness of the full batch's log R for plain gradient steps."""
        if self.adaptive_step is not None:
            for key, bad, why in (
                    ("step_rule", self.step_rule == "constant", "is constant: the adaptive step sets a normalized "
                                                                "rule's base step (loss- or homogeneous-normalized)"),
                    ("batch_size", self.batch_size is not None, "must be null (full batch): the sharpness is the full "
                                                                "training set's"),
                    ("momentum", self.momentum != 0, "must be 0: the stability bound 2 / sharpness is plain GD's"),
                    ("optimizer", self.optimizer != "sgd", "must be sgd"),
                    ("descent", self.descent != "gradient", "must be gradient")):
                if bad:
                    raise ValueError(f"training.{key}: {why} (training.adaptive_step is set)")
        return self


class SvmConfig(Section):
    """Max-margin programs to solve (protocol section 5). `restarts`, `radii` and `search_seed`
    belong to paper 003's non-convex programs and are refused for models without them."""

    objectives: list[str] = Field(default_factory=list,
                                  description="programs `gb fit-svm` solves, e.g. [svm-gln, svm-l2] (each a program of "
                                              "the model kind; --objective overrides)")
    solver: Optional[str] = Field(None, description="default: each norm's default solver (dual, certified)")
    max_iters: Optional[StrictInt] = Field(None, ge=1, description="solver iteration limit (default: the solver's own)")
    eps: Optional[StrictFloat] = Field(None, gt=0, allow_inf_nan=False,
                                 description="solver tolerance (default: the solver's own; dual: 1e-6)")
    certify_tol: StrictFloat = Field(1e-6, gt=0, lt=1, allow_inf_nan=False,
                               description="certified when relative gap and 1 - smallest margin are below this")
    # in no identity (EXECUTION): a rerun with another time limit resumes the same programs
    time_limit: Optional[StrictFloat] = Field(None, gt=0, allow_inf_nan=False, json_schema_extra=EXECUTION,
                                        description="seconds per program (dual solver): past it the solve stops "
                                                    "`inaccurate` with its bounds, and a working-set solve keeps its "
                                                    "last round for the next run to resume (default: none)")
    device: Literal["cpu", "cuda"] = Field("cpu", json_schema_extra=EXECUTION,
                                           description="where the dual solver's arrays live (cuda: refused when "
                                                       "torch sees no CUDA device)")
    restarts: StrictInt = Field(40, ge=1, le=100_000, description="nonconvex-global, local-search: random starts of each SLSQP solve")
    radii: list[StrictFloat] = Field(default_factory=lambda: [0.3, 0.1, 0.03, 0.01, 0.003, 0.001],
                               description="local-search: the distances eps to search within")
    search_seed: StrictInt = Field(0, **SEED, description="nonconvex-global, local-search: seed of the random starts")

    @field_validator("radii")
    @classmethod
    def _positive_radii(cls, v: list[float]) -> list[float]:
        # each eps is squared in the search's constraint: 1e100 keeps eps^2 a float
        if len(set(v)) < len(v):
            raise ValueError(f"lists the distance {next(r for r in v if v.count(r) > 1)!r} twice")
        if not v or len(v) > 1000 or any(not (0 < r <= 1e100) for r in v):
            raise ValueError(f"must be a list of 1 to 1000 distances, each positive and at most 1e100, "
                             f"got {shorten(str(v))}")
        return v

    @field_validator("objectives")
    @classmethod
    def _known_objectives(cls, v):
        known = programs()
        for o in v:
            if o not in known:
                raise ValueError(f"svm.objectives: {quoted(o)} is not a program (known: {', '.join(known)})")
        if len(set(v)) < len(v):   # the same program twice: one directory holds one answer
            raise ValueError(f"svm.objectives: {quoted(next(o for o in v if v.count(o) > 1))} is listed twice")
        return v


class OutputConfig(Section):
    """Where a run's results are written."""

    dir: Optional[str] = Field(None, description="the run directory (default: runs/<name>, or runs/<name>-<hash> with "
                                                 "--set overrides that change what is trained; --out overrides)")


# sbatch options (and submitit parameters) that gb sets itself, refused in sweep.slurm: the sweep
# key that sets each ("" when gb needs it as it is: the array, its logs, submitit's signal and requeue)
_SLURM_OWN = {
    "partition": "partition", "time": "time_min", "cpus_per_task": "cpus", "mem": "mem_gb", "mem_per_cpu": "mem_gb",
    "mem_per_gpu": "mem_gb", "cpus_per_gpu": "cpus", "array_parallelism": "jobs", "gres": "gpus", "gpus": "gpus",
    "gpus_per_node": "gpus", "gpus_per_task": "gpus", "num_gpus": "gpus", "account": "account", "qos": "qos",
    "constraint": "constraint", "array": "", "map_count": "", "nodes": "", "ntasks": "", "ntasks_per_node": "",
    "output": "", "error": "", "open_mode": "", "stderr_to_stdout": "", "signal": "", "no_requeue": "",
    "setup": "", "teardown": "", "srun_args": "", "use_srun": "", "additional_parameters": "", "folder": "",
    "command": "", "wrap": "", "chdir": "", "export": "", "hold": "", "wait": "", "parsable": "", "test_only": "",
}


# the tracking stores gb logs to (MLflow's URI schemes; a plain path is MLflow's file store)
EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.+=-]{0,199}")   # an MLflow experiment: a name, never a path
TRACKING_SCHEMES = ("sqlite", "file", "http", "https", "postgresql", "mysql", "mssql", "databricks")


def tracking_uri_problem(uri: str) -> str | None:
    """Why `uri` is not a tracking URI gb logs to, else None (the one rule: the config and the export)."""
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower() if ":" in uri else ""
    if any(not c.isprintable() for c in uri) or not uri.strip():
        return "is empty or holds a control character"
    if scheme not in TRACKING_SCHEMES and (scheme or uri.startswith("-")):
        return f"is not a tracking URI gb logs to ({', '.join(TRACKING_SCHEMES)}, or a folder)"
    return None


class TrackingConfig(Section):
    """Live tracking: each stage logs to MLflow while it runs (the optional extra `gbcli[mlflow]`)."""

    mlflow: Optional[str] = Field(None, max_length=2000,
                                  description="an MLflow tracking URI (http://host:5000, sqlite:///path/mlflow.db, ...): "
                                              "parameters at the start, the training curves as they are logged, "
                                              "results, tables and figures at the end; a sweep is the parent run of "
                                              "its points. A store that does not answer costs one warning line")
    experiment: str = Field("gb", max_length=200, description="the MLflow experiment (a name, not a path)")

    @field_validator("mlflow")
    @classmethod
    def _uri(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and (why := tracking_uri_problem(v)):
            raise ValueError(f"{quoted(v, 80)} {why}")
        return v

    @field_validator("experiment")
    @classmethod
    def _experiment(cls, v: str) -> str:
        if not EXPERIMENT_NAME.fullmatch(v) or ".." in v:
            raise ValueError(f"{quoted(v, 60)} is not a name (letters, digits, space and _ . + = -, starting with a "
                             f"letter or digit, no '..')")
        return v


class SweepConfig(Section):
    """How `gb sweep` runs its points (not part of a point's identity); the command line overrides these."""

    executor: Literal["local", "slurm"] = Field(
        "local", description="local: a process pool on this machine; slurm: one Slurm job array (submitit)")
    jobs: StrictInt = Field(1, ge=1, le=1024, description="local: processes at once; slurm: array tasks at once")
    partition: Optional[str] = Field(None, description="slurm partition (default: the cluster's default)")
    time_min: StrictInt = Field(60, ge=1, description="slurm time limit per point, minutes")
    cpus: StrictInt = Field(1, ge=1, le=1024, description="slurm CPUs per point")
    mem_gb: StrictFloat = Field(4, gt=0, allow_inf_nan=False, description="slurm memory per point, GB")
    threads: Optional[StrictInt] = Field(1, ge=1, le=1024, description="local: torch threads per job (null: the cores "
                                         "split between the jobs); one is fastest when jobs share a busy machine")
    batch: StrictInt = Field(12, ge=1, le=1024, description="train up to this many networks that share data and "
                             "batch order as one computation (same trajectories; gbcli.training.batched)")
    solve_cache: bool = Field(True, description="reuse the solution of a program identical to one already solved "
                                                "in this sweep (OUT/solves/, gbcli.store.cache)")
    gpus: StrictInt = Field(0, ge=0, le=64, description="slurm GPUs per point (gres gpu:N); 0: none asked for")
    account: Optional[str] = Field(None, description="slurm account to charge (sbatch --account; default: yours)")
    qos: Optional[str] = Field(None, description="slurm quality of service (sbatch --qos)")
    constraint: Optional[str] = Field(None, description="slurm node features required (sbatch --constraint, "
                                                        "e.g. 'intel&ib')")
    # its values are judged by _slurm_values (strictly: a string, an integer or a boolean)
    slurm: dict[str, Any] = Field(
        default_factory=dict,
        description="further sbatch options, name -> a string, integer or boolean (e.g. {exclude: node3, nice: 10}): "
                    "submitit's parameter when it has one, else an #SBATCH line; true: a bare flag, false: left out. "
                    "The options gb sets itself (partition, time, cpus, memory, gpus, array, output, signal ...) are "
                    "refused here: use the sweep keys")

    @field_validator("partition", "account", "qos", "constraint")
    @classmethod
    def _slurm_word(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and (not v.strip() or any(c.isspace() or not c.isprintable() for c in v)):
            raise ValueError(f"{quoted(v)}: a Slurm name is one word without spaces or control characters")
        return v

    @field_validator("slurm", mode="before")
    @classmethod
    def _slurm_values(cls, v: Any) -> Any:
        """One line naming the option whose value is not a string, an integer or a boolean (a
        float, a list, null): the values are written into the sbatch script as they are."""
        if isinstance(v, dict):
            for key, value in v.items():
                if not isinstance(value, (str, int)):   # bool is an int; float, list, null are not
                    raise ValueError(f"{quoted(str(key))}: {shorten(repr(value))} is not a string, integer or boolean")
        return v

    @field_validator("slurm")
    @classmethod
    def _slurm_options(cls, v: dict) -> dict:
        seen: dict[str, str] = {}
        for key, value in v.items():
            name = key.replace("-", "_")
            if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", name):
                raise ValueError(f"{quoted(key)} is not an sbatch option name (lower-case letters, digits, '_', '-')")
            if name in seen:
                raise ValueError(f"{quoted(key)} and {quoted(seen[name])} name the same option")
            seen[name] = key
            # sbatch takes any unambiguous abbreviation of an option: a prefix of one gb sets is refused too
            own = next((o for o in _SLURM_OWN if o.startswith(name)), None)
            if own is not None:
                raise ValueError(f"{quoted(key)}: gb sets {own.replace('_', '-')} itself"
                                 + (f" (use sweep.{_SLURM_OWN[own]})" if _SLURM_OWN[own] else ""))
            if isinstance(value, str) and (not value or any(not c.isprintable() for c in value)):
                raise ValueError(f"{quoted(key)}: its value must be a non-empty line without control characters")
        return v


class Config(Section):
    """A run: its data, network, gating, training, programs and output (and a sweep's axes)."""

    name: str = Field("run", json_schema_extra=EXECUTION,
                      description="names the default run directory runs/<name> (default: the config file's name; "
                                  "letters, digits, '.', '_', '+', '-')")
    preset: Optional[Literal["paper"]] = Field(
        None, json_schema_extra=RESOLVED,
        description="paper: start from the published settings (gbcli/config/presets/paper.yaml); the config's own "
                    "keys override them")
    dataset: DatasetSection = Field(default_factory=lambda: DATASETS[DEFAULT_DATASET](),
                                    description=f"the data (a dataset kind, chosen by dataset.name; default "
                                                f"{DEFAULT_DATASET})")
    model: ModelSection = Field(default_factory=lambda: MODELS[DEFAULT_KIND].Params(),
                                description=f"the network (a model kind, chosen by model.kind; default {DEFAULT_KIND})")
    contexts: ContextsConfig = Field(default_factory=ContextsConfig,
                                     description="the hyperplane gating of the GLN kinds")
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="gradient descent")
    svm: SvmConfig = Field(default_factory=SvmConfig, description="the max-margin programs `gb fit-svm` solves")
    output: OutputConfig = Field(default_factory=OutputConfig, json_schema_extra=EXECUTION,
                                 description="where the results are written")
    grid: Optional[dict[str, list[Any]]] = Field(None, json_schema_extra=RESOLVED,
                                                 description="sweep axes: dotted key -> values (full product)")
    zip: Optional[dict[str, list[Any]]] = Field(None, json_schema_extra=RESOLVED,
                                                description="sweep axes varied together (equal lengths)")
    sweep: SweepConfig = Field(default_factory=SweepConfig, json_schema_extra=EXECUTION,
                               description="how `gb sweep` runs its points")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, json_schema_extra=EXECUTION,
                                     description="live tracking in MLflow while the stages run")

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not PLAIN_NAME.fullmatch(v):
            raise ValueError(f"{quoted(v)} is not a plain name (letters, digits, '.', '_', '+', '-'; no '/', at "
                             f"most 128 characters): it names the run directory runs/<name>")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "Config":
        """Cross-section checks (no field is changed), once every key is valid: a typo is answered before torch."""
        spec = self.spec
        t = self.training
        known = instruments() if t.track else {}   # torch: only for a config that tracks instruments
        for name in t.track:
            if name not in known:
                raise ValueError(f"training.track: {quoted(name)} is not an instrument (known: {', '.join(known)})")
        if len(set(t.track)) < len(t.track):   # an instrument's columns once per metrics.csv
            raise ValueError(f"training.track: {quoted(next(n for n in t.track if t.track.count(n) > 1))} is listed twice")
        if isinstance(t.epochs, int) and isinstance(t.lr_milestones, list):
            bad = [m for m in t.lr_milestones if not 0 < m < t.epochs]
            if bad:
                raise ValueError(f"training.lr_milestones: epochs {shorten(str(bad))} are outside 1..{t.epochs - 1}")
        for obj in self.svm.objectives:
            if obj not in spec.programs:
                raise ValueError(f"svm.objectives: {obj} does not describe a {self.model.kind} model "
                                 f"(use one of {', '.join(spec.programs)})")
        for key in sorted(self.svm.model_fields_set & self.unused_svm_keys()):
            raise ValueError(f"svm.{key}: unknown key for a {self.model.kind} model (none of its programs "
                             f"uses it)")
        # The instruments are defined for exactly homogeneous models: with an output bias neither the normalized
        # margin nor the KKT conditions describe the trained predictor, which would be measured wrongly.
        if t.track and not spec.homogeneous(self.model) and any(known[n].needs_homogeneous for n in t.track):
            raise ValueError("training.track: the instruments need an exactly homogeneous model; "
                             "set model.output_bias: false")
        for name in t.track:
            ins = known[name]
            if ins.needs_matching and spec.matching_program(self) is None:
                raise ValueError(f"training.track: {name} needs a matching convex program, which a "
                                 f"{self.model.kind} model does not have (kkt works for every model)")
            if not ins.applies(spec):
                raise ValueError(f"training.track: {name} ({ins.description}) is for model.kind "
                                 f"{', '.join(kinds_with_instrument(name))}")
        if self.svm.solver is not None:
            from gbcli.programs.solvers import NAMES   # the registered names, without torch

            if self.svm.solver not in NAMES:
                raise ValueError(f"svm.solver: {quoted(self.svm.solver)} is not a solver (known: "
                                 f"{', '.join(NAMES)})")
        if t.optimizer != "sgd":
            # loss-normalized is Adam on log R (grad R / R keeps the size Adam's epsilon assumes negligible);
            # homogeneous-normalized would rescale Adam's own step sizes
            adam = t.optimizer == "adam"
            why = "Adam keeps its own moments and step sizes" if adam else f"{t.optimizer} takes its own steps"
            for key, bad in (("momentum", t.momentum != 0),
                             ("step_rule", adam and t.step_rule == "homogeneous-normalized"),
                             ("descent", t.descent != "gradient")):
                if bad:
                    raise ValueError(f"training.{key}: is for training.optimizer: sgd ({why})")
        for key, owner in (("betas", "adam"), ("eps", "adam"), ("mirror_p", "mirror")):
            if getattr(t, key) is not None and t.optimizer != owner:
                raise ValueError(f"training.{key}: is for training.optimizer: {owner}")
        if t.betas is not None and not all(0 <= b < 1 for b in t.betas):
            raise ValueError(f"training.betas: each must be in [0, 1), got {list(t.betas)}")
        if t.descent == "coordinate" and not spec.coordinate_descent:
            able = ", ".join(k for k, s in MODELS.items() if s.coordinate_descent)
            raise ValueError(f"training.descent: coordinate descent is for model.kind {able}")
        spec.check(self)
        d, ram = self.dataset, machine_memory()
        # refuse, before anything is allocated, a dataset (resolved: both sizes known) larger than the machine's memory
        if d.val_size is not None and d.train_size is not None and d.pool_bytes() > ram:
            splits = {"dataset.train_size": d.train_size, "dataset.val_size": d.val_size}
            largest = max(splits, key=splits.get)
            if splits[largest] > d.source_size():   # a split larger than its pool: that key is what to lower
                key = largest
            elif hasattr(d, "n_samples") and d.n_samples > d.train_size + d.val_size:
                key = "dataset.n_samples"
            else:
                key = "dataset.dim"
            raise ValueError(f"{key}: the dataset needs about {d.pool_bytes() / GB:.1f} GB, more than this "
                             f"machine's {ram / GB:.0f} GB")
        return self

    @property
    def spec(self):
        return MODELS[self.model.kind]

    @property
    def init_seed(self) -> int:
        return self.spec.init_seed(self)

    @property
    def units(self) -> int:
        """Number of gated units H (1 for the shallow GLN and the linear model)."""
        return self.spec.units(self.model)

    def resolution(self) -> dict:
        """The values derived from others as nested updates ({} when none is left): the default validation
        size, a points set's sizes, the `paper` schedule (200 * 2000 / N epochs, the decay at half)."""
        d, t = self.dataset, self.training
        n = d.train_size if d.train_size is not None else d.source_size()
        epochs = max(1, round(200 * 2000 / n)) if t.epochs == "paper" else t.epochs
        ds = {"train_size": n} if d.train_size is None else {}
        if d.val_size is None:
            ds["val_size"] = d.default_val_size() if d.train_size is not None else d.source_size()
        tr = {"epochs": epochs} if t.epochs == "paper" else {}
        if t.lr_milestones == "paper":
            tr["lr_milestones"] = [epochs // 2]
        return {key: upd for key, upd in (("dataset", ds), ("training", tr)) if upd}

    def unused_svm_keys(self) -> frozenset[str]:
        """The svm keys some program declares (`Program.options`: paper 003's restarts, radii, search_seed) but none
        of this model's programs uses: its config refuses them."""
        declared = frozenset(o for p in programs().values() for o in p.options)
        return declared - {o for p in self.spec.programs.values() for o in p.options}

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain data, saved next to every result (it validates to the same Config),
        without the svm keys no program of the model uses."""
        exclude: dict = {k: True for k in ("grid", "zip") if getattr(self, k) is None}
        if unused := self.unused_svm_keys():
            exclude["svm"] = unused
        return self.model_dump(mode="json", exclude=exclude)


def section_of(name: str) -> type[Section] | None:
    """The class of a top-level section of one kind (training, svm, ...), else None (a value, or a `UNIONS`)."""
    field = Config.model_fields.get(name)
    ann = field.annotation if field is not None else None
    return ann if isinstance(ann, type) and issubclass(ann, Section) else None


@functools.cache
def execution_keys(*roles: str) -> frozenset[str]:
    """The dotted keys that do not change what a run computes (`sweep`: a whole section; `model.<key>` whatever
    the kind), read from the fields' marks; `roles` (default: all) selects among them:
    "execution": how, where or how often a stage runs; left out of every identity.
    "logging": only what is logged changes; left out of a point's id, kept in the gd manifest.
    "resolved": a source of other keys' values (preset, grid, zip); left out of a point's id, which holds
    their effect (an override of one does change what runs)."""
    wanted = set(roles or ROLES)
    if unknown := wanted - set(ROLES):
        raise ValueError(f"execution_keys: {', '.join(sorted(unknown))} is not a role ({', '.join(ROLES)})")
    classes: list[tuple[str, type[Section]]] = [("", Config)]
    classes += [(name, cls) for name in Config.model_fields if (cls := section_of(name)) is not None]
    classes += [(name, cls) for name, kinds in UNIONS.items() for cls in kinds.classes.values()]
    return frozenset(f"{prefix}.{key}" if prefix else key for prefix, cls in classes
                     for key, field in cls.model_fields.items()
                     if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("identity") in wanted)
