"""The run of a ``plugdrop ablate`` that this process trains, for a training script of your own
(``program:`` in the ablation's config; see the guide "Ablate your own training script").

``plugdrop ablate`` runs the program once per variant and seed with the run contract in its
environment; :func:`current_run` reads it, attaches the variant's regularization to a model and
appends metric lines. Outside an ablation it returns ``None``, so the same script runs alone::

    run = pd.current_run()                     # None when the script runs on its own
    seed = run.seed if run else 0
    model = build_model(seed)
    if run:
        run.attach(model, steps=epochs * len(loader)).bind(optimizer)
    for epoch in range(1, epochs + 1):
        ...
        if run:
            run.log(epoch=epoch, val_miou=miou, val_loss=loss)

The contract is language-agnostic: a program in any language reads the same variables
(:data:`ENV`) and appends JSON lines to ``PLUGDROP_METRICS`` itself.
"""

from __future__ import annotations

import json
import math
import operator
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _receipt
from .errors import PlugdropError
from .spec import AttachmentGroup, AttachmentSpec, attach_all, parse_spec
from .spec.group import WATCHERS

__all__ = ["ENV", "AblationRun", "current_run"]

#: the run contract's environment variables: what each holds
ENV = {
    "PLUGDROP_SEED": "the run's seed, an integer (the same seed: the same initial weights and "
                     "data order, if the program seeds with it)",
    "PLUGDROP_VARIANT": "the variant's name (baseline, dropblock[p=0.1], ...)",
    "PLUGDROP_SPEC": "the path of a YAML file with the variant's attachments, what "
                     "plugdrop.attach_all takes ([] for the baseline), written for each attempt",
    "PLUGDROP_RUN_DIR": "the run's own folder, created: the program keeps its checkpoints there",
    "PLUGDROP_METRICS": "a JSON-lines file the program appends to: one object per evaluation, "
                        "with epoch or step and the metric values",
    "PLUGDROP_RESUME": "1 when the run was started before and did not finish (resume from the "
                       "checkpoint in PLUGDROP_RUN_DIR), else 0",
    "PLUGDROP_RUN_ID": "the run's name, <variant>__s<seed> (for a logger's run name)",
    "PLUGDROP_RECEIPT": "the path of the run's receipt (attached.json): what the program "
                        "attached and how often its hooks ran, which plugdrop.current_run()."
                        "attach and the callbacks write; a program in another language writes "
                        "{\"attachments\": [{\"label\": ..., \"layers\": [...], \"calls\": "
                        "N}]} itself",
}
#: the variables :func:`current_run` does without (a run's name and receipt have defaults)
_OPTIONAL = ("PLUGDROP_RUN_ID", "PLUGDROP_RECEIPT")

_POSITION = ("epoch", "step")


