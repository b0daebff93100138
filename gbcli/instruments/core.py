"""The general theory instruments (protocol section 7) for exactly homogeneous models, margin, kkt,
agreement, contrast and convergence, and the Tracker that runs them during training. Their columns of
`gd/metrics.csv` are defined in docs/reproducing-the-papers.md ("Theory instruments"); the papers' own
instruments are in `gbcli.experiments`."""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, jacrev

from gbcli.errors import GbError
from gbcli.instruments import gln_certificate
from gbcli.instruments.base import Instrument, TrackContext, as_numpy, float64_copy
from gbcli.metrics import inconsistency
from gbcli.programs.design import decision


def kkt_residual(model: nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: torch.Tensor | None,
                 degree: int) -> dict:
    """The KKT columns (module docstring) over the network's parameters; NaN while some margin is <= 0. NNLS runs
    on the R factor of the (P + 1) x N system (same minimizer)."""
    net, x, y, ctx = float64_copy(model, x, y, ctx)   # float64 on the CPU: scipy's NNLS takes it from here
    params = {k: p.detach() for k, p in net.named_parameters()}
    with torch.no_grad():
        q = y * net(x, ctx)
    if float(q.min()) <= 0:
        return dict.fromkeys(("kkt_residual", "kkt_complementarity", "kkt_complementarity_rel"), float("nan"))
    scale = float(q.min()) ** (-1.0 / degree)    # f is degree-homogeneous: margins scale by scale^degree
    params = {k: scale * p for k, p in params.items()}
    jac = jacrev(lambda p: functional_call(net, p, (x, ctx)))(params)
    n = len(y)
    g = torch.cat([jac[k].reshape(n, -1) for k in params], 1) * y[:, None]   # row n: y_n grad f(x_n)
    w = torch.cat([p.reshape(-1) for p in params.values()])
    total = float(w.pow(2).sum())
    excess = q / q.min() - 1                     # margin_n - 1 at margin 1
    # weight of the complementarity row: lam ~ ||w||^2 / L, so this balances the two relative errors
    a = torch.cat([g.T, (degree / math.sqrt(total)) * excess[None, :]])
    b = torch.cat([w, w.new_zeros(1)])
    qm, r = torch.linalg.qr(a)                   # a = Q R: min ||a lam - b|| = min ||R lam - Q'b||
    from scipy.optimize import nnls   # here: scipy.optimize costs 0.2 s of every `gb` start

    lam, _ = nnls(r.numpy(), (qm.T @ b).numpy(), maxiter=50 * n)
    lam = torch.as_tensor(lam)
    comp = float(lam @ excess)
    mass = float(lam @ (excess + 1))
    return {"kkt_residual": math.sqrt(float((g.T @ lam - w).pow(2).sum()) / total),
            "kkt_complementarity": comp, "kkt_complementarity_rel": comp / mass if mass > 0 else float("nan")}


class Margin(Instrument):
    name, needs_matching = "margin", True
    resumable = True
    description = "normalized margin against the matching program's best"
    columns = ("margin_ratio", "margin_gap")
    panels = (("margin_ratio", "normalized margin / best (matching program)", "linear"),
              ("margin_gap", "margin gap: best - normalized margin", "log"))

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        gamma = tracker.normalized_margin(model, margins)
        return {"margin_ratio": gamma / tracker.best, "margin_gap": tracker.best - gamma}


class Kkt(Instrument):
    name = "kkt"
    resumable = True
    description = "KKT residual of the max-margin problem in parameter space"
    columns = ("kkt_residual", "kkt_complementarity", "kkt_complementarity_rel")
    panels = (("kkt_residual", "KKT residual (relative)", "log"),
              ("kkt_complementarity_rel", "KKT complementarity (relative)", "log"))

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        return kkt_residual(model, x, y, ctx, tracker.degree)


