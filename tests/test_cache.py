"""The solve cache: identical programs are solved once, reused with a certificate of their own,
and nothing else is reused."""

import dataclasses
import json
import multiprocessing as mp

import numpy as np
import pytest

from gbcli.config import Config
from gbcli.fs.safe import read_json
from gbcli.store.cache import SolveCache
from gbcli.store.solutions import COMPACT_ARRAYS, compact_solution, read_npz
from gbcli.runs.compare import compare_run
from gbcli.runs.stages import build_design, fit_svm, prepare, train_gd

BODY = {"name": "c", "dataset": {"name": "digits", "train_size": 120, "val_size": 200},
        "model": {"kind": "gln", "hidden_units": 3}, "contexts": {"count": 2, "seed": 1},
        "training": {"epochs": 5}, "svm": {"objectives": ["svm-gln", "svm-l2"]}}


def config(**changes) -> Config:
    body = json.loads(json.dumps(BODY))
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        body[section][key] = value
    return Config.model_validate(body)


def quiet(*_):
    pass


def test_the_key_covers_what_the_solver_sees_and_nothing_else():
    cfg = config()
    design = build_design("svm-gln", cfg, prepare(cfg))
    cache = SolveCache()
    key = lambda d, solver="dual", iters=None, eps=None, tol=1e-6: SolveCache().key(d, solver, iters, eps, tol)
    base = key(design)
    assert cache.key(design, "dual", None, None, 1e-6) == base == key(dataclasses.replace(design))
    x = design.x_train.copy()
    x[7, 3] += 1e-9
    y = design.y_train.copy()
    y[0] = -y[0]
    e = design.e_train.copy()
    e[0] = e[0][::-1]
    changed = [dataclasses.replace(design, x_train=x), dataclasses.replace(design, y_train=y),
               dataclasses.replace(design, e_train=e), dataclasses.replace(design, norm="l2"),
               dataclasses.replace(design, groups=design.groups[::-1]), dataclasses.replace(design, units=4)]
    keys = {key(d) for d in changed} | {key(design, "clarabel"), key(design, iters=50), key(design, eps=1e-8),
                                        key(design, tol=1e-5)}
    assert base not in keys and len(keys) == 10
    # the validation set is not part of the program: predictions are recomputed from the solution
    assert key(dataclasses.replace(design, x_val=design.x_val[:10], e_val=design.e_val[:10])) == base


def run(cfg, run_dir, cache_dir):
    train_gd(cfg, run_dir, progress=False)
    fit_svm(cfg, run_dir, progress=False, echo=quiet, cache=SolveCache(cache_dir))
    return {o: read_json(run_dir / "svm" / o / "result.json") for o in cfg.svm.objectives}


def test_a_twin_reuses_the_solution_and_a_changed_design_does_not(tmp_path):
    solves = tmp_path / "solves"
    first = run(config(), tmp_path / "m0", solves)
    twin = run(config(training__momentum=0.9), tmp_path / "m9", solves)
    other = run(config(contexts__seed=2), tmp_path / "s2", solves)
    for o in BODY["svm"]["objectives"]:
        assert "cached_from" not in first[o] and "cached_from" not in other[o]
        assert twin[o]["cached_from"] == f"m0/{o}"
        assert twin[o]["certified"] and twin[o]["status"] == "optimal"
        # the same certificate, computed again on the twin's own design; only the manifest differs
        strip = lambda r: {k: v for k, v in r.items() if k not in ("manifest", "cached_from", "provenance")}
        assert strip(twin[o]) == strip(first[o])
        for stem in ("compact", "predictions"):
            a, b = np.load(tmp_path / "m0/svm" / o / f"{stem}.npz"), np.load(tmp_path / "m9/svm" / o / f"{stem}.npz")
            assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
        assert other[o]["objective"] != first[o]["objective"]
    compare_run(tmp_path / "m9")   # the cached results pass the run's integrity checks


def test_an_unreadable_entry_is_solved_again_and_replaced(tmp_path):
    solves = tmp_path / "solves"
    run(config(), tmp_path / "a", solves)
    for entry in solves.glob("*.npz"):
        entry.write_bytes(b"not an npz")
    again = run(config(), tmp_path / "b", solves)
    assert all("cached_from" not in r and r["certified"] for r in again.values())
    third = run(config(), tmp_path / "c", solves)
    assert all(r["cached_from"] == f"b/{o}" for o, r in third.items())


