"""What a study's run folders hold, read back as data: every run of a folder
(:func:`load_ablation`: its status, records, markers, and the lines about damaged files), one
run (:func:`load_run`), and the values a design decides on (:mod:`.values`). The driver reads a
run here when it ends, the report reads the whole folder: both see a run the same way."""

from .manifest import accepted_hashes
from .read import (FAILED, FINISHED, FORMAT, INCOMPLETE, Ablation, Run,
                   as_dict, as_list, load_ablation, load_run, number)
from .placed import not_regular
from .values import Values, decision_values, run_value

__all__ = ["FAILED", "FINISHED", "FORMAT", "INCOMPLETE", "Ablation", "Run", "Values",
           "accepted_hashes", "as_dict",
           "as_list", "decision_values", "load_ablation", "load_run", "not_regular", "number",
           "run_value"]
