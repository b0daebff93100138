"""Paper 003 (Vardi, Shamir & Srebro): GD's limit is a KKT point of Problem 2 that is not a local
(let alone global) optimum, on the paper's explicit constructions, through the library API
(`train_gd`, `fit_svm`, `compare_run`) exactly as `gb train-gd / fit-svm / compare` run it.

Each construction is trained for real and Problem 2 is solved for real (SLSQP); the only numbers
written here are the paper's closed forms (8 and 16/sqrt(17) for the 2-neuron ReLU net, 2 and 1
for the depth-2 diagonal net, m 2^(1-2/m) and m for depth m, 2 for the convolution).
"""

from __future__ import annotations

import sys

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from gbcli.config import read_config, validate
from gbcli.runs.stages import build_model
from gbcli.experiments.paper003 import Problem2, flat_theta, thm32_premise
from gbcli.runs.compare import compare_run
from gbcli.runs.stages import dataset_of, fit_svm, train_gd
from gbcli.runs.sweep import expand

S2 = 1 / math.sqrt(2)
RADII = [0.1, 0.01, 0.001]
CONSTRUCTIONS = {
    # Thm 3.2: <w1, x_i> > 0, <w2, x_i> < 0, v1 > 0
    "fc-relu": dict(x=[[1, 0.25], [-1, 0.25]], y=[1, 1], model={"kind": "relu", "hidden_units": 2,
                    "weights": {"w1": [[0.1, 1.0], [-0.2, -1.0]], "w2": [[0.5, 0.4]]}},
                    training={"step_rule": "loss-normalized", "lr": 0.02, "epochs": 2500}),
    "diag2": dict(x=[[1, 2]], y=[1], model={"kind": "diagonal", "depth": 2, "activation": "linear",
                  "weights": {"w": [[1, 0], [1, 0]]}}),
    "diag3": dict(x=[[1, 1]], y=[1], model={"kind": "diagonal", "depth": 3, "activation": "relu",
                  "weights": {"w": [[1, 1]] * 3}}),
    "conv": dict(x=[[4, S2, -4, S2]], y=[1], model={"kind": "conv", "activation": "relu",
                 "weights": {"w": [0, 1], "v": [S2, S2]}}),
    # control: all weights non-zero, depth 2, linear (Thm 4.2 part 1): GD's limit is the global optimum
    "control": dict(x=[[1, 1]], y=[1], model={"kind": "diagonal", "depth": 2, "activation": "linear",
                    "weights": {"w": [[1, 1], [1, 1]]}}),
}
# the paper's closed forms: ||theta||^2 at margin 1 of GD's limit, and of the global optimum
PAPER = {"fc-relu": (8.0, 16 / math.sqrt(17)), "diag2": (2.0, 1.0), "diag3": (3 * 2 ** (1 - 2 / 3), 3.0),
         "conv": (2.0, 2 / math.sqrt(16.5)), "control": (2.0, 2.0)}

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from theory_tables import premise_seeds  # noqa: E402  (scripts/ is not a package)


