"""Job processes started from a warm interpreter: torch, timm and plugdrop imported once.

A fresh ``python -m plugdrop.ablate.worker`` spends seconds of CPU importing torch, timm and
torchvision (about 7 s on a 2-core machine) before its first step, once per run, and again
whenever a run is retried. ``--launcher processes`` instead forks each run's process from a
server that imported them once (:mod:`multiprocessing`'s ``forkserver``, started by the first
job of the driver and ended with it): a job then starts in a fraction of a second. A job that
starts warm jobs itself forks them from the same server.

The server never runs a torch operation, holds no GPU and starts no thread pool, so each child
is a clean process. It runs the worker as ``python -m plugdrop.ablate.worker`` would
(:func:`runpy.run_module`): in a session of its own, with the job's environment
(``CUDA_VISIBLE_DEVICES``, ``OMP_NUM_THREADS``), the driver's working directory and module path
(the job's ``PYTHONPATH`` first), its log as stdout and stderr, and the worker's exit status.
Where ``forkserver`` is missing (Windows) or ``PLUGDROP_WARM_START=0``, a job is a fresh
interpreter (:func:`start` returns a :class:`subprocess.Popen`).

A handle (:class:`WarmProcess`) answers as much of :class:`subprocess.Popen` as a launcher uses:
``pid``, ``poll()``, ``wait(timeout)``, ``send_signal()``, ``kill()`` and ``returncode`` (a
negative signal number when a signal ended it).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["FRESH", "PRELOAD", "WarmProcess", "call", "enabled", "failed", "module_command",
           "preload", "spawn", "start", "usable"]

#: what the server imports once: its own quick end (:mod:`.server_exit`), the worker (torch,
#: plugdrop's runner) and the parts of timm a run builds (its optimizer, scheduler and data
#: factories; timm imports torchvision)
PRELOAD = ["plugdrop.ablate.launch.server_exit", "plugdrop.ablate.worker", "timm.optim",
           "timm.scheduler", "timm.data", "timm.utils"]

#: modules that start in a fresh interpreter all the same (torchrun starts its ranks afresh)
FRESH = frozenset({"torch.distributed.run"})

_context: Any = None
_broken: str | None = None  # why the server failed to start a job: fresh interpreters since


def enabled() -> bool:
    """Whether jobs start from the warm server here: ``forkserver`` exists on this platform
    and ``PLUGDROP_WARM_START`` is not ``0``."""
    if os.environ.get("PLUGDROP_WARM_START", "1").strip() == "0":
        return False
    return "forkserver" in multiprocessing.get_all_start_methods()


def preload(*modules: str) -> None:
    """Have the server import ``modules`` too (effective before its first job only)."""
    PRELOAD.extend(m for m in modules if m not in PRELOAD)


def _server() -> Any:
    """The forkserver context; the server itself starts with the first job, importing
    :data:`PRELOAD`."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
    _context.set_forkserver_preload(list(PRELOAD))
    return _context


