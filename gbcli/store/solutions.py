"""Compact stored solutions: one small npz per solved program, which `gb verify` checks and results
folders carry (README: Verifying stored results).

A file holds plain arrays only: `meta` (a JSON string: format, version, objective, form, sizes and
the claims of result.json), `lam_index` / `lam_value` (the nonzero dual multipliers, int32 /
float64; for an infeasible program the dual ray), `val_sign` (int8 signs of the validation
outputs) whenever there is a predictor, and by form:
- `multipliers`: `scale` (float64, one per group of the norm's dual recovery; none for
  svm-l2-reference): zeta = recover(V(lam), scale) (`certify.predictor_from`), written only when
  that predictor reproduces the solver's certificate to WRITE_TOL and every validation label, and
  zeta is larger than ZETA_INLINE_BYTES;
- `zeta`: zeta itself (float64, rows x features), otherwise;
- `ray`: the multipliers only (no predictor).

Written as `svm/<objective>/compact.npz`; a sweep copies them to `OUT/solutions/<id>/`. Read as
untrusted: no symlink, no pickles, every array's dtype, shape and finiteness checked (`Unusable`).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import zipfile
from pathlib import Path

import numpy as np

from gbcli.config.loading import MAX_CONFIG_BYTES, read_stored_config, validate
from gbcli.errors import GbError
from gbcli.fs import layout
from gbcli.fs.layout import RunDir
from gbcli.fs.safe import atomic_write_bytes, is_dir, is_file, is_link, read_json, read_untrusted, remove, write_npz
from gbcli.programs.certify import certificate, predictor_from, recovery_scales, scale_groups
from gbcli.programs.design import GatedDesign, Solution, decision
from gbcli.text import shorten

FORMAT, VERSION = "gb-solution", 1
ZETA_INLINE_BYTES = 64 * 1024          # a predictor this small is stored as it is
MAX_SOLUTION_BYTES = 512 * 1024 ** 2   # a stored solution file larger than this is not read
CLAIMS = ("status", "certified", "objective", "primal_objective", "dual_objective", "rel_gap", "min_margin",
          "train_error", "val_error", "relative_margin_bound", "tolerance", "solver")
RTOL = 1e-9        # claimed objective and bounds against the recomputed ones (relative)
GAP_ATOL = 1e-10   # claimed relative gap and smallest margin against the recomputed ones (absolute)
# objectives this close (absolute) are equal: an optimum of 0 has values of ~1e-29, rounding alone
OBJECTIVE_ATOL = 1e-15
WRITE_TOL = 1e-11  # the multipliers form is written only when it reproduces the certificate this closely
COMPACT_ARRAYS = ("meta", "lam_index", "lam_value", "scale", "zeta", "val_sign")


class Unusable(Exception):
    """A stored file or record that cannot be used (the message says why)."""


def compact_arrays(objective: str, design: GatedDesign, zeta: np.ndarray | None, lam: np.ndarray | None,
                   val_out: np.ndarray | None, record: dict, tol: float) -> dict[str, np.ndarray]:
    """The compact solution of one program (see the module doc), with the record's claims."""
    n, rows, dim = len(design.y_train), design.rows, design.x_train.shape[1]
    arrays: dict[str, np.ndarray] = {}
    if lam is not None and not np.all(np.isfinite(lam)):
        lam = None   # no bound to store (the record is not certified by these multipliers either)
    if lam is not None:
        lam = np.asarray(lam, np.float64)
        idx = np.flatnonzero(lam)   # a working set's multipliers are zero outside it
        arrays.update(lam_index=idx.astype(np.int32 if n < 2 ** 31 else np.int64), lam_value=lam[idx])
    form = "none" if lam is None else "ray"
    if zeta is not None:
        zeta = np.asarray(zeta, np.float64)
        form = "zeta"
        out = decision(zeta, design.x_val, design.e_val) if val_out is None else val_out
        arrays["val_sign"] = np.sign(np.nan_to_num(np.asarray(out, np.float64))).astype(np.int8)
        if lam is not None and zeta.nbytes > ZETA_INLINE_BYTES:
            s = _reproducing_scales(design, zeta, lam, tol, arrays["val_sign"], record)
            if s is not None:
                form = "multipliers"
                arrays["scale"] = s
        if form == "zeta":
            arrays["zeta"] = zeta
    meta = {"format": FORMAT, "version": VERSION, "objective": objective, "form": form, "n": n, "rows": rows,
            "dim": dim, "val": len(design.x_val), "claims": {k: record.get(k) for k in CLAIMS if k in record}}
    arrays["meta"] = np.array(json.dumps(meta, default=float))
    return arrays