class Agreement(Instrument):
    name, needs_matching = "agreement", True
    resumable = True
    description = "inconsistency with the matching program's predictor"
    columns = ("inconsistency",)
    panels = (("inconsistency", "inconsistency with the matching program", "linear"),)

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        return {"inconsistency": inconsistency(val_out.double().cpu().numpy(), tracker.svm_val)}


class Contrast(Instrument):
    """`margin_ratio_l2` and `inconsistency_l2`: margin and agreement against the l2 geometry's program
    (gradient descent's) whatever the optimizer, for a kind whose matching program follows it
    (docs/optimizers.md): how far the optimizer's limit is from gradient descent's."""

    name = "contrast"
    resumable = True
    description = "margin ratio and inconsistency against the l2 geometry's program (gradient descent's)"
    columns = ("margin_ratio_l2", "inconsistency_l2")
    panels = (("margin_ratio_l2", "normalized margin / best (the l2 program)", "linear"),
              ("inconsistency_l2", "inconsistency with the l2 program", "linear"))

    def setup(self, tracker, context: TrackContext) -> dict:
        cfg = context.cfg
        gd = cfg.model_copy(update={"training": cfg.training.model_copy(update={"optimizer": "sgd",
                                                                                "descent": "gradient"})})
        prog = context.spec.matching_program(gd)
        design, sol, cert = _certified(self, context, prog)
        tracker.contrast = (context.spec.best_normalized_margin(gd, sol.value),
                            decision(sol.zeta, design.x_val, design.e_val))
        return {"contrast": {"program": prog, "objective": float(sol.value), "rel_gap": cert["rel_gap"]}}

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        best, val = tracker.contrast
        gamma = tracker.normalized_margin(model, margins, 2.0)
        return {"margin_ratio_l2": gamma / best, "inconsistency_l2": inconsistency(val_out.double().cpu().numpy(), val)}


def _slug(program: str) -> str:
    return program.replace("-", "_")


def _certified(ins: Instrument, context: TrackContext, prog: str) -> tuple:
    """(design, solution, certificate) of `prog`, refused unless certified: an unvouched direction is no reference."""
    from gbcli.programs.certify import certificate

    design, sol = context.solve(prog)
    cert = certificate(design, sol, context.cfg.svm.certify_tol)
    if not cert["certified"]:
        raise GbError(f"training.track: {ins.name}: {prog} is not certified (relative gap {cert['rel_gap']:.1e}); "
                      f"its predictor cannot be a reference")
    return design, sol, cert


