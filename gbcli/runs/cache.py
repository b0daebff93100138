"""The solve cache: a program whose design and solver options are identical to one already solved
in the same sweep (or run) is not solved again.

The key is a hash of everything the solver sees: every field of the `GatedDesign` except the
validation arrays (the training inputs, labels, gates, norm, groups, units, count) and the solver
with its options (`max_iters`, `eps`, `certify_tol`). A hit returns the stored `Solution` (zeta,
lam, status, iterations, ...); the stage that uses it recomputes the predictions and the
certificate on its own design, so a reused result is exactly as valid as a solved one, and its
`result.json` says where it came from (`cached_from: <point id>/<objective>`).

In a sweep the cache is a folder (`OUT/solves/<key>.npz`, one file per solved program, written
atomically: a reader sees a complete entry or none). A worker holds an exclusive lock on
`<key>.lock` while it looks up and solves, so a twin program that comes up meanwhile waits for the
answer instead of solving it again (the kernel releases the lock of a killed process). Only
certified results are stored. Without a folder the cache lives for one `fit_svm` call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np

from gbcli.io import atomic_write_bytes
from gbcli.programs.design import GatedDesign, Solution

NOT_SOLVED_FROM = ("x_val", "e_val")   # design fields no solver reads (predictions are recomputed)
FORMAT = 1


class SolveCache:
    def __init__(self, folder: str | Path | None = None):
        self.folder = None if folder is None else Path(folder)
        self._memory: dict[str, tuple[Solution, str]] = {}
        self._digests: dict[int, tuple[np.ndarray, str]] = {}   # id -> (array kept alive, digest)

    # -------------------------------------------------------------- the key

    def _digest(self, a: np.ndarray) -> str:
        """blake2b of an array's dtype, shape and bytes; memoized per array object for the life of
        this cache (one fit_svm call: its programs share the data arrays, which nobody mutates)."""
        hit = self._digests.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        c = np.ascontiguousarray(a)
        h = hashlib.blake2b(f"{c.dtype.str}{c.shape}".encode(), digest_size=16)
        h.update(c.reshape(-1).view(np.uint8))
        self._digests[id(a)] = (a, h.hexdigest())
        return self._digests[id(a)][1]

    def _value(self, v):
        if isinstance(v, np.ndarray):
            return ["array", self._digest(v)]
        if isinstance(v, (list, tuple)):
            return [self._value(x) for x in v]
        if isinstance(v, np.generic):
            return v.item()
        return v

    def key(self, design: GatedDesign, solver: str, max_iters: int | None, eps: float | None,
            certify_tol: float) -> str:
        fields = {f.name: self._value(getattr(design, f.name)) for f in dataclasses.fields(design)
                  if f.name not in NOT_SOLVED_FROM}
        blob = json.dumps({"format": FORMAT, "design": fields, "solver": solver, "max_iters": max_iters,
                           "eps": eps, "certify_tol": certify_tol}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    # -------------------------------------------------------------- lookup and store

    @contextlib.contextmanager
    def claim(self, key: str):
        """Hold `key` while looking it up and solving: another process waits, then finds the answer."""
        if self.folder is None:
            yield
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def get(self, key: str) -> tuple[Solution, str] | None:
        """The stored solution and where it was solved (`<run>/<objective>`), or None. An unreadable
        entry counts as missing (it is solved again and replaced)."""
        if key in self._memory:
            return self._memory[key]
        if self.folder is None:
            return None
        path = self.folder / f"{key}.npz"
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                arrays = {k: z[k] for k in ("zeta", "lam") if k in z.files}
        except (OSError, ValueError, KeyError, UnicodeDecodeError):
            return None
        if meta.get("key") != key:
            return None
        sol = Solution(arrays.get("zeta"), meta["status"], meta["value"], meta["seconds"], meta["solver"],
                       meta["message"], meta["iterations"], arrays.get("lam"))
        return sol, meta["origin"]

    def put(self, key: str, sol: Solution, origin: str) -> None:
        self._memory[key] = (sol, origin)
        if self.folder is None:
            return
        meta = {"key": key, "origin": origin, "status": sol.status, "value": float(sol.value), "seconds": float(sol.seconds),
                "solver": sol.solver, "message": sol.message,
                "iterations": None if sol.iterations is None else int(sol.iterations)}
        arrays = {k: v for k, v in (("zeta", sol.zeta), ("lam", sol.lam)) if v is not None}
        buf = io.BytesIO()
        np.savez(buf, meta=np.array(json.dumps(meta)), **arrays)
        atomic_write_bytes(self.folder / f"{key}.npz", buf.getvalue())
