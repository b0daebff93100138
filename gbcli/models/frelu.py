"""The frozen-gate ReLU network (FReLU): its gates [w_gate_h . x >= 0] freeze from the first layer after
`freeze_gates_after` epochs of ReLU training (0: at init), then only the linear weights move."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt

from gbcli.models import relu


class Params(relu.Params):
    kind: Literal["frelu"] = Field("frelu", description="ReLU network whose gates freeze after freeze_gates_after "
                                                        "epochs")
    freeze_gates_after: StrictInt = Field(0, ge=0,
                                          description="epochs of ordinary ReLU training before the gates freeze")


class Spec(relu.Spec):
    kind, Params = "frelu", Params
    description = "ReLU with frozen gates (freeze_gates_after epochs of warm-up)"
    programs = dict(relu.GATE_PROGRAMS)
    # GD on the linear weights behind frozen gates tends to the FReLU-norm program on them (GLN paper)
    matching = "svm-lc"
    instruments = ("margin", "kkt", "agreement", "rank")
    example_model = {"hidden_units": 4, "freeze_gates_after": 1}

    def after_init(self, model, cfg, gen):
        super().after_init(model, cfg, gen)
        if cfg.model.freeze_gates_after == 0:
            model.freeze_gates()

    def matching_ready(self, cfg, model):
        """Once the gates are frozen: at init, or after the warm-up."""
        return model is not None and bool(model.frozen)

    def best_normalized_margin(self, cfg, optimum):
        # min ||w||^2 at margin 1 = 2 x the FReLU-norm optimum (balanced layers), as for the deep GLN
        return 1.0 / (2.0 * optimum)

    def on_epoch(self, model, cfg, epoch):
        if epoch == cfg.model.freeze_gates_after and not model.frozen:
            model.freeze_gates()
