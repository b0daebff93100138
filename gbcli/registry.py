"""The registries: every model kind, instrument and report, listed once.

Adding a model kind with its programs is one module in `gbcli/models/` and one line in `MODELS`;
the config (its `model` section is a union discriminated by `kind`), the run stages, sweeps, the
instruments, tables and figures all ask this registry.
"""

from __future__ import annotations

from gbcli.errors import GbError
from gbcli.experiments import paper001, paper002, paper003, paper004
from gbcli.instruments import core
from gbcli.models import conv, convnet, deep_linear, diagonal, frelu, gln, gln3, leaky, linear, relu, residual, shallow
from gbcli.models.base import ModelSpec, Program

MODELS: dict[str, ModelSpec] = {spec.kind: spec for spec in (
    gln.SPEC,
    shallow.SPEC,
    relu.SPEC,
    frelu.SPEC,
    linear.SPEC,
    leaky.SPEC,
    diagonal.SPEC,
    conv.SPEC,
    deep_linear.SPEC,
    gln3.SPEC,
    convnet.SPEC,
    residual.SPEC,
)}

DEFAULT_KIND = gln.SPEC.kind   # a config without model.kind

EXPERIMENTS = (paper001, paper002, paper003, paper004)
INSTRUMENTS = {**core.INSTRUMENTS, **{k: v for e in EXPERIMENTS for k, v in e.INSTRUMENTS.items()}}
RUN_REPORTS = tuple(r for e in EXPERIMENTS for r in e.RUN_REPORTS)
SWEEP_REPORTS = tuple(r for e in EXPERIMENTS for r in e.SWEEP_REPORTS)


def spec_of(cfg) -> ModelSpec:
    """The spec of a config's model kind."""
    return MODELS[cfg.model.kind]


def programs() -> dict[str, Program]:
    """Every program name any model declares (a name means the same program wherever it appears)."""
    out: dict[str, Program] = {}
    for spec in MODELS.values():
        for name, prog in spec.programs.items():
            out.setdefault(name, prog)
    return out


def program_of(cfg, objective: str) -> Program:
    spec = spec_of(cfg)
    if objective not in spec.programs:
        raise GbError(f"svm.objectives: {objective} does not describe a {cfg.model.kind} model "
                      f"(use one of {', '.join(spec.programs)})")
    return spec.programs[objective]


def kinds_with_instrument(name: str) -> list[str]:
    return [k for k, s in MODELS.items() if INSTRUMENTS[name].applies(s)]
