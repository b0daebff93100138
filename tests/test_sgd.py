"""gbcli.optimizers.SGD takes torch.optim.SGD's steps bit for bit and shares its checkpoint format."""

import pytest
import torch
from torch import nn

from gbcli.optimizers import SGD


def _net(seed: int, sparse: bool) -> nn.Module:
    torch.manual_seed(seed)
    return nn.ModuleDict({"emb": nn.Embedding(7, 4, sparse=sparse), "lin": nn.Linear(4, 1)}).double()


def _loss(net: nn.Module, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(step)
    idx = torch.randint(0, 7, (5,), generator=g)
    y = torch.randn(5, generator=g, dtype=torch.float64)
    return nn.functional.softplus(-y * net["lin"](net["emb"](idx)).squeeze(1)).mean()


def _train(net: nn.Module, opt, steps: range, lrs=(0.3, 0.05)) -> None:
    for step in steps:
        for g in opt.param_groups:
            g["lr"] = lrs[step % 2]   # the loop sets lr per epoch: a changing lr must be read each step
        opt.zero_grad(set_to_none=True)
        _loss(net, step).backward()
        opt.step()


@pytest.mark.parametrize("momentum,sparse", [(0.0, False), (0.0, True), (0.9, False)])
def test_the_same_steps_as_torch_sgd_bit_for_bit(momentum, sparse):
    mine, ref = _net(0, sparse), _net(0, sparse)
    _train(mine, SGD(mine.parameters(), lr=0.3, momentum=momentum), range(40))
    _train(ref, torch.optim.SGD(ref.parameters(), lr=0.3, momentum=momentum), range(40))
    moved = _net(0, sparse)
    for (name, a), b, c in zip(mine.named_parameters(), ref.parameters(), moved.parameters()):
        assert torch.equal(a, b), name
        assert not torch.equal(a, c), f"{name} never moved: the comparison shows nothing"


@pytest.mark.parametrize("first,second", [(SGD, torch.optim.SGD), (torch.optim.SGD, SGD)])
def test_a_checkpoint_of_either_resumes_in_the_other(first, second):
    """20 steps with one, its state_dict loaded by the other for 20 more: the same weights as 40
    uninterrupted steps of torch.optim.SGD (the momentum buffer crosses over exactly)."""
    whole = _net(1, False)
    _train(whole, torch.optim.SGD(whole.parameters(), lr=0.3, momentum=0.9), range(40))
    net = _net(1, False)
    a = first(net.parameters(), lr=0.3, momentum=0.9)
    _train(net, a, range(20))
    saved = a.state_dict()
    assert set(saved["state"]) == {0, 1, 2} and all(set(s) == {"momentum_buffer"} for s in saved["state"].values())
    b = second(net.parameters(), lr=0.3, momentum=0.9)
    assert saved["param_groups"][0].keys() == b.state_dict()["param_groups"][0].keys()
    b.load_state_dict(saved)
    _train(net, b, range(20, 40))
    for x, y in zip(net.parameters(), whole.parameters()):
        assert torch.equal(x, y)