@dataclass(frozen=True)
class AblationRun:
    """One run (a variant and a seed) of a ``plugdrop ablate`` whose ``program:`` is this
    process: what :func:`current_run` gives.

    Attributes:
        seed: the seed (``PLUGDROP_SEED``).
        variant: the variant's name (``PLUGDROP_VARIANT``).
        spec: the YAML file of the variant's attachments (``PLUGDROP_SPEC``; ``[]`` for the
            baseline).
        run_dir: the run's own folder (``PLUGDROP_RUN_DIR``): keep checkpoints there.
        metrics: the JSON-lines file :meth:`log` appends to (``PLUGDROP_METRICS``).
        resumed: the run was started before and did not finish (``PLUGDROP_RESUME=1``):
            continue from the checkpoint in :attr:`run_dir`, if there is one.
        run_id: ``<variant>__s<seed>`` (``PLUGDROP_RUN_ID``).
    """

    seed: int
    variant: str
    spec: Path
    run_dir: Path
    metrics: Path
    resumed: bool
    run_id: str

    @property
    def attachments(self) -> list[AttachmentSpec]:
        """The variant's attachments, checked (:func:`plugdrop.parse_spec` of :attr:`spec`;
        empty for the baseline).

        Raises:
            SpecError: the spec file is missing or not a spec.
        """
        return parse_spec(self.spec)

    def attach(self, model: Any, *, steps: int | None = None, scaler: Any = None,
               example_input: Any = None) -> AttachmentGroup:
        """Attach the variant's regularization to ``model``: :func:`plugdrop.attach_all` of
        :attr:`spec` (nothing for the baseline; the group is then empty).

        Args:
            model: the ``nn.Module`` (its layers are what the variant's selectors name).
            steps: the optimizer steps the schedules written without ``steps:`` span (the
                training's length); default ``None``: each schedule gives its own.
            scaler: a ``GradScaler`` for the gradient transforms that take one.
            example_input: an input batch to find residual branches with (``residual:``).

        Returns:
            The :class:`~plugdrop.AttachmentGroup`: ``.bind(optimizer)`` steps its schedules,
            ``.state_dict()`` goes into your checkpoint to resume them.

        Raises:
            SpecError, SelectorError, AttachError: what :func:`plugdrop.attach_all` raises
                (a selector that matches no layer of this model names the closest ones).
        """
        group = attach_all(model, self.spec, steps=steps, scaler=scaler,
                           example_input=example_input, source=f"variant {self.variant!r}")
        self.record_attached(group)
        return group

    def record_attached(self, group: AttachmentGroup, by: str = "run.attach") -> None:
        """Record ``group`` as what this run attached: the receipt (``attached.json`` beside
        :attr:`metrics`, ``PLUGDROP_RECEIPT``) is written now, at each :meth:`log` and at exit,
        with how often the hooks ran (at :meth:`log`, at most every 5 s). :meth:`attach` and the callbacks call it; call it when
        you attach the variant's spec yourself (:func:`plugdrop.attach_all` of :attr:`spec`).
        ``plugdrop ablate`` fails a run of a variant with attachments that leaves no receipt
        (unless its config says ``receipt: false``).

        Args:
            group: the attachments made for this run.
            by: what attached them, in words (shown in the report).
        """
        _receipt.track(group, by)

    def log(self, epoch: int | None = None, step: int | None = None,
            **metrics: Any) -> None:
        """Append one evaluation's metrics to :attr:`metrics` as one JSON line: written in
        one ``write`` to the file opened for appending, then flushed to disk, so a reader (or a
        kill) never sees half a line. Under ``torchrun`` (or Lightning's processes) only
        rank 0 writes.

        Args:
            epoch: the epoch the evaluation follows (a whole number >= 0: a Python, NumPy or
                0-dim torch integer).
            step: the optimizer step it follows (a whole number >= 0); at least one of the
                two is given.
            **metrics: name -> number (a Python, NumPy or 0-dim torch number; NaN and
                infinities are written as ``NaN``, ``Infinity``; an integer beyond a float's
                range is refused).

        Raises:
            TypeError: a metric that is not a number, or neither ``epoch`` nor ``step``.
            PlugdropError: a negative ``epoch`` or ``step``, a metric without a name
                (``**{"": 0.5}``), or an integer beyond a float's range (``10**400``).
        """
        if not _receipt.rank_zero():
            return
        _append(self.metrics, _record(epoch, step, metrics))
        _receipt.write(force=False)


def _record(epoch: int | None, step: int | None, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """One metrics line as the run contract writes it (see :meth:`AblationRun.log`)."""
    if epoch is None and step is None:
        raise TypeError("log() needs epoch= or step=: where in the training the metrics were "
                        "measured")
    out: dict[str, Any] = {}
    for key, value in (("epoch", epoch), ("step", step)):
        if value is None:
            continue
        if not isinstance(value, (bool, int)) and hasattr(value, "__index__"):
            try:  # a NumPy integer, a 0-dim integer tensor
                value = operator.index(value)
            except TypeError:
                pass
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"log({key}=...) takes a whole number, got {value!r}")
        if value < 0:
            raise PlugdropError(f"log({key}={value}): it counts from 0")
        out[key] = value
    for name, value in metrics.items():
        if not name.strip():
            raise PlugdropError(f"log({name!r}=...): a metric needs a name")
        out[name] = _number(name, value)
    return out


