"""One attempt of a program as an operating-system process: started in a session (and so a
process group) of its own, its output in files, watched until it ends.

What this process receives is passed on, never lost: a stop (SIGINT, SIGTERM, SIGUSR1 or
SIGUSR2 raised the :class:`~plugdrop.ablate.train.StopFlag`) is passed to the program's process
group, which gets :data:`GRACE_S` seconds to checkpoint and exit before SIGKILL; ``run_timeout``
ends a hung program the same way; a second Ctrl-C (or any error here) kills the group at once.
On Linux the program is also killed when the process that started it dies (a SIGKILLed driver
leaves no program behind), and it holds the run's lock as long as it lives (where it could
outlive its driver, the run stays busy instead of being trained twice at once). When the
program ends, what is left of its group is killed.

Starting costs the driver little whatever its size: where util-linux's ``setpriv`` is found,
the program is started through it (``setpriv --pdeathsig KILL -- PROGRAM``: it sets the death
signal and replaces itself by the program), so Python can start it with ``vfork`` (about 0.1 ms
of the driver's CPU) instead of copying the page tables of a driver that imported torch
(about 7 ms); the program's path is checked first, so a program that is missing, not
executable or not a program fails to start as it does without ``setpriv``. Its end is seen at
once (a pidfd, on Linux), not at the next look.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..train import StopFlag

__all__ = ["GRACE_S", "Ending", "signal_name", "start", "tail", "watch"]

#: seconds a program has to exit after the signal it was passed (a stop, its timeout)
GRACE_S = 20.0
#: how often the program is looked at, in seconds
POLL_S = 0.05
#: how often ``tick`` is called while it runs, in seconds
TICK_S = 0.5
_PR_SET_PDEATHSIG = 1
#: whether a child's exit can be seen without reaping it (Linux; not macOS)
_PEEK = hasattr(os, "waitid") and hasattr(os, "WNOWAIT")


@dataclass(frozen=True)
class Ending:
    """How a program's process ended.

    Attributes:
        code: its exit status when it exited (``None`` when a signal killed it).
        killed_by: the signal that killed it, else ``None``.
        passed: the signal this process passed it (a stop), else ``None``.
        timed_out: ``run_timeout`` ended it.
        seconds: how long it ran.
    """

    code: int | None
    killed_by: int | None
    passed: int | None
    timed_out: bool
    seconds: float


def signal_name(signum: int) -> str:
    """``SIGKILL (signal 9)``."""
    try:
        return f"{signal.Signals(signum).name} (signal {signum})"
    except ValueError:
        return f"signal {signum}"


def _die_with_parent() -> Callable[[], None] | None:
    """What the child runs before ``exec`` on Linux: be killed when the thread that started it
    dies (``prctl(PR_SET_PDEATHSIG)``), and exit at once if it died already."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - no libc to ask
        return None
    parent = os.getpid()

    def child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl
            os._exit(137)

    return child


@functools.lru_cache(maxsize=1)
def _setpriv() -> str | None:
    """util-linux's ``setpriv`` when it takes ``--pdeathsig`` (Linux), else ``None``;
    ``PLUGDROP_SETPRIV=0`` does without it."""
    if not sys.platform.startswith("linux") or os.environ.get("PLUGDROP_SETPRIV") == "0":
        return None
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        done = subprocess.run([path, "--pdeathsig", "KILL", "--", "true"], timeout=10,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if done.returncode == 0 else None


def _executable(name: str, cwd: str, env: Mapping[str, str]) -> str:
    """The file ``exec`` would run for ``name`` (a path, relative to ``cwd``, or a command on
    ``env``'s ``PATH``), checked as ``exec`` checks it.

    Raises:
        FileNotFoundError, PermissionError, NotADirectoryError: as starting it would.
        OSError: ``ENOEXEC``, a file that is neither a program nor a script with ``#!``.
    """
    if os.sep in name:
        candidates = [os.path.join(cwd, name)]
    else:
        candidates = [os.path.join(d or ".", name) for d in os.get_exec_path(dict(env))]
        candidates = [c if os.path.isabs(c) else os.path.join(cwd, c) for c in candidates]
    denied: OSError | None = None
    for path in candidates:
        if not os.path.exists(path):
            if os.sep in name:
                os.stat(path)  # FileNotFoundError or NotADirectoryError, as exec says
            continue
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
            if os.sep in name:
                raise denied
            continue
        with open(path, "rb") as f:
            head = f.read(4)
        if head[:2] != b"#!" and head != b"\x7fELF":
            raise OSError(errno.ENOEXEC, os.strerror(errno.ENOEXEC), path)
        return os.path.abspath(path)
    if denied is not None:
        raise denied
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)


