"""Paper 001's convolutional net on MNIST (Phuong & Lampert, appendix D, Table 1): six conv(n, k, s, p)
layers with ReLUs, fc(3136, 128), ReLU, fc(128, 1), all with biases; the paper trains it with Adam.
Inputs are 28 x 28 images plus a constant 1 (785 coordinates), which the net drops (its biases play its
role). Not homogeneous: only `layer_rank` and `features` apply; the logged normalized margin means nothing."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt

from gbcli.models.base import ModelParams, ModelSpec, init_tensor, networks

IMAGE = 28   # the side of the images it takes (28 x 28: mnist, fashion-mnist)
PAPER_CONVS = [[32, 3, 1, 1], [32, 3, 1, 1], [32, 5, 2, 2], [64, 3, 1, 1], [64, 3, 1, 1], [64, 5, 2, 2]]


class Params(ModelParams):
    kind: Literal["convnet"] = Field("convnet", description="paper 001: six conv layers and two fully connected ones, "
                                                            "on 28 x 28 images")
    convs: list[tuple[StrictInt, StrictInt, StrictInt, StrictInt]] = Field(
        default_factory=lambda: [tuple(c) for c in PAPER_CONVS],
        description="conv(n, k, s, p) layers: n kernels of size k x k, stride s, padding p (paper 001's Table 1)")
    fc_units: StrictInt = Field(128, ge=1, le=100_000, description="width of the first fully connected layer")

    @property
    def homogeneity(self) -> int:
        return len(self.convs) + 2


class Spec(ModelSpec):
    kind, Params = "convnet", Params
    description = "paper 001's appendix D: six conv layers, fc(3136, 128), fc(128, 1), biases"
    instruments = ("layer_rank", "features")
    exactly_homogeneous = False

    def check(self, cfg) -> None:
        if cfg.dataset.feature_dim() != IMAGE * IMAGE + 1:
            raise ValueError(f"dataset.name: model.kind convnet takes 28 x 28 images (mnist, fashion-mnist), "
                             f"not inputs of dimension {cfg.dataset.feature_dim()}")

    def network(self, cfg, dim):   # dim: 785, as `check` and the data's 28 x 28 header check hold it
        return networks("convnet").ConvNet(cfg.model.convs, cfg.model.fc_units, IMAGE)

    def build(self, cfg, dim):
        """torch's default init for every layer from the seeded generator, then the fc weights x init_scale
        (the paper's 0.05 on the fully connected layers; the convolutions keep the default scale)."""
        import torch

        model = self.network(cfg, dim)
        gen = torch.Generator().manual_seed(self.init_seed(cfg))
        with torch.no_grad():
            for layer in [*model.convs, model.fc1, model.fc2]:
                init_tensor(layer.weight, "torch-default", gen, 1.0)
                bound = 1.0 / layer.weight[0].numel() ** 0.5   # nn.Linear / nn.Conv2d's bias init
                layer.bias.uniform_(-bound, bound, generator=gen)
            model.fc1.weight.mul_(cfg.model.init_scale)
            model.fc2.weight.mul_(cfg.model.init_scale)
        return model
