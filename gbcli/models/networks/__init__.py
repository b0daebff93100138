"""The model kinds' torch modules, imported only when a kind builds a network (`gbcli.models.base.networks`)."""

from __future__ import annotations

import torch
from torch import nn

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)


class Network(nn.Module):
    """A kind's torch module, called as `model(x, ctx)`."""

    def weights(self) -> list[torch.Tensor]:
        """The homogeneous weights: every parameter but the biases, in registration order."""
        return [p for name, p in self.named_parameters() if not name.endswith("bias")]
