"""Configuration of an ablation: the settings table (:mod:`.schema`), YAML read with the place
of every value (:mod:`.locations`), attachments and their values (:mod:`.attachments`,
:mod:`.values`), variants and grids (:mod:`.variants`), command-line overrides
(:mod:`.overrides`), the loader (:mod:`.loader`), the config as plain data for the jobs
(:mod:`.stored`) and the generated settings reference (:mod:`.reference`).

    >>> cfg = load("examples/digits.yaml", parse_overrides(["epochs=2"]))
    >>> cfg.runs()[:2]
    [('baseline', 0), ('baseline', 1)]
"""

from .attachments import Attachment
from .loader import load, loads, parse
from .overrides import Override, flag, parse_overrides
from .reference import BEGIN_MARK, END_MARK, flag_name, reference
from .schema import AblationConfig, Setting, settings, unhashed
from .stored import restore, stored
from .values import build_value, schedule_names, transform_names
from .variants import VARIANT_NAME, Variant

__all__ = ["AblationConfig", "Attachment", "BEGIN_MARK", "END_MARK", "Override", "Setting", "VARIANT_NAME", "Variant",
           "build_value", "flag", "flag_name", "load", "loads", "parse", "parse_overrides",
           "reference", "restore", "schedule_names", "settings", "stored", "transform_names",
           "unhashed"]
