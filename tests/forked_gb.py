"""Run the real `gb` CLI in a fresh process forked from one that has already imported it.

Why: a `gb` process spends 1.5-2.5 CPU seconds importing torch, pandas and matplotlib before it
reads its first argument, and the bad-input suites (test_hostile, test_cli_errors, test_bounded)
start about 450 of them: on the 2-core machine that import was most of their time. A server
process imports gbcli and its heavy dependencies once and forks one child per command. The child
is a real, separate process with its own working directory, environment, umask, memory limit,
standard streams and exit code, and runs `gbcli.cli.main()` exactly as `python -c "from gbcli.cli
import main; main()"` does (the same `sys.argv`, `sys.path[0] == ''`, interpreter exit).

What a fork cannot show is what `gb` imports and how fast it starts: tests/test_config_keys.py
starts real processes for that. Values fixed when gbcli is imported (the terminal width of its
consoles from COLUMNS; torch's thread count from OMP_NUM_THREADS) come from the server's
environment, so there is one server per value of those variables.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
# read when gbcli and torch are imported: the server's own environment must carry the request's
AT_IMPORT = ("COLUMNS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONDONTWRITEBYTECODE")
PRELOAD = ("torch", "pandas", "matplotlib.figure", "gbcli.cli", "gbcli.runs.sweep", "gbcli.runs.stages",
           "gbcli.runs.verify", "gbcli.runs.figures", "gbcli.runs.index")


# ------------------------------------------------------------------ the server (its own process)


def serve(path: str) -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from gbcli import registry

    registry.instruments()   # the experiments and instruments every report asks for
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # children are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        request = json.loads(conn.makefile("rb").readline())
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            listener.close()
            _child(conn, request)   # never returns
        conn.close()


def _child(conn: socket.socket, req: dict) -> None:
    code = 1
    try:
        conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)   # gb waits for its own children
        os.setpgid(0, 0)   # its own process group: a timeout kills gb and whatever it started
        fds = (os.open(os.devnull, os.O_RDONLY), os.open(req["stdout"], os.O_WRONLY | os.O_TRUNC),
               os.open(req["stderr"], os.O_WRONLY | os.O_TRUNC))
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        if req["umask"] is not None:
            os.umask(req["umask"])
        if req["memory"] is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (req["memory"], req["memory"]))
        sys.argv = [req["argv0"], *req["args"]]
        sys.path[:] = [p for p in sys.path if p != HERE]
        code = _main()
    finally:
        try:
            conn.sendall(json.dumps({"rc": code}).encode() + b"\n")
        finally:
            os._exit(code)


def _main() -> int:
    """`gbcli.cli.main()` and the interpreter's exit, as `python -c` runs them: the exit code of
    SystemExit, a traceback and 1 for any other exception, then the threads joined and the atexit
    handlers run."""
    import traceback

    from gbcli.cli import main

    try:
        main()
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    return code


# ------------------------------------------------------------------ the client (in the test process)


_servers: dict[tuple, tuple[subprocess.Popen, str]] = {}
_lock = threading.Lock()


def _environ() -> dict:
    """A copy of os.environ that a test thread can take while pytest's main thread sets and removes
    PYTEST_CURRENT_TEST (copying iterates the keys, then reads each: a removed key is a KeyError)."""
    while True:
        try:
            return dict(os.environ)
        except KeyError:
            continue


def _server(env: dict) -> str:
    key = tuple(env.get(k) for k in AT_IMPORT)
    with _lock:
        if key in _servers and _servers[key][0].poll() is None:
            return _servers[key][1]
        path = os.path.join(tempfile.mkdtemp(prefix="gbfork-"), "sock")
        server_env = {k: v for k, v in _environ().items() if k not in AT_IMPORT}
        server_env.update({k: v for k, v in zip(AT_IMPORT, key) if v is not None})
        code = f"import sys; sys.path.append({HERE!r}); import forked_gb; forked_gb.serve({path!r})"
        proc = subprocess.Popen([sys.executable, "-c", code], env=server_env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, cwd=tempfile.gettempdir())
        if proc.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"the gb fork server did not start (exit {proc.wait()})")
        _servers[key] = (proc, path)
        return path


@atexit.register
def _stop_servers() -> None:
    for proc, _ in _servers.values():
        proc.kill()


CLI = str(Path(HERE).parent / "gbcli" / "cli.py")   # sys.argv[0] of `python -m gbcli.cli`


def run(args, cwd, env: dict | None = None, timeout: float | None = None, umask: int | None = None,
        memory: int | None = None, argv0: str = "-c") -> subprocess.CompletedProcess:
    """`subprocess.run([python, -c, gb main, *args], cwd=cwd, env=env, capture_output=True,
    text=True, errors="replace", timeout=timeout)` with the umask and address-space limit applied
    in the child; raises subprocess.TimeoutExpired as it does. `argv0=CLI`: as `python -m gbcli.cli`
    (what the run records name as the command)."""
    env = _environ() if env is None else dict(env)
    args = [str(a) for a in args]
    with tempfile.TemporaryDirectory(prefix="gbfork-") as tmp:
        out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        for p in (out, err):
            open(p, "w").close()
        request = {"args": args, "argv0": argv0, "cwd": str(cwd), "env": env, "umask": umask, "memory": memory,
                   "stdout": out, "stderr": err}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(_server(env))
        conn.sendall(json.dumps(request).encode() + b"\n")
        reader = conn.makefile("rb")
        pid = json.loads(reader.readline())["pid"]
        conn.settimeout(timeout)
        try:
            line = reader.readline()
        except TimeoutError:
            line = None
        finally:
            conn.close()
        if line is None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        stdout, stderr = (Path(p).read_bytes().decode(errors="replace") for p in (out, err))
        cmd = ["gb", *args]
        if line is None:
            raise subprocess.TimeoutExpired(cmd, timeout, output=stdout, stderr=stderr)
        # a child killed by a signal sends no exit code: reported as subprocess does (-signal)
        code = json.loads(line)["rc"] if line else -signal.SIGKILL
        return subprocess.CompletedProcess(cmd, code, stdout, stderr)
