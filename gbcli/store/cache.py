"""The solve cache: a program identical to one solved in the same sweep (or run) is not solved again.
The key hashes all the solver sees. A sweep's cache is `OUT/solves/<key>.npz` (certified answers,
written atomically; `<key>.lock` held while a worker looks up and solves). Entries are untrusted: an
unreadable, foreign, other-key or unfitting one counts as missing (a warning names it)."""

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

from gbcli.fs.safe import atomic_write_bytes, open_lock, present
from gbcli.programs.design import GatedDesign, Solution, Status, Stop
from gbcli.store.records import is_result
from gbcli.store.solutions import Unusable, read_npz   # Unusable: an entry that counts as missing (it says why)

NOT_SOLVED_FROM = ("x_val", "e_val", "classify")   # design fields no solver reads (predictions are recomputed)
FORMAT = 1
META_TYPES = {"origin": str, "status": str, "solver": str, "message": str, "value": (int, float),
              "seconds": (int, float), "iterations": (int, type(None))}


def _hash(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


class Busy(Exception):
    """The program is being solved by another process right now (`SolveCache.claim(wait=False)`)."""


class SolveCache:
    def __init__(self, folder: str | Path | None = None):
        self.folder = None if folder is None else Path(folder)
        self._memory: dict[str, tuple[Solution, str]] = {}
        self._digests: dict[int, tuple[np.ndarray, str]] = {}   # id -> (array kept alive, digest)

    def _digest(self, a: np.ndarray) -> str:
        """blake2b of an array's dtype, shape and bytes, memoized per array object (nobody mutates them)."""
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
            certify_tol: float, device: str = "cpu") -> str:
        """`device`: in the key when not the CPU, whose sums differ in the last bits (CPU keys unchanged)."""
        fields = {f.name: self._value(getattr(design, f.name)) for f in dataclasses.fields(design)
                  if f.name not in NOT_SOLVED_FROM}
        return _hash({"format": FORMAT, "design": fields, "solver": solver, "max_iters": max_iters, "eps": eps,
                      "certify_tol": certify_tol, **({"device": device} if device != "cpu" else {})})

    def constraints_key(self, design: GatedDesign) -> str:
        """The key of the program's constraints alone (training inputs, labels, gates): programs that
        differ only in their norm share a feasible set, so a certified dual ray is stored here too
        (and certified again on each program's own design before use)."""
        fields = {name: self._value(getattr(design, name)) for name in ("x_train", "y_train", "e_train")}
        return _hash({"format": FORMAT, "constraints": fields})

    @contextlib.contextmanager
    def claim(self, key: str, wait: bool = True):
        """Hold `key` while looking it up and solving: another process waits (`wait` False: `Busy`)."""
        if self.folder is None:
            yield
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = open_lock(self.folder / f"{key}.lock")
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                raise Busy(key) from None
            yield
        finally:
            os.close(fd)

    def rounds(self, key: str) -> Path | None:
        """A working-set solve's round checkpoint, the program's (a twin point resumes from it), or None."""
        return None if self.folder is None else self.folder / f"{key}.rounds.npz"

    def entry(self, key: str) -> str:
        """Where `key`'s entry lives (for messages)."""
        return str(self.folder / f"{key}.npz") if self.folder is not None else f"(in memory) {key}"

    def get(self, key: str, design: GatedDesign | None = None, warn=None) -> tuple[Solution, str] | None:
        """(stored solution, `<run>/<objective>`) or None; `warn` names an unusable entry (it counts as missing)."""
        if key in self._memory:
            return self._memory[key]
        if self.folder is None or not present(path := self.folder / f"{key}.npz"):
            return None
        try:
            return self._read(path, key, design)
        except Unusable as exc:
            if warn is not None:
                warn(f"  warning: solve cache entry {path} is unusable ({exc}); solving again and replacing it")
            return None

    def _read(self, path: Path, key: str, design: GatedDesign | None) -> tuple[Solution, str]:
        arrays = read_npz(path.parent, path, ("meta", "zeta", "lam"))   # never through a link, no pickles
        try:
            meta = json.loads(str(arrays.pop("meta")[()]))
        except Exception as exc:   # noqa: BLE001 (no meta array, not JSON)
            raise Unusable(f"no JSON meta ({type(exc).__name__})") from None
        if not isinstance(meta, dict) or meta.get("key") != key:
            raise Unusable("it answers another program (its key differs)")
        if meta.get("format", FORMAT) != FORMAT:
            raise Unusable(f"format {meta.get('format')!r}, not {FORMAT}")
        for k, kind in META_TYPES.items():   # a bool is no number
            if not isinstance(meta.get(k), kind) or isinstance(meta.get(k), bool):
                raise Unusable(f"metadata without a valid {k!r}")
        if not is_result(meta["status"]):
            raise Unusable(f"status {meta['status'][:40]!r} is not a certified answer")
        for k, a in arrays.items():
            if a.dtype.kind != "f" or not np.all(np.isfinite(a)):
                raise Unusable(f"{k} is not a finite float array")
        if design is not None:
            n, rows, dim = len(design.y_train), design.rows, design.x_train.shape[1]
            zeta, lam = arrays.get("zeta"), arrays.get("lam")
            if lam is not None and lam.shape != (n,):
                raise Unusable(f"lam has shape {lam.shape}, the program has {n} margins")
            if zeta is not None and zeta.size and zeta.shape != (rows, dim):
                raise Unusable(f"zeta has shape {zeta.shape}, the program has {rows} x {dim} variables")
            if meta["status"] == Status.OPTIMAL and (zeta is None or not zeta.size):
                raise Unusable("an optimal answer without a predictor")
        stop = meta.get("stop", Stop.OTHER.value)
        if stop not in {s.value for s in Stop}:
            raise Unusable(f"unknown stop reason {str(stop)[:40]!r}")
        sol = Solution(arrays.get("zeta"), Status(meta["status"]), float(meta["value"]), float(meta["seconds"]),
                       meta["solver"], meta["message"], meta.get("iterations"), arrays.get("lam"), Stop(stop))
        return sol, meta["origin"]

    def put(self, key: str, sol: Solution, origin: str) -> None:
        """Store a certified answer under `key` (atomically: a reader sees the old entry or the new one)."""
        self._memory[key] = (sol, origin)
        if self.folder is None:
            return
        meta = {"key": key, "format": FORMAT, "origin": origin, "status": sol.status, "value": float(sol.value),
                "seconds": float(sol.seconds), "solver": sol.solver, "message": sol.message,
                "iterations": None if sol.iterations is None else int(sol.iterations), "stop": Stop(sol.stop).value}
        arrays = {k: v for k, v in (("zeta", sol.zeta), ("lam", sol.lam)) if v is not None}
        buf = io.BytesIO()
        np.savez(buf, meta=np.array(json.dumps(meta)), **arrays)
        atomic_write_bytes(self.folder / f"{key}.npz", buf.getvalue())
