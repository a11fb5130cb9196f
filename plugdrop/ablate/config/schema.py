"""The runner's settings, declared once: each field of :class:`AblationConfig` is a row of the
table (name, type, default, check, help, command-line flag, whether it enters the config hash).
The loader (:mod:`.loader`), the checks, ``--set``, the ``plugdrop ablate`` flags, the config
hash, the folder-compatibility check and the settings reference (:mod:`.reference`) are all
derived from it: a setting is one :func:`setting` line here plus the code that uses it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from ..data import AUGMENT_KEYS, DataSpec
from . import checks as C
from . import program as P
from .seeds import seeds as seeds_check
from .metrics import AUTO, METRICS, PASSING, DecisionRule, Metric
from .setting import AWAY_FROM_DEFAULT, GROUPS, JUDGES, LOOP_GROUPS, Setting, setting
from .spending import DEFAULT_SPENDING, Spending
from .types import CompileSpec, GradCamSpec, Interval, SeedPlan, to_plain
from .variants import Variant, attached_layers

__all__ = ["AWAY_FROM_DEFAULT", "AblationConfig", "GROUPS", "LOOP_GROUPS", "Setting", "default",
           "fingerprint", "judging", "loop_settings", "resolved_default", "setting", "settings",
           "unhashed"]

@dataclass(frozen=True)
class AblationConfig:
    """A validated ablation config: every field but ``source``, ``locs`` and ``origin`` is a
    setting (see :func:`settings`, and the docs' settings reference generated from them)."""

    # -- required ---------------------------------------------------------------------------
    variants: tuple[Variant, ...] = setting(
        group="Runs", check=None,
        help="name -> list of attachments (`[]`: the baseline); see the ablations guide "
             "(docs/guide/ablations.md)")
    # -- program ----------------------------------------------------------------------------
    program: P.ProgramSpec | None = setting(
        None, group="Program", check=P.program, hashed=AWAY_FROM_DEFAULT,
        help="a training program of your own, run once per variant x seed: a list of arguments, "
             "or a string split as a shell would (no shell runs it), `{seed}`, `{variant}`, "
             "`{spec}`, `{run_dir}`, `{metrics}` replaced, the run contract's `PLUGDROP_*` "
             "variables set (docs/guide/programs.md); none: plugdrop's own loop")
    run_timeout: Interval | None = setting(
        None, group="Program", check=P.run_timeout, hashed=False,
        help="end a program that runs longer than this (`2h`, `30min`, `90s`): SIGTERM, then "
             "SIGKILL; the run fails saying so; none: no limit")
    attach_to: P.AttachTo | None = setting(
        None, group="Program", check=P.attach_to, hashed=AWAY_FROM_DEFAULT,
        help="run a Python program (`[python, train.py, ...]`, `-m module`) unedited under "
             "plugdrop's bootstrap, which attaches the variant to the first instance of this "
             "class (`Net`, `__main__.Net`, `mypkg.models.Net`) or the model this factory "
             "returns (`timm.create_model`, `timm`, `torchvision`, `transformers`), each variant "
             "dry-started first; a list, or `{factory: NAME, steps: N}` (what schedules without "
             "`steps:` span); none: the program attaches itself")
    metrics_from: P.MetricsFrom | None = setting(
        None, group="Program", check=P.metrics_from, hashed=JUDGES,
        help="where the program already writes its metrics, read while it runs and when it "
             "ends: `{csv: PATH}` (timm's summary.csv, Lightning's CSVLogger), `{json: PATH}` "
             "(a list of records, JSON lines, the Hugging Face Trainer's trainer_state.json), "
             "`{tensorboard: DIR}` or `{stdout: REGEX}` (named groups; `epoch`, `step` say "
             "where); paths may use `{run_dir}`; none: the run contract's metrics file")
    resume_args: P.ResumeArgs | None = setting(
        None, group="Program", check=P.resume_args, hashed=False,
        help="arguments added to `program:` when a run resumes, e.g. `[--resume, "
             "'{run_dir}/train/last.pth.tar']`, or `{args: [...], if_exists: PATH}` (only "
             "when that file exists)")
    workdir: str = setting(
        "start", group="Program", check=C.choice("start", "run", "shared", close=True),
        hashed=False, help="where each run's program runs: `start`, the folder plugdrop ablate "
        "started in, one run at a time; `shared`: there, several at once; `run`: its own folder, "
        "`{run_dir}` (docs/guide/programs.md)")
    receipt: bool = setting(
        True, group="Program", check=C.boolean, hashed=False,
        help="a run of a variant with attachments must leave its receipt (`attached.json`: "
             "the layers matched, how often the hooks ran, the model's class), else it fails; "
             "false for a program that applies the spec by other means")
    # -- model ------------------------------------------------------------------------------
    model: str = setting(
        "", group="Model", check=C.text("a timm model name (resnet18) or package.module:factory"),
        shown="required",
        help="a timm model name such as `resnet18`, or `package.module:factory` (required "
             "without `program:`)")
    model_kwargs: Mapping[str, Any] = setting(
        factory=dict, group="Model", check=C.model_kwargs,
        help="keyword arguments of the model factory, e.g. `{img_size: 64}` for a ViT, "
             "`{drop_path_rate: 0.1}`")
    pretrained: bool | str | None = setting(
        None, group="Model", check=C.pretrained,
        help="a checkpoint path to fine-tune from, or `true` for timm's cached weights")
    # -- data -------------------------------------------------------------------------------
    data: DataSpec = setting(
        DataSpec("digits", "digits", written="digits"), group="Data", check=C.data,
        shown="digits",
        help="`digits` (embedded), an ImageFolder path, or `{name: CIFAR10, root: PATH}`")
    image_size: int = setting(32, group="Data", check=C.integer(1),
                              help="side of the square images the model sees, in pixels")
    val_fraction: float = setting(
        0.2, group="Data", check=C.number("in (0, 1)", lambda v: 0 < v < 1),
        help="share held out for validation, for data without a validation split")
    train_size: int | float | None = setting(
        None, group="Data", check=C.train_size, hashed=AWAY_FROM_DEFAULT,
        help="train on this many images of the training split (`300`) or this share (`0.25`), "
             "drawn once: the same images for every variant, seed and process, each class "
             "keeping its share; the validation split stays whole; none: all of it")
    workers: int | str = setting(
        "auto", group="Data", check=C.workers, hashed=False,
        help="DataLoader worker processes: `auto` = CPUs - 1, at most 8 (in-memory digits "
             "use none)")
    augment: Mapping[str, Any] | None = setting(
        None, group="Data", check=C.augment,
        help="settings of `timm.data.create_transform` for the training split (" + ", ".join(
            f"`{k}`" for k in sorted(AUGMENT_KEYS)) + "); none: both splits get the evaluation "
             "transform")
    bad_images: str = setting(
        "error", group="Data", check=C.choice("error", "skip", what="error or skip"),
        help="`error`: an unreadable image stops the ablation naming the file; `skip`: it is "
             "dropped and counted")
    # -- optimization -----------------------------------------------------------------------
    epochs: int = setting(10, group="Optimization", check=C.integer(1), flag=int,
                          help="epochs per run")
    batch_size: int = setting(64, group="Optimization", check=C.integer(1), flag=int,
                              help="the **global** batch of one optimizer step")
    eval_batch_size: int | str = setting(
        "auto", group="Optimization", check=C.eval_batch_size, hashed=False, help="images per "
        "evaluation pass, per process (`auto`: twice the training's micro-batch); larger is "
        "faster for small images on a CPU, lower if evaluating runs out of memory")
    eval_every: int = setting(
        1, group="Optimization", check=C.integer(1), hashed=AWAY_FROM_DEFAULT,
        loop=True, help="evaluate after every so many epochs and after the last; the training "
        "and the final metrics are the same, `best` and the curves see only those epochs")
    grad_accum: int = setting(
        1, group="Optimization", check=C.integer(1),
        help="micro-batches of `batch_size / grad_accum` per step (the optimization stays "
             "the same)")
    optimizer: str = setting(
        "sgd", group="Optimization", check=C.optimizer,
        help="any name of `timm.optim.create_optimizer_v2`: sgd (Nesterov), adamw, lamb, "
             "lion, ...")
    lr: float = setting(0.05, group="Optimization", check=C.number("> 0", lambda v: v > 0),
                        flag=float, help="the peak learning rate")
    momentum: float = setting(
        0.9, group="Optimization", check=C.number("in [0, 1)", lambda v: 0 <= v < 1),
        help="momentum of SGD-like optimizers")
    weight_decay: float = setting(5e-4, group="Optimization", check=C.NON_NEGATIVE,
                                  help="weight decay")
    lr_schedule: str = setting(
        "cosine", group="Optimization",
        check=C.choice("cosine", "constant", "step", "multistep", "poly", "tanh", close=True),
        help="per step, through `timm.scheduler.create_scheduler_v2`: cosine, constant, "
             "poly, tanh, step, multistep")
    warmup_epochs: int = setting(0, group="Optimization", check=C.integer(0),
                                 help="epochs of linear warm-up")
    warmup_lr: float = setting(0.0, group="Optimization", check=C.NON_NEGATIVE,
                               help="learning rate at the start of the warm-up")
    min_lr: float = setting(0.0, group="Optimization", check=C.NON_NEGATIVE,
                            help="learning rate at the end of the schedule")
    label_smoothing: float = setting(0.0, group="Optimization", check=C.number(
        "in [0, 1)", lambda v: 0 <= v < 1), help="label smoothing of the cross-entropy")
    clip_grad: float | None = setting(None, group="Optimization", check=C.clip_grad,
                                      help="a maximum global gradient norm; none: no clipping")
    amp: str = setting(
        "off", group="Optimization", check=C.amp,
        help="`off`, `bf16` or `fp16` autocast (fp16 with a GradScaler, which plugdrop's "
             "gradient transforms receive as `scaler=`)")
    channels_last: bool = setting(False, group="Optimization", check=C.boolean,
                                  help="train in the channels-last memory format")
    compile: CompileSpec | bool = setting(
        False, group="Optimization", check=C.compile_model, hashed=False,
        help="`torch.compile` the model: `true` (inductor), a backend name, or `{backend, "
             "mode}`; plugdrop's attachments are compiled with it (a schedule ramps without "
             "recompiling)")
    ema: float | None = setting(
        None, group="Optimization", check=C.ema,
        help="timm's `ModelEmaV3`: `true` (decay 0.9998) or a decay; its accuracy is "
             "reported beside the raw model's")
    # -- runs -------------------------------------------------------------------------------
    seeds: tuple[int, ...] | SeedPlan = setting(
        (0,), group="Runs", check=seeds_check, flag=int, many=True, subflags=("min", "max"),
        help="a list of distinct integers (a fixed design: each trains every variant; the same "
             "seed, the same initial weights and data order), or `{min: 3, max: 12}` (an "
             "adaptive one: seeds in rounds, `step` more per round, `first` the first seed, "
             "until each variant is decided; see docs/guide/ablations.md, Decisions)")
    device: str = setting("auto", group="Runs", check=C.device, flag=str, hashed=False,
                          loop=True, help="`auto`, `cpu`, `cuda` or `cuda:N`")
    out: str = setting("runs/ablation", group="Runs", check=C.text("a non-empty folder path"),
                       flag=str, hashed=False, help="the output folder")
    watch: Any = setting(
        "auto", group="Runs", check=C.watch, loop=True,
        help="layers whose statistics are recorded per epoch; `auto`: every layer a variant "
             "regularizes; false: none")
    gradcam: GradCamSpec | str | bool = setting(
        "auto", group="Runs", check=C.gradcam, loop=True,
        help="Grad-CAM overlays of the first seed of each variant: `auto` (the last "
             "regularized layer with a map of at least 4x4), a layer name, `{layer, images}` "
             "or false")
    plots: bool = setting(
        True, group="Runs", check=C.boolean, hashed=False,
        help="whether the report draws its PNG plots (matplotlib: about a second of CPU at the "
             "end of a small ablation, and at most once a minute while it runs); false: "
             "results.csv, results.json and report.html only (`plugdrop report DIR` draws "
             "them later)")
    log: tuple[str, ...] = setting((), group="Runs", check=C.log, hashed=False, shown="[]",
                                   loop=True, help="`[tensorboard]`: event files in each run folder")
    checkpoint_every: Interval | bool = setting(
        Interval(10, "min"), group="Runs", shown="10min", check=C.checkpoint_every, hashed=False,
        loop=True, help="a checkpoint in the middle of an epoch this often (`30min`, `90s`, `2h`) or every "
             "so many optimizer steps (`500steps`), besides every epoch end; a signal (SIGTERM, "
             "SIGUSR1/2) also checkpoints at the next step; a resumed run continues at that "
             "step. `false`: at epoch ends only")
    # -- decisions --------------------------------------------------------------------------
    decide_on: Metric = setting(
        METRICS["val_acc"], group="Decisions", check=C.decide_on, hashed=JUDGES,
        shown="val_acc",
        help="the metric of the last epoch the verdicts compare: " + "; ".join(
            f"`{m.name}`, {m.help}" for m in METRICS.values()) + "; with `program:`, also "
             "`{metric: NAME, goal: max | min, unit: ms}` for any metric the program logs "
             "(its last logged value; `unit` optional, shown in the table and on the page; "
             "required with `program:`)")
    margin: float | str = setting(
        AUTO, group="Decisions", check=C.margin, hashed=JUDGES,
        help="a difference smaller than this is no difference (equivalence), in the decision "
             "metric's units as shown: percentage points for accuracies, the calibration "
             "error and the gap, nats for losses, its own units for a metric a program logs "
             "(required for one plugdrop does not know); `auto`: " + ", or ".join(sorted(
                 {f"{m.auto_margin:g} {'pp' if m.percent else 'nats for a loss'}"
                  for m in METRICS.values()}, reverse=True)))
    alpha: float = setting(
        0.05, group="Decisions", check=C.number("in [1e-9, 0.5)", lambda v: 1e-9 <= v < 0.5),
        hashed=JUDGES,
        help="the family-wise error rate of the verdicts, over every variant and every look")
    spending: Spending = setting(
        DEFAULT_SPENDING, group="Decisions", check=C.spending, hashed=JUDGES,
        help="how an adaptive design spends each variant's alpha over the rounds: `obf`, "
             "`pocock`, `hsd(GAMMA)` or `first(SHARE)+hsd(GAMMA)` (`plugdrop plan` compares)")
    passing: str = setting(
        "holm", group="Decisions", check=C.choice(*PASSING, close=True), hashed=JUDGES,
        help="`holm`: a variant called better or worse passes its alpha on; `bonferroni`: not")
    # -- not settings: where the config came from -------------------------------------------
    source: str = "<config>"
    locs: Mapping[str, str] = field(default_factory=dict, compare=False)
    #: what the loader read, as plain data: ``{"text": YAML, "overrides": [...]}`` (see
    #: :func:`~plugdrop.ablate.config.stored`); how the jobs of an ablation read it back
    origin: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def variant(self, name: str) -> Variant:
        """The variant called ``name`` (``KeyError`` when there is none)."""
        return self._by_name[name]

    @functools.cached_property
    def _by_name(self) -> dict[str, Variant]:
        return {v.name: v for v in self.variants}

    @property
    def variant_names(self) -> list[str]:
        return [v.name for v in self.variants]

    @property
    def baseline(self) -> str | None:
        """The reference variant: ``baseline`` if present, else the first empty one."""
        names = self.variant_names
        if "baseline" in names:
            return "baseline"
        return next((v.name for v in self.variants if not v.attachments), None)

    @property
    def seed_list(self) -> tuple[int, ...]:
        """Every seed a run may use: the list of a fixed design, or ``first .. first + max - 1``
        of an adaptive one."""
        if isinstance(self.seeds, SeedPlan):
            return tuple(self.seeds.seeds())
        return tuple(self.seeds)

    @property
    def adaptive(self) -> bool:
        """Whether the seeds are an adaptive plan (``{min, max}``)."""
        return isinstance(self.seeds, SeedPlan)

    @property
    def plan(self) -> SeedPlan | None:
        """The adaptive design's seeds, ``None`` for a fixed design."""
        return self.seeds if isinstance(self.seeds, SeedPlan) else None

    @property
    def decision(self) -> DecisionRule:
        """How verdicts are decided: ``decide_on``, ``alpha`` and ``margin`` (resolved),
        ``spending`` and ``passing``."""
        return DecisionRule(self.decide_on, self.alpha, self.margin, self.spending, self.passing)

    @property
    def gradcam_at(self) -> GradCamSpec | None:
        """Where Grad-CAM overlays are drawn, ``None`` for none (``gradcam: false``)."""
        if self.gradcam is False:
            return None
        return self.gradcam if isinstance(self.gradcam, GradCamSpec) else GradCamSpec()

    def runs(self) -> list[tuple[str, int]]:
        """Every (variant, seed) that may train, in training order."""
        return [(v.name, s) for v in self.variants for s in self.seed_list]

    def loc(self, key: str) -> str:
        """Where ``key`` was set (for errors found later), or the config file."""
        return self.locs.get(key, self.source)

    def resolved(self) -> dict[str, Any]:
        """The whole config with defaults filled in, as plain JSON-able data (with
        ``program:``, without the settings of plugdrop's own loop, which do not apply)."""
        skip = set(loop_settings()) if self.program is not None else set()
        out: dict[str, Any] = {name: to_plain(getattr(self, name)) for name in settings()
                               if name != "variants" and name not in skip}
        out["variants"] = {v.name: [a.describe() for a in v.attachments]
                           for v in self.variants}
        return out

    @property
    def cwd(self) -> str | None:  # the working directory the config was loaded in
        return self.origin.get("cwd") if isinstance(self.origin.get("cwd"), str) else None

    def hash(self) -> str:
        """A fingerprint of every setting that changes results (:attr:`Setting.hashed`), with
        ``program:`` of its working directory too; computed once (the config is frozen)."""
        return self._hash

    @functools.cached_property
    def _hash(self) -> str:
        return fingerprint(self._hashed(), settings())

    def _hashed(self) -> dict[str, Any]:
        resolved = self.resolved()
        if self.program is not None:
            resolved["program_cwd"] = self.cwd
        return resolved

    def judged_hash(self) -> str:
        """The hash with the settings that only judge in it, as versions before 0.2 computed it
        (what their folders record; a search's fingerprint keeps them too)."""
        return fingerprint(self._hashed(), settings(), judging=True)

    def attached_layers(self) -> list[Any]:
        """:func:`~.variants.attached_layers` of every variant (the watch and Grad-CAM
        default)."""
        return attached_layers(self.variants)


def settings() -> dict[str, Setting]:
    """The settings table: name -> :class:`Setting`, in declaration order."""
    return {f.name: f.metadata["setting"] for f in fields(AblationConfig)
            if "setting" in f.metadata}


def default(name: str) -> Any:
    """The default value of setting ``name`` (``MISSING`` for a required one)."""
    f = next(f for f in fields(AblationConfig) if f.name == name)
    if f.default_factory is not MISSING:
        return f.default_factory()
    return f.default


def fingerprint(resolved: Mapping[str, Any], table: Mapping[str, Setting], *,
                judging: bool = False) -> str:
    """The hash of a resolved config under the settings ``table``: the settings that do not
    change results are left out, those added later when at their default, and those that only
    judge (:data:`~.setting.JUDGES`); ``judging=True``: those hashed as versions before 0.2
    did, away from their defaults (what a folder of theirs records)."""
    r = dict(resolved)
    for name, s in table.items():
        later = s.hashed == AWAY_FROM_DEFAULT or (judging and s.hashed == JUDGES)
        if s.hashed is False or (s.hashed == JUDGES and not judging) or (
                later and r.get(name) == resolved_default(name)):
            r.pop(name, None)
    blob = json.dumps(r, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def resolved_default(name: str) -> Any:
    """The default of setting ``name`` as the resolved config writes it (plain data)."""
    return to_plain(default(name))


def loop_settings() -> list[str]:
    """The settings of plugdrop's own loop (:attr:`Setting.loop`), not for a ``program:``."""
    return [name for name, s in settings().items() if s.loop]


def unhashed() -> list[str]:
    """The settings that do not change results (out, device, workers, log, ...)."""
    return [name for name, s in settings().items() if s.hashed is False]


def judging() -> list[str]:
    """The settings that only judge the runs (:data:`~.setting.JUDGES`): ``decide_on``, ..."""
    return [name for name, s in settings().items() if s.hashed == JUDGES]