class Convergence(Instrument):
    """Where GD goes, against each certified program o (solved once before training): `inconsistency_<o>`,
    `train_inconsistency_<o>`, `margin_ratio_<o>` in o's own norm, `angle_<o>` in o's geometry, and the
    `gln_certificate` columns; for a network whose `zeta()` is in the programs' coordinates (the deep GLN)."""

    name = "convergence"
    resumable = True
    PROGRAMS = ("svm-gln", "svm-l2")
    # the programs of other geometries (docs/optimizers.md), tracked when the optimizer's geometry names one;
    # svm-gln (the l2 geometry's) is then the contrast
    GEOMETRY_PROGRAMS = ("svm-gln-linf",)
    description = ("inconsistency, margin ratio (in each program's own norm) and angle against svm-gln and svm-l2, "
                   "and against the program of the optimizer's geometry")
    columns = tuple(f"{m}_{_slug(p)}" for p in PROGRAMS + GEOMETRY_PROGRAMS
                    for m in ("inconsistency", "train_inconsistency", "margin_ratio", "angle")) + gln_certificate.COLUMNS
    panels = (("inconsistency_svm_gln", "inconsistency with svm-gln (validation)", "log"),
              ("inconsistency_svm_l2", "inconsistency with svm-l2 (validation)", "log"),
              ("margin_ratio_svm_gln", "normalized margin / best (svm-gln's norm)", "linear"),
              ("angle_svm_gln", "angle to svm-gln's predictor (degrees)", "log"),
              ("angle_svm_l2", "angle to svm-l2's predictor (degrees)", "log"),
              ("gln_kkt_residual", "KKT residual of the parameter problem (certificate)", "log"),
              ("min_unit_norm", "smallest unit norm / largest", "log"),
              ("max_dead_dual_norm", "largest dual norm of a dead unit (> 1: violates svm-gln)", "linear"))

    def setup(self, tracker, context: TrackContext) -> dict:
        from gbcli.programs.norms import NORMS

        tracker.against = {}
        info = {}
        matching = context.spec.matching_program(context.cfg)
        for prog in self.PROGRAMS + tuple(p for p in self.GEOMETRY_PROGRAMS if p == matching):
            if prog not in context.spec.programs:
                continue
            design, sol, cert = _certified(self, context, prog)
            norm = NORMS[design.norm]
            zeta = np.asarray(sol.zeta, dtype=np.float64)
            degree = math.log2(norm.value(design, 2 * zeta) / norm.value(design, zeta))
            tracker.against[prog] = {
                "design": design, "norm": norm, "zeta": zeta, "opt": float(sol.value), "degree": degree,
                "val": decision(zeta, design.x_val, design.e_val),
                "train": decision(zeta, design.x_train, design.e_train)}
            info[f"convergence_{_slug(prog)}"] = {"objective": float(sol.value), "rel_gap": cert["rel_gap"]}
        return info

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        zeta = model.zeta().double().cpu().numpy().reshape(-1)
        train_out = (margins * y).double().cpu().numpy()   # y in {-1, +1}: the network's outputs
        row = {}
        for prog, ref in tracker.against.items():
            z = zeta.reshape(ref["zeta"].shape)
            obj = ref["norm"].value(ref["design"], z)
            m = float(margins.double().min())
            cos = _cosine(ref, z, obj)
            s = _slug(prog)
            row.update({
                f"inconsistency_{s}": inconsistency(val_out.double().cpu().numpy(), ref["val"]),
                f"train_inconsistency_{s}": inconsistency(train_out, ref["train"]),
                f"margin_ratio_{s}": m * (ref["opt"] / obj) ** (1 / ref["degree"]) if obj > 0 else float("nan"),
                f"angle_{s}": math.degrees(math.acos(max(-1.0, min(1.0, cos)))) if math.isfinite(cos) else float("nan")})
        row.update(gln_certificate.track_columns(*_arrays(model, x, y, ctx)))
        return row

    def final_tables(self, tracker, model):
        """`units.csv`: every unit's norm (relative to the largest), its dual norm ||g_h(lam)|| and
        whether it is dead, at the final weights (none while some training margin is <= 0)."""
        import pandas as pd

        ds, problem = tracker.problem.dataset, tracker.problem
        cert = gln_certificate.certify(*_arrays(model, ds.x_train, ds.y_train, problem.ctx_train))
        if cert is None:
            return {}
        return {"units": pd.DataFrame({"unit": np.arange(len(cert.unit_norms)),
                                       "relative_norm": cert.unit_norms / cert.unit_norms.max(),
                                       "dual_norm": cert.dual_norms, "dead": cert.dead})}


def _arrays(model, x, y, ctx) -> tuple:
    """(w1, w2, x, y, ctx) with the tensors as numpy arrays, float64 but ctx (certify takes any array as float64)."""
    arr = lambda a: as_numpy(a) if torch.is_tensor(a) else a
    return arr(model.w1), arr(model.w2), arr(x), arr(y), ctx.cpu().numpy() if torch.is_tensor(ctx) else ctx


