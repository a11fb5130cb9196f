"""What a job started by :mod:`plugdrop.ablate.launch.warm` sees: printed as one JSON line.

``python -m _warm_probe CODE [sleep]``: exits with CODE, after sleeping when asked;
``python -m _warm_probe nest LOG``: starts ``_warm_probe 5`` as a warm job of its own (its line
in LOG) and exits with that job's status + 1. The functions are submitit jobs
(:mod:`plugdrop.ablate.launch.submitit_local`)."""

import json
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path


def seen(marker: str = "") -> dict:
    """What a submitit job sees; it writes its pid to ``marker`` and sleeps when given one."""
    print("a line of the job", flush=False)  # unbuffered (python -u): in the log at once
    if marker:
        Path(marker).write_text(str(os.getpid()))
        time.sleep(60)
    return {"cmdline": Path("/proc/self/cmdline").read_bytes().decode().split("\0"),
            "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0),
            "job_id": os.environ.get("SUBMITIT_LOCAL_JOB_ID"),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "warm": "timm" in sys.modules,
            "sigterm": str(signal.getsignal(signal.SIGTERM)), "cwd": os.getcwd(),
            "log": Path(os.environ["SUBMITIT_FOLDER"]).exists()}


def preempted_once(marker: str) -> str:
    """A job that preempts itself (SIGUSR2, as submitit's local controller sends at the time
    limit) on its first start; submitit checkpoints and requeues it."""
    if not os.path.exists(marker):
        Path(marker).write_text("1")
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(60)
    return "second start"

if __name__ == "__main__":
    print(json.dumps({
        "name": __name__, "argv": sys.argv, "cwd": os.getcwd(), "path": sys.path[:3],
        "probe": os.environ.get("PROBE"), "home": os.environ.get("HOME"), "ppid": os.getppid(),
        "session": os.getsid(0) == os.getpid(), "warm": "timm" in sys.modules,
        "start_method": multiprocessing.get_start_method(allow_none=True),
        "threads": sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None,
    }), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    if sys.argv[1] == "nest":
        from plugdrop.ablate.launch import warm

        with open(sys.argv[2], "ab") as f:
            job = warm.start([sys.executable, "-m", "_warm_probe", "5"], env=dict(os.environ),
                             log=Path(sys.argv[2]), log_file=f)
        sys.exit(job.wait(120) + 1)
    if sys.argv[2:] == ["sleep"]:
        time.sleep(60)
    sys.exit(int(sys.argv[1]))
