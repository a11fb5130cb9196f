"""A real single-node Slurm cluster on this machine, from Debian's packages (``slurmctld``,
``slurmd``, ``slurm-client``, ``munge``), for end-to-end tests against a real scheduler.

Everything lives in a temporary folder: a munge key and a ``munged`` on its own socket, a
``slurm.conf`` (one node: this host, its CPUs and most of its memory; two partitions: ``main``,
the default, and ``urgent``, whose jobs preempt ``main``'s: Slurm requeues them, sending the
job's ``--signal`` first) on free ports, the daemons' state, spool, pid and log files. A
requeued job may start again after ``CRED_EXPIRE`` seconds (Slurm's default: 120). Nothing
under ``/etc`` is read or changed: the daemons get ``-f CONF``, the clients ``SLURM_CONF``
(in :attr:`SlurmCluster.env`).

There is no ``slurmdbd``, so the real ``sacct`` only says accounting is disabled; submitit
polls ``sacct`` for the state of a job that ended without a result (killed, cancelled), so
:attr:`SlurmCluster.env` puts a small ``sacct`` first on ``PATH`` that answers from
``scontrol show job`` (finished jobs stay there ``MinJobAge`` seconds).

Skips (one line) when not root, when the programs are missing, or when the daemons do not
come up within ``START_TIMEOUT`` seconds. (A module imports the fixture to use it: a second
``conftest.py`` would shadow the suite's, which tests import by name.)"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

START_TIMEOUT = 30.0
KILL_WAIT = 5  # seconds between SIGTERM and SIGKILL when Slurm ends a job
CRED_EXPIRE = 5  # seconds a requeued job waits before it may start again (default 120; Slurm
#                  refuses less than 5)
MIN_JOB_AGE = 300  # seconds a finished job stays in slurmctld's memory (scontrol, our sacct)
PROGRAMS = ("munged", "slurmctld", "slurmd", "slurmstepd", "sbatch", "srun", "squeue",
            "scontrol", "scancel", "sinfo")
NOISE = ("pmix", "MPI:", "state file", "state save file", "MailProg")  # errors of every start
SEARCH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])

SACCT = '''\
#!{python}
"""sacct without slurmdbd, for submitit: the jobs -j still in slurmctld (scontrol show job)
as 'sacct -o FIELDS --parsable2 -j ID ...' prints them."""
import re, subprocess, sys

args, fields, ids = sys.argv[1:], ["JobID", "State", "NodeList"], []
while args:
    a = args.pop(0)
    if a in ("-o", "--format"):
        fields = args.pop(0).split(",")
    elif a.startswith("--format="):
        fields = a.split("=", 1)[1].split(",")
    elif a in ("-j", "--jobs"):
        ids += args.pop(0).split(",")
    elif a.startswith("--jobs="):
        ids += a.split("=", 1)[1].split(",")
print("|".join(fields))
for jid in ids:
    p = subprocess.run(["scontrol", "-o", "show", "job", jid], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        kv = dict(re.findall(r"(\\w+)=(\\S*)", line))
        job = kv.get("JobId", "")
        if kv.get("ArrayJobId") and kv.get("ArrayTaskId"):
            task = kv["ArrayTaskId"]
            job = kv["ArrayJobId"] + "_" + (task if task.isdigit() else "[" + task + "]")
        values = {{"JobID": job, "JobIDRaw": kv.get("JobId", ""),
                  "State": kv.get("JobState", ""), "NodeList": kv.get("NodeList", ""),
                  "JobName": kv.get("JobName", ""), "ExitCode": kv.get("ExitCode", ""),
                  "Partition": kv.get("Partition", ""), "Elapsed": kv.get("RunTime", "")}}
        print("|".join(values.get(f.split("%")[0], "") for f in fields))
'''


@dataclass
class SlurmCluster:
    """A running cluster: ``env`` for client commands and jobs, ``conf``, the log files."""

    root: Path
    conf: Path
    env: dict[str, str]
    node: str
    cpus: int
    partition: str = "main"
    urgent: str = "urgent"
    logs: dict[str, Path] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)  # munged, slurmctld, slurmd
    started_in: float = 0.0  # seconds until the node was idle

    def run(self, *args: str, check: bool = False, timeout: float = 60
            ) -> subprocess.CompletedProcess:
        """A Slurm client command (``sbatch``, ``squeue`` ...) with :attr:`env`."""
        return subprocess.run(list(args), capture_output=True, text=True, env=self.env,
                              timeout=timeout, check=check)

    def sbatch(self, *args: str) -> str:
        """``sbatch --parsable ARGS``; returns the job id."""
        p = self.run("sbatch", "--parsable", *args)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip().split(";")[0]

    def queue(self) -> list[str]:
        """The ids of the jobs in ``squeue`` (pending, running, completing ...)."""
        p = self.run("squeue", "-h", "-o", "%i")
        assert p.returncode == 0, p.stderr
        return p.stdout.split()

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job JOB_ID`` as a dict (empty once slurmctld forgot the job)."""
        p = self.run("scontrol", "-o", "show", "job", job_id)
        line = p.stdout.splitlines()[0] if p.returncode == 0 and p.stdout.strip() else ""
        return dict(re.findall(r"(\w+)=(\S*)", line))

    def state(self, job_id: str) -> str:
        return self.job(job_id).get("JobState", "")

    def wait_state(self, job_id: str, *states: str, timeout: float = 60) -> str:
        """Waits until the job is in one of ``states``; returns it."""
        t0 = time.monotonic()
        while (s := self.state(job_id)) not in states:
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"job {job_id} is {s!r}, not {states} after {timeout} s\n"
                                   + self.tail())
            time.sleep(0.1)
        return s

    def wait_empty(self, timeout: float = 60) -> None:
        """Waits until ``squeue`` shows no job (completing ones included)."""
        t0 = time.monotonic()
        while q := self.queue():
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"jobs {q} still queued after {timeout} s\n" + self.tail())
            time.sleep(0.1)

    def cancel_all(self, timeout: float = 30) -> None:
        if q := self.queue():
            self.run("scancel", *q)
            self.wait_empty(timeout)

    def tail(self, lines: int = 15) -> str:
        """The last lines of each daemon's log (for failure messages)."""
        out = []
        for name, path in self.logs.items():
            text = path.read_text(errors="replace").splitlines() if path.exists() else []
            out.append(f"--- {name} ({path})\n" + "\n".join(text[-lines:]))
        return "\n".join(out)


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 1024


