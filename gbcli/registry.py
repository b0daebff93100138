"""The registries: every model kind, instrument and report, listed once. A model kind is one module in
`gbcli/models/` and one line in `MODELS` (importable without torch: configs are validated first); the
papers' instruments and reports come from entry points and resolve on first use (PEP 562).
"""

from __future__ import annotations

import functools
from importlib.metadata import distributions
from typing import TYPE_CHECKING

from gbcli.errors import GbError
from gbcli.models import conv, convnet, deep_linear, diagonal, frelu, gln, gln3, leaky, linear, relu, residual, shallow
from gbcli.models.base import ModelSpec, Program

if TYPE_CHECKING:
    from gbcli.instruments.base import Instrument

MODELS: dict[str, ModelSpec] = {m.SPEC.kind: m.SPEC for m in (
    gln, shallow, relu, frelu, linear, leaky, diagonal, conv, deep_linear, gln3, convnet, residual)}

DEFAULT_KIND = gln.SPEC.kind   # a config without model.kind


EXPERIMENTS = "gbcli.experiments"   # the entry-point group where the papers' modules register


@functools.cache
def experiments() -> tuple:
    """The papers' modules, in name order: the entry points of the group `gbcli.experiments` (a separate
    package can add one), from every installed distribution (a stale egg-info in a source tree hides none)."""
    found = {ep.name: ep for dist in distributions() for ep in dist.entry_points.select(group=EXPERIMENTS)}
    if not found:
        raise GbError(f"no experiment is registered (entry points {EXPERIMENTS!r}): gbcli's installed metadata "
                      f"is stale or missing; reinstall it (pip install -e .)")
    return tuple(found[name].load() for name in sorted(found))


@functools.cache
def instruments() -> dict[str, Instrument]:
    """Every instrument `training.track` may name: the general ones, then each paper's."""
    from gbcli.instruments import core

    return {**core.INSTRUMENTS, **{k: v for e in experiments() for k, v in e.INSTRUMENTS.items()}}


def __getattr__(name: str):
    if name not in ("INSTRUMENTS", "RUN_REPORTS", "SWEEP_REPORTS"):
        raise AttributeError(f"module 'gbcli.registry' has no attribute {name!r}")
    value = instruments() if name == "INSTRUMENTS" else tuple(r for e in experiments() for r in getattr(e, name))
    globals()[name] = value
    return value


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
    return [k for k, s in MODELS.items() if instruments()[name].applies(s)]
