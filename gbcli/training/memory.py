"""What a training needs in memory, asked before anything is allocated: the network built on torch's meta device
(shapes only); its weights, gradients, momentum and an evaluation pass compared with the machine's memory."""

from __future__ import annotations

from gbcli.config.schema import GB, machine_memory
from gbcli.errors import GbError


def check_memory(cfg) -> None:
    """Refuse, with one line naming the key to lower, a training of `cfg` (a resolved config) whose
    data and network need more memory than this machine has."""
    import torch

    d, ram = cfg.dataset, machine_memory()
    n, m = d.train_size, d.val_size
    try:
        with torch.device("meta"):   # shapes only: nothing is allocated
            net = cfg.spec.network(cfg, d.feature_dim())
        params = sum(p.numel() for p in net.parameters()) + sum(b.numel() for b in net.buffers())
        rows = max((p.shape[0] for p in net.parameters() if p.dim() == 2), default=1)
    except Exception:   # a network that cannot be built from this config says so when it is built
        return
    need = d.pool_bytes() + 4 * params * 4 + 4 * (n + m) * rows * 3
    if cfg.training.batch_size is None and getattr(net, "column_major_input", False):
        need += 4 * n * d.feature_dim()   # the full batch's column-major copy (gbcli.training.step)
    if need > ram:
        sizes = {f"model.{k}": v for k, v in cfg.model.model_dump().items()
                 if isinstance(v, int) and not isinstance(v, bool) and k != "init_seed"}
        sizes["contexts.count"] = cfg.contexts.count
        key = max(sizes, key=sizes.get) if sizes else "model"
        raise GbError(f"{key}: this network needs about {need / GB:.1f} GB ({params:,} weights, {n + m:,} points), "
                      f"more than this machine's {ram / GB:.0f} GB")
