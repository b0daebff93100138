"""A three-layer gated linear network (GLN paper, Theorem 3.1 beyond two layers): z1_h = <W1[h, c1_h(x)], x>,
z2_k = <W2[k, c2_k(x)], z1>, out = <w3, z2>, degree 3 in the weights. GD's limit is a KKT point of the
non-convex min ||w||^2 s.t. y f(x) >= 1 (the `kkt` instrument; no convex program). The 2H units' contexts
are drawn as the deep GLN's: the first H columns gate layer 1, the last H layer 2."""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

from pydantic import Field, StrictInt

from gbcli.models.base import InitScheme, ModelParams
from gbcli.models.gln import HyperplaneSpec


class Params(ModelParams):
    kind: Literal["gln3"] = Field("gln3", description="three-layer GLN: H x C contexts at both hidden layers")
    hidden_units: StrictInt = Field(5, ge=1, le=10_000, description="H: units at each of the two hidden layers")
    init: Optional[InitScheme] = Field(None, description="default: orthogonal")
    homogeneity: ClassVar[int] = 3


class Spec(HyperplaneSpec):
    kind, Params = "gln3", Params
    description = "three-layer GLN: H x C contexts at both hidden layers (degree 3)"

    def gated_units(self, params):
        return 2 * params.hidden_units   # H per hidden layer

    def network(self, cfg, dim):
        from gbcli.models.networks.gln import GLN3

        return GLN3(cfg.model.hidden_units, cfg.contexts.count, dim)

    def describe(self, row):
        return f"H={row['hidden_units']} (x2 layers), C={row['contexts']}, N={row['train_size']}"