def _missing() -> list[str]:
    return [p for p in PROGRAMS if shutil.which(p, path=SEARCH) is None]


def _conf(root: Path, node: str, cpus: int, mem: int, ports: list[int], sock: Path) -> str:
    return f"""\
ClusterName=plugdrop-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock},cred_expire={CRED_EXPIRE}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={root}/plugstack.conf
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1,sched_min_interval=100000
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
JobRequeue=1
ReturnToService=2
SlurmdParameters=config_overrides
KillWait={KILL_WAIT}
MinJobAge={MIN_JOB_AGE}
MessageTimeout=10
SlurmdTimeout=300
InactiveLimit=0
Waittime=0
NodeName={node} NodeAddr=127.0.0.1 NodeHostname={node} CPUs={cpus} RealMemory={mem} State=UNKNOWN
PartitionName=main Nodes={node} Default=YES MaxTime=UNLIMITED State=UP PriorityTier=1
PartitionName=urgent Nodes={node} MaxTime=UNLIMITED State=UP PriorityTier=2 PreemptMode=OFF
"""


def _stop(proc: subprocess.Popen, timeout: float = 5) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


def _ours(conf: Path) -> list[int]:
    """The processes carrying ``SLURM_CONF=conf`` in their environment: the jobs and their
    slurmstepd (the daemons are stopped by their own ids)."""
    mark = f"SLURM_CONF={conf}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if mark in (d / "environ").read_bytes().split(b"\0"):
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


