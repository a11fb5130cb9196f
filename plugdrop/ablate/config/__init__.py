"""Configuration of an ablation: the settings table (:mod:`.schema`), YAML read with the place
of every value (:mod:`.locations`), attachments and their values (:mod:`.attachments`,
:mod:`.values`), variants and grids (:mod:`.variants`), command-line overrides
(:mod:`.overrides`), the loader (:mod:`.loader`), the typed values a check returns
(:mod:`.types`, :mod:`.metrics`, :mod:`.spending`), the checks that need several settings (:mod:`.together`),
the config as plain data for the jobs and the report (:mod:`.stored`) and the generated
settings reference (:mod:`.reference`).

    >>> cfg = load("examples/digits.yaml", parse_overrides(["epochs=2"]))
    >>> cfg.runs()[:2]
    [('baseline', 0), ('baseline', 1)]
"""

from .attachments import Attachment
from .metrics import AUTO, METRICS, PASSING, DecisionRule, Metric
from .loader import load, loads, parse, read_config
from .overrides import Override, flag, parse_overrides
from .program import PLACEHOLDERS, AttachTo, MetricsFrom, ProgramSpec, ResumeArgs
from .reference import BEGIN_MARK, END_MARK, flag_name, reference
from .schema import AblationConfig, Setting, judging, settings, unhashed
from .spending import DEFAULT_SPENDING, Spending
from .stored import (CONFIG_FILE, DESIGN_SETTINGS, as_recorded, legacy_design, load_settings,
                     load_stored, rejudged, restore, save_config, stored)
from .together import batch_per_process, check_classes, check_gpus, check_shard, gpus_left_idle
from .types import CompileSpec, GradCamSpec, Interval, SeedPlan
from .values import build_value, schedule_names, transform_names
from .variants import VARIANT_NAME, Variant

__all__ = ["AUTO", "AblationConfig", "AttachTo", "Attachment", "MetricsFrom", "ResumeArgs",
           "judging", "BEGIN_MARK", "CONFIG_FILE", "CompileSpec",
           "DEFAULT_SPENDING", "DESIGN_SETTINGS", "DecisionRule", "END_MARK", "GradCamSpec",
           "Interval", "METRICS", "Metric", "Override", "PASSING", "PLACEHOLDERS", "ProgramSpec", "SeedPlan", "Setting",
           "Spending", "VARIANT_NAME", "Variant", "as_recorded", "batch_per_process",
           "build_value", "check_classes", "check_gpus", "check_shard", "flag",
           "flag_name", "gpus_left_idle", "legacy_design", "load", "load_settings", "load_stored",
           "loads", "parse", "parse_overrides", "read_config", "reference", "rejudged",
           "restore", "save_config", "schedule_names", "settings", "stored", "transform_names",
           "unhashed"]
