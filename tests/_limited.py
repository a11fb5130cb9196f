"""``python -m _limited BYTES ARGS...``: ``python -m plugdrop ARGS`` under a file-size limit of
BYTES (``ulimit -f``), set before plugdrop runs, for a test's process forked warm (where the
limit cannot be set before an ``exec``). Python ignores SIGXFSZ, so a write past the limit
fails with EFBIG, as in a fresh interpreter."""

import resource
import runpy
import sys

limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
sys.argv = ["plugdrop", *sys.argv[2:]]
runpy.run_module("plugdrop", run_name="__main__", alter_sys=True)
