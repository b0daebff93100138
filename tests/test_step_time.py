"""The fast training step (issue 47, gbcli.training.step.Step; timed by benchmarks/step_time.py):
the full batch is the training set itself, in the column-major layout the GLN's faster products
take, with the same objective and gradient as the row-major product; the fixed gates are computed
once but follow a context tensor changed in place; a batched group trained full batch follows the
plain loop. No timing is asserted here (that is the benchmark's)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gbcli.config import Config
from gbcli.models.networks.gln import DeepGLN, column_major
from gbcli.runs.stages import build_model, prepare, train_gd, train_gd_group
from gbcli.training.batched import batch_key
from gbcli.optimizers import SGD
from gbcli.training.step import Step

BODY = {"name": "s", "dataset": {"name": "digits", "train_size": 300, "val_size": 200},
        "model": {"kind": "gln", "hidden_units": 4, "output_bias": False},
        "contexts": {"count": 2, "seed": 1, "median_init": True},
        "training": {"batch_size": None, "epochs": 6, "log_points": 3, "lr": 0.5,
                     "step_rule": "homogeneous-normalized", "checkpoint_seconds": 0}}


def config(**training) -> Config:
    body = json.loads(json.dumps(BODY))
    body["training"].update(training)
    return Config.model_validate(body)


def step_of(cfg: Config, batch: int | None = None):
    problem = prepare(cfg)
    ds = problem.dataset
    torch.manual_seed(cfg.init_seed)
    model = build_model(cfg, ds.dim)
    xt, yt = torch.tensor(ds.x_train, dtype=torch.float32), torch.tensor(ds.y_train, dtype=torch.float32)
    ct = torch.tensor(problem.ctx_train)
    return Step(model, cfg, xt, yt, ct, SGD(model.parameters(), lr=cfg.training.lr), batch or xt.shape[0]), xt


def grads(step: Step, x: torch.Tensor) -> tuple[float, list[torch.Tensor]]:
    step.model.zero_grad(set_to_none=True)
    loss = step.objective(step.yt * step.model(x, step.ct), step.t.loss)
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in step.model.parameters()]


def test_the_full_batch_is_the_training_set_column_major_with_the_row_major_gradient():
    step, xt = step_of(config())
    x, y, c = step.minibatch(torch.randperm(xt.shape[0]), 0)   # no permutation: the tensors themselves
    assert y is step.yt and c is step.ct and x is step.xt
    assert column_major(x) and not column_major(xt) and torch.equal(x, xt)
    loss_c, g_c = grads(step, x)
    loss_r, g_r = grads(step, xt.contiguous())
    assert loss_c == pytest.approx(loss_r, rel=1e-6)
    for a, b in zip(g_c, g_r):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    assert any(float(g.abs().max()) > 0 for g in g_c)


def test_a_minibatch_is_the_permutations_rows():
    step, xt = step_of(config(batch_size=64), batch=64)
    perm = torch.randperm(xt.shape[0], generator=torch.Generator().manual_seed(3))
    x, y, c = step.minibatch(perm, 2)
    idx = perm[128:192]
    assert torch.equal(x, xt[idx]) and torch.equal(y, step.yt[idx]) and torch.equal(c, step.ct[idx])
    assert not column_major(x)


@pytest.mark.parametrize("n", [50, 5000])   # below and above the size whose gates are kept
def test_the_kept_gates_follow_a_context_tensor_changed_in_place(n):
    torch.manual_seed(0)
    net = DeepGLN(3, 2, 7, output_bias=False)
    torch.nn.init.normal_(net.w1)
    torch.nn.init.normal_(net.w2)
    x = torch.randn(n, 7)
    ctx = torch.randint(0, 2, (n, 3))
    first = net(x, ctx)
    ctx[: n // 2] = 1 - ctx[: n // 2]   # in place: the same tensor, other gates
    fresh = DeepGLN(3, 2, 7, output_bias=False)
    fresh.load_state_dict(net.state_dict())
    assert torch.allclose(net(x, ctx), fresh(x, ctx.clone()), rtol=1e-6, atol=1e-6)
    assert not torch.allclose(net(x, ctx), first)
    assert torch.allclose(net(x.T.contiguous().T, ctx), fresh(x, ctx.clone()), rtol=1e-5, atol=1e-5)


def test_a_batched_full_batch_group_follows_the_plain_loop(tmp_path):
    cfgs = [config(step_rule="constant", lr=0.1, momentum=m) for m in (0.0, 0.9)]
    cfgs = [Config.model_validate({**c.to_dict(), "contexts": {**c.to_dict()["contexts"], "seed": s}})
            for c, s in zip(cfgs, (1, 2))]
    assert len({batch_key(c) for c in cfgs}) == 1 and batch_key(cfgs[0]) is not None
    plain = [tmp_path / f"plain{k}" for k in range(2)]
    batched = [tmp_path / f"batched{k}" for k in range(2)]
    for c, d in zip(cfgs, plain):
        train_gd(c, d, progress=False)
    train_gd_group(cfgs, batched)
    for a, b in zip(plain, batched):
        wa = torch.load(a / "gd/model.pt", weights_only=False)["state_dict"]
        wb = torch.load(b / "gd/model.pt", weights_only=False)["state_dict"]
        assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) <= 1e-6
        oa, ob = np.load(a / "gd/predictions.npz"), np.load(b / "gd/predictions.npz")
        assert all(np.allclose(oa[k], ob[k], rtol=0, atol=1e-6) for k in oa.files)