def config(name: str, loss: str = "exponential"):
    c = CONSTRUCTIONS[name]
    training = {"batch_size": None, "epochs": 200, "lr": 0.1, "loss": loss, "track": ["kkt"], "log_points": 10,
                **c.get("training", {})}
    return validate({"name": name, "dataset": {"name": "points", "x": c["x"], "y": c["y"]}, "model": c["model"],
                     "training": training,
                     "svm": {"objectives": ["nonconvex-global", "local-search", "local-search-global"],
                             "restarts": 20, "radii": RADII}})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every construction trained and searched once; the kkt.csv row of each."""
    out = {}
    for name in CONSTRUCTIONS:
        cfg, d = config(name), tmp_path_factory.mktemp(name)
        train_gd(cfg, d, progress=False)
        fit_svm(cfg, d, progress=False, echo=lambda m: None)
        compare_run(d)
        out[name] = pd.read_csv(d / "tables" / "kkt.csv").iloc[0]
    return out


@pytest.mark.parametrize("name", list(CONSTRUCTIONS))
@pytest.mark.slow
def test_gd_limit_is_the_papers_kkt_point(runs, name):
    """GD's direction, scaled to margin 1, has the paper's ||theta||^2 and a vanishing KKT residual."""
    r = runs[name]
    assert r["gd_norm_sq"] == pytest.approx(PAPER[name][0], abs=1e-2)
    assert r["kkt_residual"] < 1e-4
    assert r["kkt_point"]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONSTRUCTIONS))
def test_global_optimum_found(runs, name):
    """The random restarts reach the paper's global value; GD's limit is global only for the control."""
    r = runs[name]
    assert r["global_norm_sq"] == pytest.approx(PAPER[name][1], rel=1e-5)
    assert bool(r["global"]) == (name == "control")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fc-relu", "diag2", "diag3", "conv"])
def test_smaller_feasible_points_near_gd_limit(runs, name):
    """Within every eps of GD's limit there is a feasible point of smaller norm (not a local optimum),
    and the decrease shrinks with eps (it is a local, not a global, improvement)."""
    r = runs[name]
    best = np.array([r[f"gd_best_norm_sq_eps_{e:g}"] for e in RADII])
    assert not r["local_optimum"]
    center = r["gd_center_norm_sq"]   # float64 ||theta~||^2 the search compares with
    assert np.all(best < center * (1 - 1e-9))
    assert np.all(np.diff(center - best) < 0)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONSTRUCTIONS))
def test_nothing_smaller_near_a_genuine_optimum(runs, name):
    """Control: around the global point (and around GD's limit when it is global) the same search
    finds nothing smaller."""
    r = runs[name]
    assert not r["control_smaller_found"]
    if name == "control":
        assert r["local_optimum"]


def test_paper_perturbation_of_diagonal_net_is_feasible_and_smaller():
    """Thm 4.1's explicit perturbation w1 = w2 = (sqrt(1-e), sqrt(e/2)) of the KKT point (1,0),(1,0)
    is feasible with smaller norm, through the same margin code the searches use."""
    cfg = config("diag2")
    p2 = Problem2(cfg, build_model(cfg, 2), np.array([[1.0, 2.0]]), np.array([1.0]))
    kkt = flat_theta(build_model(cfg, 2))
    for e in (1e-2, 1e-4):
        w = [math.sqrt(1 - e), math.sqrt(e / 2)]
        theta = np.array(w + w)
        assert p2.margins(theta).min() >= 1 - 1e-12 and theta @ theta < kkt @ kkt


@pytest.mark.parametrize("name", list(CONSTRUCTIONS))
def test_numpy_margins_match_the_torch_network(name):
    """Problem 2's closed-form margins and Jacobian agree with the trained torch module (autograd)."""
    cfg = config(name)
    c = CONSTRUCTIONS[name]
    x, y = np.array(c["x"], float), np.array(c["y"], float)
    model = build_model(cfg, x.shape[1]).double()
    p2 = Problem2(cfg, model, x, y)
    rng = np.random.default_rng(0)
    for _ in range(3):
        theta = rng.standard_normal(p2.size)
        q, jac = p2.margins_jac(theta)
        params = dict(zip([n for n, _ in model.named_parameters()],
                          [torch.tensor(a, requires_grad=True) for a in p2.split(theta)]))
        f = torch.func.functional_call(model, params, (torch.tensor(x),)) * torch.tensor(y)
        assert np.allclose(f.detach().numpy(), q)
        for i in range(len(y)):
            g = torch.autograd.grad(f[i], list(params.values()), retain_graph=True)
            assert np.allclose(torch.cat([t.reshape(-1) for t in g]).numpy(), jac[i])


# ------------------------------------------------------------------ Thm 3.2 sampled on its premise (issue 36)

PREMISE_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "theory" / "kkt-premise.yaml"


def weights(model) -> tuple[np.ndarray, np.ndarray]:
    return model.w1.detach().double().numpy(), model.w2[0].detach().double().numpy()


def test_thm32_premise_accepts_the_papers_init_and_rejects_violations():
    """The paper's own init (kkt-not-optimal's fc-relu row) satisfies the premise; making v1 negative,
    or turning the second unit positive on x2, or the first negative on x1, breaks it; the order of
    the units does not matter."""
    x = np.array(CONSTRUCTIONS["fc-relu"]["x"], float)
    w1, v = weights(build_model(config("fc-relu"), 2))
    assert thm32_premise(w1, v, x) and thm32_premise(w1[::-1], v[::-1], x)
    assert not thm32_premise(w1, v * [-1, 1], x)              # v1 < 0
    assert not thm32_premise(w1 + [[0, 0], [0, 0.4]], v, x)   # <w2, x2> = 0.05 > 0: unit 2 active on x2
    assert not thm32_premise(w1 + [[-0.4, 0], [0, 0]], v, x)  # <w1, x1> = -0.05 < 0: unit 1 off on x1


def test_every_seed_of_the_premise_sweep_satisfies_the_premise():
    """Each point of kkt-premise.yaml, built as `gb sweep` builds it, satisfies Theorem 3.2's premise,
    and the lists start with the first premise seeds `premise_seeds` finds (the config's comment)."""
    _, points = expand(PREMISE_CONFIG)
    assert len(points) == 80 and {p.model.init for p in points} == {"kaiming", "torch-default"}
    for cfg in points:
        x = dataset_of(cfg).x_train
        assert thm32_premise(*weights(build_model(cfg, x.shape[1])), x), (cfg.model.init, cfg.model.init_seed)
    for init in ("kaiming", "torch-default"):
        listed = [p.model.init_seed for p in points if p.model.init == init]
        assert premise_seeds(PREMISE_CONFIG, init, 3) == listed[:3]   # scripts/theory_tables.py


@pytest.mark.slow
@pytest.mark.parametrize("init", ["kaiming", "torch-default"])
def test_premise_init_trains_to_the_theorems_kkt_point(tmp_path, init):
    """From the first premise seed of each scheme, GD (kkt-premise's training, fewer steps) ends at
    Theorem 3.2's point: ||theta||^2 = 8 at margin 1, one unit carrying the net, KKT residual ~ 0."""
    raw = read_config(PREMISE_CONFIG)
    axes = raw.pop("zip")
    seed = axes["model.init_seed"][axes["model.init"].index(init)]
    raw["model"].update(init=init, init_seed=seed)
    raw["training"].update(epochs=2000, log_points=5)
    cfg = validate(raw)
    summary = train_gd(cfg, tmp_path, progress=False)
    t = summary["track"]
    assert summary["train_error"] == 0 and t["thm32_premise"] == 1
    assert t["norm_sq_margin1"] == pytest.approx(8.0, abs=1e-2)
    assert summary["normalized_margin"] ** -1 == pytest.approx(8.0, abs=1e-2)   # the same from gb's own margin
    assert t["top_unit_share"] > 0.999 and t["kkt_residual"] < 1e-3
