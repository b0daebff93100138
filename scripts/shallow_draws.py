"""Why the shallow grid's errors at large k moved when its contexts became the published draws.

    GB_DATA_DIR=../shared/data python scripts/shallow_draws.py

For one shallow unit with k hyperplanes on MNIST (N = 2000, data seed 1) and context seeds 1-6, for
our draws and the published ones, with and without median init: how many hyperplanes cut the
training set, how many contexts hold training points, and the share of validation points that fall
in a context without any (where svm-shallow's output is 0, a tie counted as an error).
"""

from __future__ import annotations

import numpy as np

from gbcli.data.sources import load_dataset
from gbcli.models.gating import context_sides, published_hyperplanes, sample_hyperplanes


def main() -> None:
    ds = load_dataset("mnist", train_size=2000, val_size=12000, data_seed=1)
    for k in (12, 15):
        for median in (False, True):
            for name, draw in (("ours", sample_hyperplanes), ("published", published_hyperplanes)):
                rows = []
                for seed in range(1, 7):
                    hp = draw(1, 2 ** k, ds.x_pool, seed, median)
                    bits = context_sides(hp.local_contexts(ds.x_train)[:, 0], k)
                    cutting = int(((bits.mean(0) > 0) & (bits.mean(0) < 1)).sum())
                    used = np.unique(hp.local_contexts(ds.x_train)[:, 0])
                    empty = float(np.mean(~np.isin(hp.local_contexts(ds.x_val)[:, 0], used)))
                    rows.append((cutting, len(used), round(empty, 3)))
                cut, used, empty = zip(*rows)
                print(f"k={k} median={median!s:5} {name:9}: hyperplanes cutting the training set {list(cut)}, "
                      f"contexts used {list(used)}, validation points in empty contexts {list(empty)}")


if __name__ == "__main__":
    main()