def _reproducing_scales(design: GatedDesign, zeta: np.ndarray, lam: np.ndarray, tol: float, val_sign: np.ndarray,
                        record: dict) -> np.ndarray | None:
    """Recovery scales reproducing `zeta`'s certificate to WRITE_TOL and every validation label, or None."""
    s = recovery_scales(design, zeta, lam)
    if s is None or not np.all(np.isfinite(s)):
        return None
    z2 = predictor_from(design, lam, s)
    if z2 is None or not np.all(np.isfinite(z2)):
        return None
    keys = ("certified", "primal_objective", "dual_objective", "rel_gap", "min_margin")
    a = {k: record[k] for k in keys} if all(k in record for k in keys) else \
        certificate(design, Solution(zeta, "optimal", math.nan, 0.0, "", lam=lam), tol)   # the record's is zeta's
    b = certificate(design, Solution(z2, "optimal", math.nan, 0.0, "", lam=lam), tol)
    # every number `gb verify` compares (to WRITE_TOL: relative for the objectives and bounds, absolute for
    # the gap and the smallest margin), then every validation label
    same = (a["certified"] == b["certified"]
            and all(close(a.get(k), b.get(k), WRITE_TOL, OBJECTIVE_ATOL if k != "relative_margin_bound" else 0.0)
                    for k in ("primal_objective", "dual_objective", "relative_margin_bound") if k in a or k in b)
            and all(close(a[k], b[k], 0.0, WRITE_TOL) for k in ("rel_gap", "min_margin"))
            and np.array_equal(val_sign, np.sign(decision(z2, design.x_val, design.e_val)).astype(np.int8)))
    return s if same else None


def no_links(root: Path, path: Path) -> None:
    """Refuse `path` when it or a folder between `root` and it is a symlink (root may be one)."""
    p = root
    for part in path.relative_to(root).parts:
        p = p / part
        if is_link(p):
            raise Unusable(f"{p.relative_to(root)}: is a symlink (not followed)")


def read_stored(root: Path, path: Path, config: bool = False):
    """The JSON record at `path` or, with `config`, its validated config; Unusable says why not."""
    no_links(root, path)
    try:
        raw = read_stored_config(path, strict=True) if config else read_json(path)
    except FileNotFoundError:
        raise Unusable(f"{path.name}: missing") from None
    except Exception as exc:   # noqa: BLE001 (OSError, JSON, YAML, unicode, size)
        raise Unusable(f"{path.name}: unreadable ({type(exc).__name__})") from None
    if not isinstance(raw, dict):
        raise Unusable(f"{path.name}: not a {'config' if config else 'record'}")
    try:
        return validate(raw, path.name) if config else raw
    except GbError as exc:
        raise Unusable(shorten(str(exc), 200)) from None