class WarmProcess:
    """A job forked from the warm server (the :class:`subprocess.Popen` calls launchers use)."""

    def __init__(self, process: Any) -> None:
        self._process = process
        self.pid: int = process.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit status once the job ended (``-N``: signal ``N`` ended it), else None."""
        if self.returncode is None and not self._process.is_alive():
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Waits for the job's end; raises :class:`subprocess.TimeoutExpired` after
        ``timeout`` seconds."""
        self._process.join(timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(["plugdrop.ablate.worker"], timeout or 0.0)
        return code

    def send_signal(self, signum: int) -> None:
        """Sends ``signum`` to the job, unless it ended already."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _module_path(env: dict[str, str], cwd: str) -> list[str]:
    """The ``sys.path`` a fresh ``python -m`` would have: the working directory, then the
    job's ``PYTHONPATH``, then the interpreter's own entries."""
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    head = [cwd, *extra]
    return head + [p for p in sys.path if p and p not in head]


def _threads(env: dict[str, str]) -> None:
    """torch's threads as a fresh interpreter would take them from the job's
    ``OMP_NUM_THREADS`` (the server read its own when it imported torch)."""
    value = env.get("OMP_NUM_THREADS", "").strip()
    torch = sys.modules.get("torch")
    if torch is not None and value.isdigit() and int(value) > 0:
        torch.set_num_threads(int(value))


def _handlers_reset() -> None:
    """The signal handlers an ``exec`` leaves: a handler of the forking process (a job
    controller's forwarding of SIGTERM, say) back to the default; ignored signals stay
    ignored, as they do through an ``exec``."""
    for signum in signal.valid_signals():
        try:
            handler = signal.getsignal(signum)
            if callable(handler) and handler is not signal.default_int_handler:
                signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP, a signal Python does not know
            pass


def _share_the_server() -> None:
    """(In a job.) The warm jobs this job starts (a driver forked warm, as the tests fork
    theirs) fork from the server that forked this one instead of from a second server, which
    would be a fresh interpreter importing :data:`PRELOAD` again: seconds of CPU each time.
    :mod:`multiprocessing.forkserver` hands its children the server's address and the "alive"
    pipe; only the check that this process started the server itself (it would start one)
    is left out. Where the server is gone, a job fails to start and :func:`start` falls back to
    fresh interpreters. (Private names of the standard library, used here only.)"""
    from multiprocessing import forkserver, resource_tracker

    server = getattr(forkserver, "_forkserver", None)
    if (server is not None and getattr(server, "_forkserver_address", None) is not None
            and getattr(server, "_forkserver_alive_fd", None) is not None
            and getattr(server, "_forkserver_pid", 0) is None):
        server.ensure_running = resource_tracker.ensure_running


def _enter(env: dict[str, str], cwd: str, stdout: str | None, stderr: str | None,
           new_session: bool, unbuffered: bool) -> None:
    """(In a job.) Its session (unless ``new_session`` is false), signal handlers, output files
    (appended to; one file when ``stdout == stderr``; None: this process's), environment,
    directory and module path, as a fresh ``python`` would have them."""
    if new_session:
        os.setsid()
    _handlers_reset()
    sys.stdout.flush()
    sys.stderr.flush()
    if stdout is not None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        out = os.open(stdout, flags, 0o644)
        err = out if stderr in (None, stdout) else os.open(str(stderr), flags, 0o644)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in {out, err}:
            os.close(fd)
    if unbuffered:  # as `python -u`: nothing written waits in a buffer
        sys.stdout, sys.stderr = (
            io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), write_through=True,
                             encoding=stream.encoding, errors=stream.errors)
            for fd, stream in ((1, sys.stdout), (2, sys.stderr)))
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.path[:] = _module_path(env, cwd)
    _threads(env)
    _share_the_server()
    # multiprocessing's start method as in a fresh interpreter (the server's child inherits
    # "forkserver"): a DataLoader's workers fork from the job, they do not start a server
    multiprocessing.set_start_method(None, force=True)


def _job(module: str, args: list[str], env: dict[str, str], cwd: str, stdout: str | None,
         stderr: str | None, new_session: bool = True, unbuffered: bool = False) -> None:
    """The child: :func:`_enter`, then ``python -m MODULE ARGS`` (:func:`runpy.run_module`;
    ``python -u`` where ``unbuffered``); its ``sys.exit`` status is the process's."""
    _enter(env, cwd, stdout, stderr, new_session, unbuffered)
    sys.argv = [module, *args]
    spec = importlib.util.find_spec(module)
    package = spec is not None and spec.submodule_search_locations is not None
    sys.modules.pop(f"{module}.__main__" if package else module, None)  # as in a fresh
    # `python -m`: what runs runs as __main__ only (no warning about a module imported first)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _call(target: Callable[..., int], args: tuple[Any, ...], kwargs: dict[str, Any],
          env: dict[str, str], cwd: str, stdout: str | None) -> None:
    """The child of :func:`call`: :func:`_enter`, then ``target(*args, **kwargs)``, whose
    return value is the process's exit status."""
    _enter(env, cwd, stdout, stdout, True, True)
    try:
        code = target(*args, **kwargs)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


def spawn(module: str, args: list[str], *, env: dict[str, str], stdout: Path | None,
          stderr: Path | None = None, cwd: Path | None = None, new_session: bool = True,
          unbuffered: bool = False, here: bool = False) -> WarmProcess:
    """``python -m MODULE ARGS`` forked from the warm server, with ``env``, in ``cwd``
    (default: this process's), its stdout appended to ``stdout`` (None: the server's, which
    are the driver's) and its stderr to ``stderr`` (default: the same file), in a session of
    its own unless ``new_session`` is false, unbuffered as ``python -u`` where ``unbuffered``.
    ``here``: forked from this process instead, which must be warm itself (a job of the
    server: a plain :func:`os.fork` of a process that imported torch and ran nothing)."""
    out = str(stdout) if stdout is not None else None
    context = multiprocessing.get_context("fork") if here else _server()
    process = context.Process(
        target=_job, args=(module, list(args), dict(env), str(cwd or os.getcwd()), out,
                           str(stderr) if stderr is not None else out),
        kwargs={"new_session": new_session, "unbuffered": unbuffered}, daemon=False)
    with _main_left_out():
        process.start()
    return WarmProcess(process)


def call(target: Callable[..., int], *args: Any, env: dict[str, str], stdout: Path,
         **kwargs: Any) -> WarmProcess:
    """``target(*args, **kwargs)`` in a job forked from the warm server, as a fresh interpreter
    would run it (:func:`_enter`: a session of its own, ``env``, this process's working
    directory, unbuffered output appended to ``stdout``); its return value is the job's exit
    status. What the job needs travels as ``target``'s arguments (the server receives them
    from this process, as :mod:`multiprocessing` sends any job's): a config object, say,
    instead of its text read back from a file."""
    process = _server().Process(
        target=_call, args=(target, args, kwargs, dict(env), os.getcwd(), str(stdout)),
        daemon=False)
    with _main_left_out():
        process.start()
    return WarmProcess(process)


def module_command(command: list[str]) -> tuple[str, list[str], bool] | None:
    """``(module, args, unbuffered)`` for a command ``[python, (-u), -m, module, *args]`` of
    this interpreter (what a job forked warm runs); None for any other command."""
    if not command or command[0] != sys.executable:
        return None
    rest = command[1:]
    unbuffered = rest[:1] == ["-u"]
    rest = rest[1:] if unbuffered else rest
    if len(rest) < 2 or rest[0] != "-m":
        return None
    return rest[1], rest[2:], unbuffered


def usable() -> bool:
    """Whether a job starts warm now: :func:`enabled`, and the server never failed to start
    one (:func:`failed`)."""
    return enabled() and _broken is None


def failed(error: BaseException) -> None:
    """Records that the server could not start a job (no room for its socket, a process
    limit ...): one line on stderr, and every later job starts as a fresh interpreter."""
    global _broken
    _broken = f"{type(error).__name__}: {error}"
    print(f"plugdrop: the warm server could not start a job ({_broken}); every job "
          f"starts as a fresh interpreter instead", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _main_left_out() -> Iterator[None]:
    """Hides this process's ``__main__`` while a job starts: :mod:`multiprocessing` would
    import it again in the job (as ``__mp_main__``), running a user's script without an
    ``if __name__ == "__main__":`` guard once more in every job; a job needs nothing of it."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def start(command: list[str], *, env: dict[str, str], log: Path, log_file: IO[bytes]
          ) -> WarmProcess | subprocess.Popen:
    """Starts a job's ``command`` with ``env``, its stdout and stderr appended to ``log`` (open
    here as ``log_file``), in a session of its own: ``[sys.executable, (-u), -m, MODULE, *ARGS]``
    (the worker) forked from the warm server where :func:`enabled`; any other command
    (torchrun) a fresh process, and so is every job once the server failed to start one (one
    line on stderr says why)."""
    job = module_command(command)
    if usable() and job is not None and job[0] not in FRESH:
        try:
            return spawn(job[0], job[1], env=env, stdout=log, unbuffered=job[2])
        except (OSError, EOFError) as e:  # no room for its socket, a process limit ...
            failed(e)
    return subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
