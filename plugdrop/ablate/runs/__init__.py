"""Run folders on disk: the layout, the locks, the markers, and the one writer.

::

    OUT/ablation.json             the resolved config, its hash, the runs  (ablation.py)
    OUT/.lock                     held by the running ``plugdrop ablate``  (locks.py)
    OUT/runs/<variant>__s<seed>/  run.json, metrics.jsonl, checkpoint.pt, attempts.jsonl,
                                  done.json | failed.json                  (folder.py)

Every file is written through :mod:`.files` (a temporary file, fsync, rename).
"""

from .ablation import FORMAT, check_out, prepare
from .files import append_line, atomic_torch_save, atomic_write_bytes, atomic_write_json, now
from .folder import FAILED, FINISHED, INCOMPLETE, RunDir, run_id
from .locks import Lock, RunLock, claiming, serialized

__all__ = ["FAILED", "FINISHED", "FORMAT", "INCOMPLETE", "Lock", "RunDir", "RunLock",
           "append_line", "atomic_torch_save", "atomic_write_bytes", "atomic_write_json",
           "check_out", "claiming", "now", "prepare", "run_id", "serialized"]