@contextlib.contextmanager
def start_cluster(root: Path | None = None, timeout: float = START_TIMEOUT
                  ) -> Iterator[SlurmCluster]:
    """Starts munged, slurmctld and slurmd in ``root`` (a new temporary folder by default);
    stops them on exit. Raises ``pytest.skip.Exception`` where that cannot be done here."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("a real Slurm cluster needs root (its daemons run as root here)")
    if missing := _missing():
        pytest.skip(f"Slurm is not installed (no {', '.join(missing)}): "
                    "apt-get install slurmctld slurmd slurm-client munge")
    t0 = time.monotonic()
    own = root is None
    root = Path(tempfile.mkdtemp(prefix="plugdrop-slurm-")) if root is None else root
    os.chmod(root, 0o700)  # the munge key and socket: root's only
    for d in ("state", "spool", "munge", "bin"):
        (root / d).mkdir(exist_ok=True)
    node = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    mem = max(256, int(_memory_mb() * 0.9))
    sock = root / "munge" / "munge.socket"
    conf = root / "slurm.conf"
    (root / "plugstack.conf").write_text("")
    sacct = root / "bin" / "sacct"
    sacct.write_text(SACCT.format(python=sys.executable))
    sacct.chmod(0o755)
    which = {p: shutil.which(p, path=SEARCH) or p for p in PROGRAMS}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_",
                                "SCONTROL_", "SUBMITIT_"))}
    env["SLURM_CONF"] = str(conf)
    env["PATH"] = os.pathsep.join([str(root / "bin"), os.path.dirname(which["sbatch"]),
                                   env.get("PATH", "")])
    logs = {"munged": root / "munged.out", "slurmctld": root / "slurmctld.log",
            "slurmd": root / "slurmd.log", "slurmctld (stdout)": root / "slurmctld.out",
            "slurmd (stdout)": root / "slurmd.out"}
    cluster = SlurmCluster(root, conf, env, node, cpus, logs=logs)
    procs: dict[str, subprocess.Popen] = {}
    files: list = []

    def daemon(name: str, *args: str) -> None:
        """Starts a daemon in the foreground (it is ended by its id), its stdout and stderr
        (early errors, such as a bad slurm.conf) in NAME.out."""
        files.append(open(root / f"{name}.out", "ab"))
        procs[name] = subprocess.Popen([which[name], *args], stdout=files[-1],
                                       stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True)
        cluster.pids[name] = procs[name].pid

    def fail(why: str) -> None:
        found: dict[str, str] = {}
        for path in logs.values():
            for x in path.read_text(errors="replace").splitlines() if path.exists() else []:
                level = "fatal" if "fatal" in x else "error" if "error" in x else ""
                if level and not any(n in x for n in NOISE):
                    found[level] = x.strip()
        last = found.get("fatal") or found.get("error")
        pytest.skip(f"a Slurm cluster did not start here: {why}" + (f" ({last})" if last else ""))

    try:
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        # --force: munged runs as root, on a socket in a folder only root may enter
        daemon("munged", "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
               f"--pid-file={root}/munge/munged.pid", f"--seed-file={root}/munge/munged.seed")
        while not sock.exists():
            if procs["munged"].poll() is not None or time.monotonic() - t0 > timeout:
                fail("munged did not start")
            time.sleep(0.02)
        ports = _free_ports(2)
        conf.write_text(_conf(root, node, cpus, mem, ports, sock))
        daemon("slurmctld", "-D", "-c", "-f", str(conf))  # -c: no state to recover
        daemon("slurmd", "-D", "-f", str(conf), "-N", node)
        while True:
            if ended := [n for n, p in procs.items() if p.poll() is not None]:
                fail(f"{ended[0]} exited")
            try:
                left = max(1.0, timeout - (time.monotonic() - t0))
                p = cluster.run("sinfo", "-h", "-p", "main", "-o", "%t", timeout=left)
                if p.returncode == 0 and p.stdout.split() == ["idle"]:
                    break
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() - t0 > timeout:
                fail(f"the node is not idle after {timeout:.0f} s")
            time.sleep(0.1)
        cluster.started_in = time.monotonic() - t0
        yield cluster
    finally:
        if cluster.started_in and all(p.poll() is None for p in procs.values()):
            with contextlib.suppress(Exception):
                cluster.cancel_all()
        for name in ("slurmd", "slurmctld", "munged"):
            if name in procs:
                _stop(procs[name])
        for pid in _ours(conf):  # a job step that outlived slurmd (cancel_all failed)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for f in files:
            f.close()
        if own:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A single-node Slurm cluster on this machine for the module's tests (see
    :func:`start_cluster`); skips where one cannot start."""
    with start_cluster() as cluster:
        yield cluster
