from __future__ import annotations

import torch
from torch import nn

from gbcli.errors import GbError
from gbcli.models.networks import Network

CHUNK = 512   # images per forward pass


class ConvNet(Network):
    """conv layers -> flatten -> fc(., fc_units) -> fc(fc_units, 1), ReLU after all but the last."""

    def __init__(self, convs, fc_units: int, image: int):
        super().__init__()
        self.image = image
        layers, ch, side = [], 1, image
        for n, k, s, p in convs:
            layers.append(nn.Conv2d(ch, n, k, s, p))
            ch, side = n, (side + 2 * p - k) // s + 1
            if side < 1:
                raise GbError(f"model.convs: the layer conv({n}, {k}, {s}, {p}) leaves no pixels")
        self.convs = nn.ModuleList(layers)
        self.fc1 = nn.Linear(ch * side * side, fc_units)
        self.fc2 = nn.Linear(fc_units, 1)

    def features(self, x: torch.Tensor, pre: bool = False) -> list[torch.Tensor]:
        """The input images and every hidden layer's output, flattened: after its ReLU, or with `pre` before
        it (only pre-activations can show appendix D's orthogonal separability in full)."""
        side = self.image
        h = x[:, :side * side].reshape(len(x), 1, side, side)   # the constant 1 coordinate is dropped
        out = [h.flatten(1)]
        for layer in [*self.convs, self.fc1]:
            z = layer(h if layer is not self.fc1 else h.flatten(1))
            h = torch.relu(z)
            out.append((z if pre else h).flatten(1))
        return out

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        # in chunks: the training loop evaluates the whole training set at once, and one pass over
        # 10,000 images holds ~1 GB per convolution's activations
        return torch.cat([self.fc2(self.features(c)[-1])[:, 0] for c in x.split(CHUNK)])

    def matrices(self) -> dict[str, torch.Tensor]:
        """The weight matrices whose rank the paper studies: the first fc layer, rows = neurons."""
        return {"fc1": self.fc1.weight}

    def row_weights(self) -> dict[str, torch.Tensor]:
        """The output weight of each fc1 neuron (its sign colours the neuron)."""
        return {"fc1": self.fc2.weight[0]}