def _cosine(ref: dict, z: np.ndarray, obj: float) -> float:
    """cos of the angle between z and zeta_o in o's geometry: for a quadratic objective (svm-l2) in its
    form's inner product (q(a + b) - q(a - b)) / 4 (zeta has directions the form is blind to)."""
    zo = ref["zeta"]
    if not ref["norm"].quadratic:
        return float(np.dot(z.ravel(), zo.ravel()) / (np.linalg.norm(z) * np.linalg.norm(zo)))
    q = lambda a: ref["norm"].value(ref["design"], a)
    size = obj * q(zo)
    return (q(z + zo) - q(z - zo)) / 4 / math.sqrt(size) if size > 0 else float("nan")


INSTRUMENTS = {i.name: i for i in (Margin(), Kkt(), Agreement(), Convergence(), Contrast())}


class Tracker:
    """The configured instruments. The matching program is solved once, when the spec says it is defined
    (`matching_ready`: at the start, or once FReLU's gates freeze); until then its instruments log NaN."""

    def __init__(self, instruments: list[Instrument], context: TrackContext, degree: int):
        self.instruments, self.degree = list(instruments), degree
        self.context, self.cfg, self.problem = context, context.cfg, context.problem
        self.best = self.svm_val = self.design = self.solution = None
        self.info: dict = {}
        self.pending = any(i.needs_matching for i in self.instruments)
        self.set_up: set[str] = set()
        self.ready(None)

    def ready(self, model: nn.Module | None) -> bool:
        """Solve the matching program once that is possible; set each instrument up once it can be
        (those that need the program, after it). True when the program is solved (or not needed)."""
        if self.pending:
            spec, cfg = self.context.spec, self.cfg
            if spec.matching_ready(cfg, model):
                trained = None if model is None else copy.deepcopy(model).cpu().double()
                self.design, self.solution = self.context.solve(spec.matching_program(cfg), trained)
                self.svm_val = decision(self.solution.zeta, self.design.x_val, self.design.e_val)
                extra = spec.matching_info(cfg, self.problem, self.solution)
                self.best = extra.get("best_normalized_margin")
                self.info.update({"objective": self.solution.value, "status": self.solution.status, **extra})
                self.pending = False
        for ins in self.instruments:
            if ins.name not in self.set_up and not (ins.needs_matching and self.pending):
                self.info.update(ins.setup(self, self.context))
                self.set_up.add(ins.name)
        return not self.pending

    @property
    def resumable(self) -> bool:
        """Whether a checkpointed run resumes to the same rows: every instrument `resumable` and the matching
        program solved (one solved later, as FReLU's, would be solved on other weights after a resume)."""
        return not self.pending and all(i.resumable for i in self.instruments)

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c for i in self.instruments for c in i.columns)

    def normalized_margin(self, model: nn.Module, margins: torch.Tensor, q: float | None = None) -> float:
        """min y f / ||w||_q^L, q the matching program's geometry unless given (docs/optimizers.md); NaN at w = 0."""
        w = torch.cat([v.detach().double().reshape(-1) for v in model.weights()])
        q = self.context.spec.margin_geometry(self.cfg) if q is None else q
        if q == 2:
            size = float(w.pow(2).sum().sqrt())
        else:   # q = 1 too: pow(1) is a copy, x ** 1.0 is x
            size = float(w.abs().max()) if q == math.inf else float(w.abs().pow(q).sum()) ** (1 / q)
        size = size ** self.degree
        return float(margins.double().min()) / size if size > 0 else float("nan")

    def measure(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: torch.Tensor | None,
                margins: torch.Tensor, val_out: torch.Tensor) -> dict:
        """The tracked columns at the current weights."""
        row = {}
        matched = self.ready(model)
        for ins in self.instruments:
            if ins.needs_matching and not matched:
                row.update(dict.fromkeys(ins.columns, float("nan")))
            else:
                row.update(ins.measure(self, model, x, y, ctx, margins, val_out))
        return row

    def final_tables(self, model: nn.Module) -> dict:
        return {k: v for ins in self.instruments for k, v in ins.final_tables(self, model).items()}
