"""One contract over every registered model kind and each of its programs (as scikit-learn's
`parametrize_with_checks` runs one contract over every estimator): the config round-trips, the
network builds deterministically and is homogeneous of its declared degree, it trains, its
checkpoint reloads to the same predictions, each program solves with a certificate, and the
tables pair the program with the network. A new model kind with its programs is checked here
without a line of test code: its spec's `example(program)` is the instance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from gbcli.config import validate
from gbcli.registry import MODELS
from gbcli.runs.compare import compare_run
from gbcli.runs.stages import build_model, fit_svm, load_trained, prepare, train_gd
from gbcli.store.identity import point_id

CASES = [pytest.param(kind, program, id=f"{kind}-{program}") for kind, spec in MODELS.items() for program in spec.programs]
TOL = 1e-6


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Train each distinct example config once: key -> (cfg, problem, run directory)."""
    cache = {}

    def get(kind: str, program: str):
        cfg = validate(MODELS[kind].example(program), f"{kind} example")
        key = point_id(cfg.model_copy(update={"svm": cfg.svm.model_copy(update={"objectives": []})}))
        if key not in cache:
            run = tmp_path_factory.mktemp(f"{kind}-{key}")
            problem = prepare(cfg)
            summary = train_gd(cfg, run, progress=False, problem=problem)
            cache[key] = (cfg, problem, run, summary)
        c, problem, run, summary = cache[key]
        return cfg, problem, run, summary

    return get


@pytest.mark.parametrize("kind, program", CASES)
def test_model_and_program_contract(kind, program, trained):
    spec = MODELS[kind]
    cfg, problem, run, summary = trained(kind, program)
    # the config: kind and predictor, a dump that validates to the same config
    assert cfg.model.kind == kind and cfg.model.predictor == f"gd-{kind}" and program in spec.programs
    assert validate(cfg.to_dict()).to_dict() == cfg.to_dict()
    # the network: deterministic in the seeds, weights declared, homogeneous of its degree
    ds = problem.dataset
    a, b = build_model(cfg, ds.dim).double(), build_model(cfg, ds.dim).double()
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb and torch.equal(pa, pb)
    assert a.weights() and all(w.requires_grad for w in a.weights())
    x = torch.tensor(ds.x_train, dtype=torch.float64)
    ctx = None if problem.ctx_train is None else torch.as_tensor(problem.ctx_train)
    with torch.no_grad():
        out = a(x, ctx)
        assert out.shape == (len(x),) and torch.isfinite(out).all()
        if spec.homogeneous(cfg.model):
            for w in a.weights():
                w.mul_(2.0)
            torch.testing.assert_close(a(x, ctx), out * 2.0 ** cfg.model.homogeneity, rtol=1e-9, atol=1e-12)
    # training wrote a finished stage, and its checkpoint reloads to the same predictions
    assert summary["status"] == "ok" and summary["steps"] > 0 and np.isfinite(summary["train_loss"])
    net = load_trained(run, cfg, ds.dim)
    with torch.no_grad():
        reloaded = net(torch.tensor(ds.x_val, dtype=torch.float64),
                       None if problem.ctx_val is None else torch.as_tensor(problem.ctx_val)).numpy()
    np.testing.assert_allclose(reloaded, np.load(run / "gd" / "predictions.npz")["val_out"], rtol=1e-4, atol=1e-5)
    # the program: solved with a certificate (optimal or certified infeasible; paper 003's
    # non-convex programs: a feasible point at margin 1)
    (result,) = fit_svm(cfg, run, [program], progress=False, problem=problem, echo=lambda m: None)
    if spec.programs[program].norm is not None:
        assert result["status"] in ("optimal", "infeasible") and result["certified"], result
        if result["status"] == "optimal":
            assert result["min_margin"] >= 1 - TOL and abs(result["rel_gap"]) <= TOL
    else:
        assert result["status"] == "optimal" and result["min_margin"] >= 1 - TOL, result
    # the tables: the network and the program, paired when the program has a predictor
    errors, incons = compare_run(run)
    assert {f"gd-{kind}", program} <= set(errors["predictor"])
    row = errors[errors["predictor"] == program].iloc[0]
    assert row["status"] == result["status"] and row["model"] == kind
    if result["status"] == "optimal":
        pair = incons[incons["predictor_a"] == program]
        assert len(pair) == 1 and 0 <= float(pair["inconsistency"].iloc[0]) <= 1
    assert pd.read_csv(run / "tables" / "errors.csv")["predictor"].tolist() == errors["predictor"].tolist()
