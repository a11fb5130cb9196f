"""What a job started by :mod:`plugdrop.ablate.launch.warm` sees: printed as one JSON line.

``python -m _warm_probe CODE [sleep]``: exits with CODE, after sleeping when asked."""

import json
import multiprocessing
import os
import sys
import time

if __name__ == "__main__":
    print(json.dumps({
        "name": __name__, "argv": sys.argv, "cwd": os.getcwd(), "path": sys.path[:3],
        "probe": os.environ.get("PROBE"), "home": os.environ.get("HOME"),
        "session": os.getsid(0) == os.getpid(), "warm": "timm" in sys.modules,
        "start_method": multiprocessing.get_start_method(allow_none=True),
        "threads": sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None,
    }), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    if sys.argv[2:] == ["sleep"]:
        time.sleep(60)
    sys.exit(int(sys.argv[1]))