def _worker(args):
    import torch
    torch.set_num_threads(1)
    body, run_dir, cache_dir = args
    cfg = Config.model_validate(body)
    fit_svm(cfg, run_dir, progress=False, echo=quiet, cache=SolveCache(cache_dir))
    return {o: read_json(f"{run_dir}/svm/{o}/result.json").get("cached_from") for o in cfg.svm.objectives}


@pytest.mark.slow
def test_two_processes_racing_on_one_key_solve_it_once(tmp_path):
    workers = 2
    body = {**BODY, "svm": {"objectives": ["svm-gln"]}}
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers) as pool:
        got = pool.map(_worker, [(body, str(tmp_path / f"w{i}"), str(tmp_path / "solves")) for i in range(workers)])
    origins = [r["svm-gln"] for r in got]
    # the lock makes the later one wait for the answer: one solve, the other reuses it
    assert sorted(o is None for o in origins) == [False, True]
    assert [o for o in origins if o] in (["w0/svm-gln"], ["w1/svm-gln"])
    assert len(list((tmp_path / "solves").glob("*.npz"))) == 1


# ---- a damaged or foreign entry heals: a warning naming it, solved again, replaced (issue 24)

def _flip(data: bytes) -> bytes:
    b = bytearray(data)
    for i in range(len(b) // 3, len(b) // 3 + 64):   # inside the compressed arrays, not only the zip directory
        b[i] ^= 0xFF
    return bytes(b)


def _without_status(data: bytes) -> bytes:
    import io

    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        meta = json.loads(str(z["meta"][()]))
        arrays = {k: z[k] for k in z.files if k != "meta"}
    meta.pop("status")
    buf = io.BytesIO()
    np.savez(buf, meta=np.array(json.dumps(meta)), **arrays)
    return buf.getvalue()


DAMAGE = {"truncated": lambda d: d[: len(d) // 2], "empty": lambda d: b"", "bit-flipped": _flip,
          "without-status": _without_status}


def test_damaged_entries_heal(tmp_path):
    """Each damage of the issue made every rerun of its points fail (BadZipFile, EOFError, KeyError):
    now each counts as missing, with a warning naming the entry, and is replaced by a good one."""
    import pytest

    cfg = config(svm__objectives=["svm-gln"])
    solves = tmp_path / "solves"
    run(cfg, tmp_path / "first", solves)
    entry, = solves.glob("*.npz")
    good = entry.read_bytes()
    for name, damage in DAMAGE.items():
        entry.write_bytes(damage(good))
        said = []
        fit_svm(cfg, tmp_path / name, progress=False, echo=said.append, cache=SolveCache(solves))
        r = read_json(tmp_path / name / "svm" / "svm-gln" / "result.json")
        assert r["status"] == "optimal" and r["certified"] and "cached_from" not in r, (name, r)
        warnings = [s for s in said if "warning" in s and str(entry) in s]
        assert warnings, (name, said)
        healed = SolveCache(solves).get(entry.stem, build_design("svm-gln", cfg, prepare(cfg)))
        assert healed is not None and healed[1] == f"{name}/svm-gln", (name, healed)
    if not DAMAGE:
        pytest.fail("no damage tried")


class _Touch:
    """Unpickling it creates a file: what a hostile entry's object array could hold."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (str(self.path), "w")


def test_an_entry_with_an_object_array_is_never_unpickled(tmp_path):
    """A received `solves/` is untrusted: an entry whose array is a pickle is unusable (a warning
    names it) and its pickle never runs."""
    import io

    marker = tmp_path / "PWNED"
    evil = np.empty(2, dtype=object)
    evil[0], evil[1] = _Touch(marker), 0.0
    buf = io.BytesIO()
    np.savez(buf, meta=np.array(json.dumps({"key": "k"})), zeta=evil)   # np.savez pickles object arrays
    cache = SolveCache(tmp_path / "solves")
    (tmp_path / "solves").mkdir()
    (tmp_path / "solves" / "k.npz").write_bytes(buf.getvalue())
    said = []
    assert cache.get("k", warn=said.append) is None
    assert not marker.exists() and any("unusable" in s for s in said), said


GOOD_META = {"key": "k", "format": 1, "origin": "run/svm-gln", "status": "optimal", "value": 1.0, "seconds": 0.1,
             "solver": "dual", "message": "", "iterations": 3, "stop": "converged"}
GOOD_ARRAYS = {"zeta": np.ones((2, 3)), "lam": np.ones(4)}


@pytest.mark.parametrize("meta, arrays", [
    ({"value": True}, {}),                                  # a bool is no objective
    ({"seconds": "1"}, {}),
    ({"iterations": 1.5}, {}),
    ({"iterations": True}, {}),
    ({"solver": 7}, {}),
    ({}, {"zeta": np.full((2, 3), np.nan)}),                # a non-finite predictor
    ({}, {"lam": np.ones(4, dtype=np.int64)}),              # not a float array
    ({}, {"extra": np.ones(1)}),                            # an array gb never writes
    ({}, {"zeta": np.ones((3, 2))}),                        # the program has 2 x 3 variables
    ({}, {"lam": np.ones(5)}),                              # and 4 margins
    ({}, {"zeta": np.ones((0, 3))}),                        # an optimum without a predictor
], ids=["value-bool", "seconds-str", "iterations-float", "iterations-bool", "solver-int", "zeta-nan", "lam-int",
        "extra-array", "zeta-shape", "lam-shape", "optimal-zeta-empty"])
def test_an_entry_whose_metadata_or_arrays_lie_is_unusable(tmp_path, meta, arrays):
    """Every field of a received entry is checked before it is used: one wrong field and the entry
    counts as missing (a warning names it), whatever the rest says."""
    import io

    from gbcli.programs.design import GatedDesign

    x = np.ones((4, 3))
    design = GatedDesign(x, np.array([1.0, -1.0, 1.0, -1.0]), np.ones((4, 2)), x, np.ones((4, 2)), "sq")
    folder = tmp_path / "solves"
    folder.mkdir()

    def entry(meta_over, arrays_over):
        buf = io.BytesIO()
        np.savez(buf, meta=np.array(json.dumps({**GOOD_META, **meta_over})), **{**GOOD_ARRAYS, **arrays_over})
        (folder / "k.npz").write_bytes(buf.getvalue())

    entry({}, {})
    assert SolveCache(folder).get("k", design) is not None   # the good entry is read
    entry(meta, arrays)
    said = []
    assert SolveCache(folder).get("k", design, warn=said.append) is None and said


def test_a_key_can_be_claimed_again_once_released(tmp_path):
    cache = SolveCache(tmp_path / "sweep" / "solves")
    for _ in range(2):   # made with its parent the first time; it exists the second time
        with cache.claim("k"):
            pass
        with cache.claim("k", wait=False):
            pass


def test_the_keys_of_existing_solves_folders_stay_valid():
    """A sweep's `solves/<key>.npz` are found again only under the same key: the key of a fixed
    program (and of its constraints) is the one gb computed when those folders were written; a
    program solved with its arrays on another device is another key."""
    from gbcli.programs.design import GatedDesign

    x = np.arange(12, dtype=np.float64).reshape(4, 3) / 7
    design = GatedDesign(x, np.array([1.0, -1.0, 1.0, -1.0]), np.eye(4)[:, :2], x, np.eye(4)[:, :2], "sq")
    cache = SolveCache()
    # computed by the code before issue 33 moved the cache into gbcli/store (99250f4^, gbcli/runs/cache.py)
    assert cache.key(design, "dual", None, None, 1e-6) == "1a962379dbaf6063f645b1d1173eb8d4"
    assert cache.constraints_key(design) == "a8cf17bdaee1387c57d458ce7aefab79"
    assert cache.key(design, "dual", None, None, 1e-6, device="cuda") != cache.key(design, "dual", None, None, 1e-6)


def test_an_entry_holding_another_programs_answer_is_replaced(tmp_path):
    """An entry whose key is right but whose solution is another program's (copied over it): it fails
    the certificate on this design, the warning names the cache entry, and the entry is replaced."""
    a, b = config(svm__objectives=["svm-gln"]), config(svm__objectives=["svm-gln"], contexts__seed=2)
    run(a, tmp_path / "a", tmp_path / "sa")
    run(b, tmp_path / "b", tmp_path / "sb")
    (ea,), (eb,) = (tmp_path / "sa").glob("*.npz"), (tmp_path / "sb").glob("*.npz")
    import io

    with np.load(io.BytesIO(eb.read_bytes()), allow_pickle=False) as z:   # b's solution under a's key
        meta, arrays = json.loads(str(z["meta"][()])), {k: z[k] for k in z.files if k != "meta"}
    meta["key"] = ea.stem
    buf = io.BytesIO()
    np.savez(buf, meta=np.array(json.dumps(meta)), **arrays)
    ea.write_bytes(buf.getvalue())
    said = []
    fit_svm(a, tmp_path / "a2", progress=False, echo=said.append, cache=SolveCache(tmp_path / "sa"))
    r = read_json(tmp_path / "a2" / "svm" / "svm-gln" / "result.json")
    assert r["status"] == "optimal" and r["certified"] and "cached_from" not in r, r
    assert any("solve cache entry" in s and str(ea) in s for s in said), said
    third = run(a, tmp_path / "a3", tmp_path / "sa")   # replaced by the good answer: reused now
    assert third["svm-gln"]["cached_from"] == "a2/svm-gln"


def test_an_entry_under_another_key_is_missing(tmp_path):
    cfg = config(svm__objectives=["svm-gln"])
    run(cfg, tmp_path / "a", tmp_path / "s")
    entry, = (tmp_path / "s").glob("*.npz")
    moved = entry.with_name("0" * 32 + ".npz")
    entry.rename(moved)
    said = []
    assert SolveCache(tmp_path / "s").get(moved.stem, warn=said.append) is None
    assert said and "another program" in said[0]


# ------------------------------------------------------------------ a busy program is deferred


def test_a_program_solved_elsewhere_is_deferred_and_the_rest_solved(tmp_path):
    """fit_svm(defer=True): the program another process holds is left (nothing of it written), the
    point's other program is solved, and Deferred names the one left; a later call solves it."""
    from gbcli.runs.stages import Deferred

    cfg = config()
    cache = SolveCache(tmp_path / "solves")
    run_dir = tmp_path / "p"
    train_gd(cfg, run_dir, progress=False)
    key = cache.key(build_design("svm-l2", cfg, prepare(cfg)), "dual", cfg.svm.max_iters, cfg.svm.eps,
                    cfg.svm.certify_tol)
    with SolveCache(tmp_path / "solves").claim(key):   # another worker solving it (its own lock file handle)
        with pytest.raises(Deferred) as exc:
            fit_svm(cfg, run_dir, progress=False, echo=quiet, cache=cache, defer=True)
    assert exc.value.objectives == ["svm-l2"]
    assert read_json(run_dir / "svm" / "svm-gln" / "result.json")["certified"]
    assert not (run_dir / "svm" / "svm-l2" / "result.json").exists()
    rec = fit_svm(cfg, run_dir, ["svm-l2"], progress=False, echo=quiet, cache=cache, defer=True)[0]
    assert rec["status"] == "optimal" and rec["certified"]


def test_a_worker_goes_on_to_its_next_point_while_a_twin_program_is_solved_elsewhere(tmp_path):
    """A sweep worker's group (seeds 1 and 2): while seed 1's program is held by another worker,
    seed 2 runs first; seed 1 is waited for only once nothing else is left, then finishes."""
    import threading
    import time

    from gbcli.runs.sweep import is_done, run_group

    cfgs = [config(contexts__seed=s, svm__objectives=["svm-l2"]) for s in (1, 2)]
    dirs = [tmp_path / f"s{s}" for s in (1, 2)]
    cache_dir = tmp_path / "solves"
    key = SolveCache().key(build_design("svm-l2", cfgs[0], prepare(cfgs[0])), "dual", cfgs[0].svm.max_iters,
                           cfgs[0].svm.eps, cfgs[0].svm.certify_tol)
    got = {}
    with SolveCache(cache_dir).claim(key):
        worker = threading.Thread(target=lambda: got.update(r=run_group([c.to_dict() for c in cfgs],
                                                                         [str(d) for d in dirs], str(cache_dir))))
        worker.start()
        for _ in range(600):   # seed 2 finishes while seed 1's program is held
            if is_done(dirs[1]) or not worker.is_alive():
                break
            time.sleep(0.1)
        assert is_done(dirs[1]) and not is_done(dirs[0]) and worker.is_alive()   # seed 1 now waits
    worker.join(120)
    assert [r["status"] for r in got["r"]] == ["done", "done"] and is_done(dirs[0])
    log = (dirs[0] / "log.txt").read_text()
    assert "being solved by another point" in log and "deferred after" in log
    assert "deferred" not in (dirs[1] / "log.txt").read_text()


# ------------------------------------------------------------------ one ray for programs with the same constraints

INSEPARABLE = {"dataset__train_size": 1200, "model__hidden_units": 1, "training__epochs": 1}   # digits, one unit


def test_a_ray_certifies_every_program_with_the_same_constraints(tmp_path):
    """svm-gln and svm-l2 on one network's gates have the same feasible set: svm-gln's dual ray is
    certified again on svm-l2's own design and norm and recorded as its answer, which enters the
    cache under svm-l2's own key too (a twin point reuses it)."""
    cfg = config(**INSEPARABLE)
    solves = tmp_path / "solves"
    first = run(cfg, tmp_path / "a", solves)
    assert first["svm-gln"]["status"] == "infeasible" and first["svm-gln"]["certified"]
    assert "cached_from" not in first["svm-gln"]
    l2 = first["svm-l2"]
    assert l2["status"] == "infeasible" and l2["certified"] and l2["cached_from"] == "a/svm-gln"
    assert l2["relative_margin_bound"] <= 1e-9 and "the dual ray of a/svm-gln" in l2["message"]
    design = build_design("svm-l2", cfg, prepare(cfg))
    cache = SolveCache(solves)
    key = cache.key(design, "dual", cfg.svm.max_iters, cfg.svm.eps, cfg.svm.certify_tol)
    assert cache.get(key, design)[0].status == "infeasible" and cache.get(cache.constraints_key(design), design)
    twin = run(config(**INSEPARABLE, training__momentum=0.9), tmp_path / "b", solves)
    assert twin["svm-l2"]["certified"] and twin["svm-l2"]["cached_from"] == "a/svm-gln"


def test_a_stored_ray_that_does_not_certify_is_not_used(tmp_path):
    """An entry under the constraints' key that is no ray of them (here: a feasible program's
    multipliers, planted) is certified on the program before use, fails, and the program is solved."""
    from gbcli.programs.design import Solution

    cfg = config()   # feasible: H = 3
    design = build_design("svm-l2", cfg, prepare(cfg))
    cache = SolveCache(tmp_path / "solves")
    cache.put(cache.constraints_key(design), Solution(None, "infeasible", float("nan"), 0.0, "dual", "planted",
                                                      lam=np.ones(len(design.y_train))), "elsewhere/svm-gln")
    got = run(cfg, tmp_path / "a", tmp_path / "solves")
    assert got["svm-l2"]["status"] == "optimal" and got["svm-l2"]["certified"] and "cached_from" not in got["svm-l2"]


def test_a_program_that_fails_on_its_own_takes_a_ray_found_meanwhile(tmp_path, monkeypatch):
    """Seed 3 at H = 10 (issue 13): svm-l2 failed on its own (rounding, no positive margin) while
    svm-gln found the ray. Fault injection: svm-l2's solve reports `failed`, after the other worker's
    ray has arrived; the stage looks again and records the ray, certified on svm-l2's design."""
    from gbcli.programs.design import Solution
    from gbcli.programs.solvers import SOLVERS

    cfg = config(**INSEPARABLE)
    gln = fit_svm(cfg, tmp_path / "other", ["svm-gln"], progress=False, echo=quiet)[0]   # the other worker's ray
    assert gln["status"] == "infeasible" and gln["certified"]
    gln_design = build_design("svm-gln", cfg, prepare(cfg))
    compact = tmp_path / "other" / "svm" / "svm-gln" / "compact.npz"
    ray = compact_solution(read_npz(compact.parent, compact, COMPACT_ARRAYS), gln_design, "svm-gln")[1]
    solves = SolveCache(tmp_path / "solves")
    real = SOLVERS["dual"].solve

    def fails_after_the_ray_arrives(design, *args, **kwargs):
        solves.put(solves.constraints_key(gln_design), Solution(None, "infeasible", float("nan"), 1.0, "dual",
                                                                "found elsewhere", lam=ray), "other/svm-gln")
        sol = real(design, *args, **kwargs)
        return Solution(None, "failed", float("nan"), sol.seconds, "dual", "no positive margin (injected)")

    monkeypatch.setattr(SOLVERS["dual"], "solve", fails_after_the_ray_arrives)
    rec = fit_svm(cfg, tmp_path / "p", ["svm-l2"], progress=False, echo=quiet, cache=solves)[0]
    assert rec["status"] == "infeasible" and rec["certified"] and rec["cached_from"] == "other/svm-gln"