def start(argv: Sequence[str], cwd: str, env: Mapping[str, str], stdout: int, stderr: int,
          keep: Sequence[int] = ()) -> subprocess.Popen:
    """Start ``argv`` in ``cwd`` with ``env``, its output to the file descriptors ``stdout``
    and ``stderr``, no input, in a new session; ``keep``: descriptors it inherits (the run's
    lock).

    Raises:
        OSError: it could not be started (not found, not executable, no such folder).
    """
    setpriv = _setpriv()
    if setpriv is not None and os.path.isdir(cwd):
        _executable(argv[0], cwd, env)  # fails as starting it would
        return subprocess.Popen([setpriv, "--pdeathsig", "KILL", "--", *argv],
                                cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                                stdout=stdout, stderr=stderr, start_new_session=True,
                                pass_fds=tuple(keep))
    return subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=stdout, stderr=stderr, start_new_session=True,
                            pass_fds=tuple(keep), preexec_fn=_die_with_parent())


def _signal(proc: subprocess.Popen, signum: int) -> None:
    """Send ``signum`` to the program's process group (its session)."""
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the program exited, without reaping it (its process group id stays its own
    until :meth:`~subprocess.Popen.wait`, so the group can still be signalled safely); where
    that cannot be seen, reaping it."""
    if not _PEEK:
        return proc.poll() is not None
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already
        return True


class _Exit:
    """Waits up to a time for the program's exit without reaping it: on a pidfd (Linux), woken
    at once when it exits; else by sleeping."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.poller: select.poll | None = None
        self.fd: int | None = None
        try:
            self.fd = os.pidfd_open(proc.pid)
            self.poller = select.poll()
            self.poller.register(self.fd, select.POLLIN)
        except (AttributeError, OSError):  # not Linux >= 5.3: look again after a while
            self.close()

    def wait(self, seconds: float) -> None:
        if self.poller is None:
            time.sleep(seconds)
        else:
            self.poller.poll(max(0, int(seconds * 1000)))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.fd, self.poller = None, None


def watch(proc: subprocess.Popen, stop: StopFlag, timeout: float | None,
          tick: Callable[[], None] = lambda: None, grace: float | None = None) -> Ending:
    """Wait for the program to end, passing on a stop and enforcing ``timeout`` (seconds);
    ``tick`` is called every :data:`TICK_S` seconds and at the end (to show what it logged).
    What is left of its process group is killed once it ended.

    Args:
        proc: the program's process (:func:`start`).
        stop: the flag this process's signals raise; its signal is passed on.
        timeout: ``run_timeout`` in seconds, or ``None``.
        tick: called while it runs.
        grace: seconds between the signal passed on and SIGKILL (default :data:`GRACE_S`).

    Returns:
        How it ended.

    Raises:
        KeyboardInterrupt: a second Ctrl-C (the program is killed at once), as any error here.
    """
    grace = GRACE_S if grace is None else grace
    t0 = time.monotonic()
    passed: int | None = None
    timed_out = False
    kill_at: float | None = None
    next_tick = t0
    exit_ = _Exit(proc)
    try:
        while not _exited(proc):
            now = time.monotonic()
            if stop.signum and passed is None and not timed_out:
                passed = stop.signum
                _signal(proc, passed)
                kill_at = now + grace
            elif timeout is not None and not timed_out and passed is None \
                    and now - t0 > timeout:
                timed_out = True
                _signal(proc, signal.SIGTERM)
                kill_at = now + grace
            if kill_at is not None and now > kill_at:
                _signal(proc, signal.SIGKILL)
                kill_at = None
            if now >= next_tick:
                tick()
                next_tick = now + TICK_S
            exit_.wait(POLL_S)
        if _PEEK:  # its group's id is still its own: what it left running there goes too
            _signal(proc, signal.SIGKILL)
        code = proc.wait()
    except BaseException:
        _signal(proc, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        exit_.close()
    tick()
    if passed is None and stop.signum and not timed_out:
        passed = stop.signum  # it got the signal this process got (a scheduler signals both)
    return Ending(code if code >= 0 else None, -code if code < 0 else None, passed, timed_out,
                  time.monotonic() - t0)


def tail(path: Path, lines: int = 20, limit: int = 64 * 1024) -> list[str]:
    """The last ``lines`` lines of the text file ``path`` that are not blank (at most its last
    ``limit`` bytes read), without the ends of lines; none when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace").replace("\r", "\n")
    return [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