def _number(name: str, value: Any) -> int | float:
    if hasattr(value, "item") and callable(value.item):  # a 0-dim tensor, a NumPy number
        try:
            value = value.item()
        except (ValueError, RuntimeError):
            raise TypeError(f"log({name}=...) takes one number, got a tensor of "
                            f"{getattr(value, 'numel', lambda: '?')()} elements") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"log({name}=...) takes a number, got {type(value).__name__} "
                        f"{value!r}")
    if isinstance(value, int):
        try:
            float(value)
        except OverflowError:  # a reader takes every value as a float: 10**400 is none
            digits = int(abs(value).bit_length() * math.log10(2)) + 1  # str() may refuse
            raise PlugdropError(f"log({name}=...): an integer of {digits} digits, beyond "
                                f"what a float holds (about 1.8e308); log "
                                f"it as a float (float('inf') if it is unbounded)") from None
    return value


def _append(path: Path, rec: Mapping[str, Any]) -> None:
    """Append ``rec`` as one line in one write (a partial line a killed writer left before it
    stays on its own line), then fsync."""
    line = (json.dumps(rec) + "\n").encode()
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise PlugdropError(f"log(): cannot append to PLUGDROP_METRICS={path} "
                            f"({e.strerror or e}): the run contract's metrics file is in the "
                            f"run's folder, which plugdrop ablate creates; unset PLUGDROP_SEED "
                            f"to run the script on its own") from None
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        written = os.write(fd, line)
        while written < len(line):  # never on a regular file, but a short write is legal
            written += os.write(fd, line[written:])
        os.fsync(fd)
    finally:
        os.close(fd)


def _run_spec_attached(group: AttachmentGroup, spec: Any) -> None:
    """:func:`plugdrop.attach_all` of the run's own spec file (``PLUGDROP_SPEC``, as the run
    contract's table says a program may apply it) leaves the receipt, as ``run.attach`` does."""
    env = os.environ
    if not isinstance(spec, (str, os.PathLike)) or "PLUGDROP_SEED" not in env \
            or not env.get("PLUGDROP_SPEC"):
        return
    try:
        same = os.path.samefile(spec, env["PLUGDROP_SPEC"])
    except (OSError, ValueError, TypeError):  # YAML text, not a path
        return
    if same:
        _receipt.track(group, "attach_all")


WATCHERS.append(_run_spec_attached)


def current_run() -> AblationRun | None:
    """The run of a ``plugdrop ablate`` that this process trains, from the run contract's
    environment (:data:`ENV`); ``None`` when the process does not run inside an ablation (no
    ``PLUGDROP_SEED``), so that the same script runs on its own.

    Returns:
        An :class:`AblationRun`, or ``None``.

    Raises:
        PlugdropError: the environment holds part of the contract only, or a value that is not
            one (``PLUGDROP_SEED`` not an integer): one line naming it.
    """
    env = os.environ
    if "PLUGDROP_SEED" not in env:
        return None
    missing = [k for k in ENV if k not in env and k not in _OPTIONAL]
    if missing:
        raise PlugdropError(f"the environment holds PLUGDROP_SEED but not {', '.join(missing)}: "
                            f"it is not a run of plugdrop ablate (unset PLUGDROP_SEED to run "
                            f"the script on its own)")
    try:
        seed = int(env["PLUGDROP_SEED"])
    except ValueError:
        raise PlugdropError(f"PLUGDROP_SEED={env['PLUGDROP_SEED']!r} is not an integer") \
            from None
    if env["PLUGDROP_RESUME"] not in ("0", "1"):
        raise PlugdropError(f"PLUGDROP_RESUME={env['PLUGDROP_RESUME']!r} is not 0 or 1")
    variant = env["PLUGDROP_VARIANT"]
    return AblationRun(seed=seed, variant=variant, spec=Path(env["PLUGDROP_SPEC"]),
                       run_dir=Path(env["PLUGDROP_RUN_DIR"]),
                       metrics=Path(env["PLUGDROP_METRICS"]),
                       resumed=env["PLUGDROP_RESUME"] == "1",
                       run_id=env.get("PLUGDROP_RUN_ID") or f"{variant}__s{seed}")