def read_npz(root: Path, path: Path, allowed: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The arrays of an npz below `root` (members named in `allowed` only), as `read_stored` reads."""
    no_links(root, path)
    try:
        data = read_untrusted(path, MAX_SOLUTION_BYTES)
    except FileNotFoundError:
        raise Unusable(f"{path.name}: missing") from None
    except (OSError, ValueError) as exc:
        raise Unusable(f"{path.name}: unreadable ({shorten(getattr(exc, 'strerror', None) or exc, 120)})") from None
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for name in zf.namelist():
                if not name.endswith(".npy") or name[:-4] not in allowed:
                    raise Unusable(f"{path.name}: unexpected member {shorten(name, 60)!r}")
            if (total := sum(info.file_size for info in zf.infolist())) > 4 * MAX_SOLUTION_BYTES:
                raise Unusable(f"{path.name}: its arrays would take {total} bytes")
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return {k: np.asarray(z[k]) for k in z.files}
    except Unusable:
        raise
    except Exception as exc:   # noqa: BLE001 (truncated, bit-flipped, pickles, foreign: zipfile, EOF, value errors)
        why = str(exc).splitlines()[0] if str(exc) else "unreadable"
        raise Unusable(f"{path.name}: not a readable npz of arrays ({type(exc).__name__}: {shorten(why, 100)})") from None


def _float_array(a: np.ndarray | None, name: str, shape: tuple) -> np.ndarray | None:
    if a is None:
        return None
    if a.dtype.kind != "f" or a.shape != shape:
        raise Unusable(f"{name}: {a.dtype} {a.shape}, expected float {shape}")
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)):
        raise Unusable(f"{name}: not finite")
    return a


def _multipliers(arrays: dict, n: int) -> np.ndarray | None:
    if "lam_index" not in arrays and "lam_value" not in arrays:
        return None
    idx, val = arrays.get("lam_index"), arrays.get("lam_value")
    if idx is None or val is None or idx.dtype.kind not in "iu" or idx.ndim != 1 or val.shape != idx.shape:
        raise Unusable("lam_index / lam_value: not an index array and a value array of one length")
    val = _float_array(val, "lam_value", idx.shape)
    if len(idx) and (idx.min() < 0 or idx.max() >= n or np.any(np.diff(idx) <= 0)):
        raise Unusable(f"lam_index: not increasing indices of the {n} training points")
    lam = np.zeros(n)
    lam[idx.astype(np.int64)] = val
    return lam


def compact_solution(arrays: dict, design: GatedDesign, objective: str) -> tuple:
    """(zeta, lam, val_sign, claims, form) of a compact file's arrays; Unusable when they do not fit."""
    n, rows, dim, m = len(design.y_train), design.rows, design.x_train.shape[1], len(design.x_val)
    meta_a = arrays.get("meta")
    if meta_a is None or meta_a.dtype.kind != "U" or meta_a.shape != ():
        raise Unusable("meta: missing or not a string")
    try:
        meta = json.loads(str(meta_a[()]))
    except ValueError:
        raise Unusable("meta: not JSON") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise Unusable(f"meta: not a {FORMAT} file of version {VERSION}")
    if meta.get("objective") != objective:
        raise Unusable(f"meta: the solution of {shorten(repr(meta.get('objective')), 40)}, not {objective}")
    if (meta.get("n"), meta.get("rows"), meta.get("dim"), meta.get("val")) != (n, rows, dim, m):
        raise Unusable(f"meta: sizes {[meta.get(k) for k in ('n', 'rows', 'dim', 'val')]} do not fit the "
                       f"program ({n} margins, {rows} x {dim} variables, {m} validation points)")
    form, claims = meta.get("form"), meta.get("claims")
    if form not in ("multipliers", "zeta", "ray", "none") or not isinstance(claims, dict):
        raise Unusable("meta: no valid form or claims")
    lam = _multipliers(arrays, n)
    zeta = None
    if form == "zeta":
        zeta = _float_array(arrays.get("zeta"), "zeta", (rows, dim))
        if zeta is None:
            raise Unusable("zeta: missing")
    elif form == "multipliers":
        groups = len(scale_groups(design))
        s = _float_array(arrays.get("scale"), "scale", (groups,))
        if s is None or lam is None:
            raise Unusable("scale or multipliers: missing")
        zeta = predictor_from(design, lam, s)
        if zeta is None or not np.all(np.isfinite(zeta)):
            raise Unusable("the multipliers give no finite predictor")
    elif form == "ray" and lam is None:
        raise Unusable("the ray's multipliers: missing")
    extra = ({"zeta"} if form != "zeta" else set()) | ({"scale"} if form != "multipliers" else set())
    if extra & set(arrays):
        raise Unusable(f"arrays {sorted(extra & set(arrays))} do not belong to form {form}")
    sign = arrays.get("val_sign")
    if zeta is not None:
        if sign is None or sign.dtype != np.int8 or sign.shape != (m,) or not np.all(np.abs(sign) <= 1):
            raise Unusable("val_sign: missing or not int8 signs of the validation points")
    elif sign is not None:
        raise Unusable("val_sign: stored without a predictor")
    return zeta, lam, sign, claims, form


def close(a, b, rtol: float = RTOL, atol: float = 0.0) -> bool:
    """Within atol + rtol * the larger (NaN to NaN, an infinity to itself); False for a non-number."""
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return False
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):   # a ray whose V(lam) is exactly 0 bounds the optimum by +inf
        return a == b
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def copy_point_solutions(run_dir: Path, dest: Path) -> int:
    """A sweep's `solutions/<id>/`: the point's compact files as `<objective>.npz`, its config.yaml,
    and model.pt when a program reads the network (regular files only); returns how many programs."""
    from gbcli.registry import program_of   # the models: imported on first use

    run = RunDir(run_dir)
    if not is_dir(run.svm):
        return 0
    config, needs_model, n = None, False, 0
    for stage in sorted(run.svm.iterdir()):
        compact = stage / layout.COMPACT
        if not is_dir(stage) or not is_file(compact):
            continue
        atomic_write_bytes(dest / f"{stage.name}.npz", read_untrusted(compact, MAX_SOLUTION_BYTES))
        config = config or stage / layout.CONFIG
        with contextlib.suppress(Exception):   # a config that is not gb's: verify says what is wrong with it
            needs_model = needs_model or program_of(read_stored(stage, stage / layout.CONFIG, config=True),
                                                    stage.name).needs_trained
        n += 1
    if config is not None:
        atomic_write_bytes(dest / layout.CONFIG, read_untrusted(config, MAX_CONFIG_BYTES))
    if needs_model and is_file(run.model):
        atomic_write_bytes(dest / layout.MODEL, read_untrusted(run.model))
    else:
        remove(dest / layout.MODEL)
    return n
