"""Run folders on disk: the layout, the locks, the markers, and the one writer.

::

    OUT/ablation.json             the resolved config, its hash, the runs  (ablation.py)
    OUT/.lock                     held by the running ``plugdrop ablate``  (locks.py)
    OUT/.data-files.gz            the data's image files, compared on resume  (datafiles.py)
    OUT/runs/<variant>__s<seed>/  run.json, metrics.jsonl, checkpoint.pt, checkpoint.prev.pt,
                                  attempts.jsonl, done.json | failed.json  (folder.py;
                                  how the run stands: state.py);
                                  a program's run: metrics.jsonl as it logs it (records.py),
                                  spec.yaml, logs/, work/ (its own folder)

Every file is written through :mod:`.files` (a temporary file, fsync, rename; a failed write is
a :class:`~plugdrop.ablate.errors.StorageError`; never through a symbolic link) and read back
as data: JSON, and checkpoints through :mod:`.checkpoints` (``weights_only``; nothing in the
folder is unpickled, see ``SECURITY.md``).
"""

from .ablation import FORMAT, check_out, prepare
from .checkpoints import CheckpointRefused, load_checkpoint
from .datafiles import fingerprint
from .files import (append_line, atomic_write_bytes, atomic_write_json, check_room, ensure_dir,
                    no_link, now, open_no_follow, storage_error)
from .folder import Recovery, RunDir, run_id
from .locks import Lock, RunLock, claiming, serialized
from .records import (MOST_KEPT, POSITION, finite, last_value, logged_names, number,
                      read_records, thinned)
from .state import FAILED, FINISHED, INCOMPLETE, RunState

__all__ = ["CheckpointRefused", "FAILED", "FINISHED", "FORMAT", "INCOMPLETE", "Lock", "POSITION",
           "Recovery", "RunDir", "RunLock", "RunState", "append_line", "atomic_write_bytes",
           "atomic_write_json", "check_out", "check_room", "claiming", "ensure_dir",
           "fingerprint", "finite", "last_value", "load_checkpoint", "logged_names", "MOST_KEPT",
           "no_link", "now", "number", "open_no_follow", "prepare", "read_records", "run_id",
           "serialized", "storage_error", "thinned"]
