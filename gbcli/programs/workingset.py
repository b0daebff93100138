"""A certified working-set method for the kernel dual (peak memory O(|W|^2 + N D)): solve on W, compute
all N margins in feature space, add the worst violators (margin < 1 - tol/100), drop points clearly above
1 (a returning point stays, so W cannot cycle), until none violates. The certificate is the full
solver's; a ray on W is a ray of the whole. The round checkpoint is untrusted: no pickles, every array checked.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from gbcli.fs.safe import load_npz_untrusted, present, write_npz
from gbcli.programs.certify import cancels
from gbcli.programs.design import GatedDesign, Stop, combination, decision
from gbcli.programs.ipm import TIGHTER, TIME_LIMITED
from gbcli.programs.norms import norm_of

WORKING_SET_ABOVE = 3000   # the dual solver switches to the working set above this many training points
START = 2500               # size of the first working set (a seeded random subset), at most
START_FRACTION = 0.4       # ... this fraction of N (the support set is 40% of N = 2000 for svm-l2)
ADD = 2500                 # at most this many violators join W per round (the most violating first),
ADD_FRACTION = 0.2         # ... and at most this fraction of N
DROP_AFTER = 1             # rounds in a row with margin above 1 + DROP_MARGIN before a point leaves W
DROP_MARGIN = 1e-2
MAX_ROUNDS = 40
STOPPED = "stopped by its caller"   # solve_working_set(stop=...): the message of a solve ended that way
SEED = 0                   # of the first working set
ROUNDS_FORMAT = 1          # of the round checkpoint
CHUNK = 8192               # all N margins are computed in chunks of this many points (chunk x R temporaries)
LOG = logging.getLogger(__name__)   # one line per round (a long solve's progress; `gb fit-svm` and sweeps show it)


def load_rounds(path: Path, fingerprint: str, n: int) -> dict | None:
    """The saved state of this program's solve, or None (none, another program's, or unusable)."""
    if not present(path):
        return None
    try:   # a link is refused by the file layer (ELOOP), a folder or FIFO as not a regular file
        with load_npz_untrusted(path) as z:
            a = {k: z[k] for k in z.files}
        if int(a["format"]) != ROUNDS_FORMAT or str(a["fingerprint"]) != fingerprint or int(a["n"]) != n:
            LOG.warning("  %s belongs to another program: the solve starts from round 1", path)
            return None
        w, above, dropped = a["w"], a["above"], a["dropped"]
        rnd, its = int(a["round"]), int(a["iterations"])
        ok = (w.ndim == 1 and w.dtype.kind in "iu" and 0 < len(w) <= n and np.all(np.diff(w) > 0)
              and w[0] >= 0 and w[-1] < n and above.shape == (n,) and above.dtype.kind in "iu"
              and dropped.shape == (n,) and dropped.dtype == bool and 1 < rnd <= MAX_ROUNDS and its >= 0
              and a["sizes"].ndim == 1 and np.isfinite(float(a["seconds"])))
        warm = None
        if ok and "warm_lam" in a:
            warm = (a["warm_lam"], a["warm_mu"], a["warm_s"])
            ok = (warm[0].shape == (len(w),) and warm[1].shape == (len(w),) and warm[2].ndim == 1
                  and all(x.dtype == np.float64 and np.all(np.isfinite(x)) and np.all(x >= 0) for x in warm))
        if not ok:
            raise ValueError("inconsistent arrays")
    except Exception as exc:   # whatever makes the file unreadable (a bad zip, a missing array): start over
        LOG.warning("  %s is not a usable round checkpoint (%s): the solve starts from round 1", path, exc)
        return None
    return {"round": rnd, "iterations": its, "w": w.astype(np.int64), "above": above.astype(np.int64),
            "dropped": dropped, "sizes": [str(x) for x in a["sizes"]], "seconds": float(a["seconds"]), "warm": warm}


def solve_working_set(design: GatedDesign, solve_on: Callable, finish: Callable, answer: Callable, tol: float,
                      checkpoint: tuple[Path, str] | None, deadline: float | None, through: int | None,
                      stop: Callable[[], str | None] | None):
    """answer(status, message, zeta, lam, iterations, stop) of the solve's end: zeta None when infeasible (lam
    the ray) or failed; lam N long, 0 off W. solve_on(sub, tol, start) -> ipm.Outcome; finish: the polish of a
    final round met only at its rounding floor; through: the last round; stop(): a reason ends it `inaccurate`
    (STOPPED); no round starts after `deadline`; `checkpoint` = (path, fingerprint) saves each round's state."""
    x, y, e = design.x_train, design.y_train, design.e_train
    n = len(y)
    norm = norm_of(design)
    radius = norm.input_radius(design)
    first = max(1, min(n, START, int(np.ceil(START_FRACTION * n))))
    most = max(1, min(ADD, int(np.ceil(ADD_FRACTION * n))))
    w = np.sort(np.random.default_rng(SEED).choice(n, size=first, replace=False))
    above = np.zeros(n, dtype=np.int64)      # rounds in a row with a margin clearly above 1
    dropped = np.zeros(n, dtype=bool)        # left W once already
    total_it, sizes, warm = 0, [], None
    first_round, spent, last_lam = 1, 0.0, None
    saved = load_rounds(*checkpoint, n) if checkpoint is not None else None
    if saved is not None:
        first_round, total_it, sizes, spent = saved["round"], saved["iterations"], saved["sizes"], saved["seconds"]
        w, above, dropped, warm = saved["w"], saved["above"], saved["dropped"], saved["warm"]
        if warm is not None:
            last_lam = np.zeros(n)
            last_lam[w] = warm[0]
        LOG.info("  working set: resumed at round %d from %s (%d points, %d Newton steps, %.1f s before)",
                 first_round, checkpoint[0], len(w), total_it, spent)
    began = time.perf_counter()

    def out_of_time(rnd: int, why: str):
        note = (f"{TIME_LIMITED} (svm.time_limit) {why} round {rnd} (working set of {len(w)} points, "
                f"{time.perf_counter() - began + spent:.1f} s in all)"
                + ("; its state is saved and a rerun resumes there" if checkpoint is not None else ""))
        return answer("inaccurate", note, None, last_lam, total_it, Stop.TIME_LIMIT)

    def predict(lam_w: np.ndarray, s: np.ndarray):
        """(zeta at margin 1 on this round's W, all N margins, the scale), or None when no margin on W is positive."""
        lam = np.asarray(lam_w, np.float64)   # summed exactly for a double-double lam, or a V(lam) that `cancels`
        exact = getattr(lam_w, "lo", None) is not None or cancels(lam, combination(sub, lam), radius)
        zeta = norm.predictor(sub, lam_w, s, precise=exact)
        m = np.concatenate([decision(zeta, x[i:i + CHUNK], e[i:i + CHUNK]) * y[i:i + CHUNK]
                            for i in range(0, n, CHUNK)])
        scale = float(m[w].min())
        return None if scale <= 0 else (zeta / scale, m / scale, scale)

    for rnd in range(first_round, MAX_ROUNDS + 1):
        if deadline is not None and time.monotonic() >= deadline:
            return out_of_time(rnd, "before")
        why = stop() if stop is not None and rnd > first_round else None
        if why is not None:
            return answer("inaccurate", f"{STOPPED} before round {rnd}: {why}", None, last_lam, total_it, Stop.ASKED)
        if through is not None and rnd > through:
            return answer("inaccurate", f"stopped before round {rnd} as asked (through = {through})", None, last_lam,
                          total_it, Stop.ASKED)
        sub = replace(design, x_train=x[w], y_train=y[w], e_train=e[w])
        start = time.perf_counter()
        got = solve_on(sub, tol, warm)
        it = got.iterations
        if warm is not None and got.s is None and got.status != "infeasible" and got.stop is not Stop.TIME_LIMIT:
            got = solve_on(sub, tol, None)   # a warm start that failed: start cold
            it += got.iterations
        total_it += it
        if got.stop is Stop.TIME_LIMIT:   # the round did not finish: the last finished round's state stands
            return out_of_time(rnd, "during")
        status, message, lam_w, s, ended = got.status, got.message, got.lam, got.s, got.stop
        sizes.append(f"{len(w)} ({it} steps, {time.perf_counter() - start:.1f} s)")
        lam = np.zeros(n)
        if lam_w is not None:
            lam[w] = lam_w
        if status == "infeasible":   # a ray of W's dual is a ray of the full dual
            return answer(status, f"{message} (found on a working set of {len(w)} points)", None, lam, total_it, ended)
        if s is None:   # failed: W's last multipliers (if any) still give a dual bound
            return answer(status, f"{message} (working set of {len(w)} points, round {rnd})", None,
                          (lam if lam_w is not None else None), total_it, ended)
        predicted = predict(lam_w, s)
        if predicted is None:
            return answer("failed", f"the recovered predictor has no positive margin on the working set (round {rnd})",
                          None, None, total_it, Stop.NUMERICAL)
        zeta, m, scale = predicted   # margin >= 1 on W, as the interior-point method's stopping test assumes
        violating = np.flatnonzero(m < 1 - tol * TIGHTER)
        if not violating.size and ended is Stop.STALLED_MET:
            done = finish(sub, got, tol)
            polished = None if done is None else predict(done.lam, done.s)
            if polished is not None:   # the polished answer replaces the round's
                status, message, lam_w, s, ended = done.status, done.message, done.lam, done.s, done.stop
                lam[:] = 0
                lam[w] = lam_w
                zeta, m, scale = polished
                violating = np.flatnonzero(m < 1 - tol * TIGHTER)
        LOG.info("  working set round %d: %d of %d points, %d Newton steps, %.1f s; %d points violate",
                 rnd, len(w), n, it, time.perf_counter() - start, violating.size)
        if not violating.size:
            low = float(m.min())         # within tol/100 of 1: lift every margin to >= 1
            zeta = zeta / low
            note = (f"working set: {rnd} rounds, {len(w)} of {n} points at the end "
                    f"(rounds: {', '.join(sizes)})"
                    + (f"; resumed at round {first_round}, after {spent:.1f} s of solving in earlier runs"
                       if first_round > 1 else ""))
            return answer(status, f"{message}; {note}" if message else note, zeta, lam, total_it, ended)
        add = violating[np.argsort(m[violating], kind="stable")[:most]]
        warm_next = (lam, np.maximum(m * scale - 1, 0), s)   # the next round's warm start: lam, margin slack, s
        above[w] = np.where(m[w] > 1 + DROP_MARGIN, above[w] + 1, 0)
        returning = add[dropped[add]]
        above[add] = 0
        above[returning] = -MAX_ROUNDS    # a point that comes back after a drop stays: no cycles
        leaving = w[above[w] >= DROP_AFTER]
        dropped[leaving] = True
        w = np.union1d(np.setdiff1d(w, leaving, assume_unique=True), add)
        warm = (warm_next[0][w], warm_next[1][w], warm_next[2])
        last_lam = lam
        if checkpoint is not None:
            try:
                write_npz(checkpoint[0], format=np.array(ROUNDS_FORMAT), fingerprint=np.array(checkpoint[1]),
                          n=np.array(n), round=np.array(rnd + 1), iterations=np.array(total_it), w=w, above=above,
                          dropped=dropped, sizes=np.array(sizes, dtype=str),
                          seconds=np.array(time.perf_counter() - began + spent),
                          **{f"warm_{k}": np.asarray(a, np.float64) for k, a in zip(("lam", "mu", "s"), warm)})
            except OSError as exc:   # a full disk costs the resume, not the solve
                LOG.warning("  the round checkpoint %s could not be written: %s", checkpoint[0], exc.strerror or exc)
    return answer("failed", f"the working set did not converge in {MAX_ROUNDS} rounds (rounds: {', '.join(sizes)})",
                  None, None, total_it, Stop.ITERATION_LIMIT)
