"""Where a program already writes its metrics (``metrics_from:``), read as the run contract's
records: a CSV file with a header row (timm's ``summary.csv``, Lightning's ``CSVLogger``), a
JSON file (a list of records, JSON lines, or an object holding such a list: the Hugging Face
``Trainer``'s ``trainer_state.json`` ``log_history``), TensorBoard event files, or the lines the
program prints, matched by a regular expression with named groups.

Each record says where it was logged (``epoch`` and/or ``step``, whole numbers); a source
without either numbers its records (``step`` 1, 2, ...). Values that are not numbers (an empty
cell, a word) are left out. Records of one position are merged, later values winning (a
resumed program logs an epoch again), as the contract's own file is read
(:mod:`plugdrop.ablate.runs.records`).

    >>> from plugdrop.ablate.config import MetricsFrom
    >>> rows = csv_records("epoch,train_loss,eval_top1\\n0,2.3,10.5\\n1,1.9,31.0\\n")
    >>> rows[-1]
    {'epoch': 1, 'train_loss': 1.9, 'eval_top1': 31.0}
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config import MetricsFrom
from ..runs.records import POSITION, merge_records

__all__ = ["LINE_S", "Source", "SourceError", "bounded", "csv_records", "json_records",
           "open_regular", "stdout_records", "tensorboard_records"]

#: a source file larger than this is read from its end only (the latest records)
MOST_BYTES = 64 * 2**20
#: the most seconds a ``stdout:`` pattern may take on one printed line (a pattern that
#: backtracks catastrophically is stopped there, not left to run for ever)
LINE_S = 0.5
#: the most seconds a ``stdout:`` pattern may take over all the lines of one read (a pattern
#: slow on every line, just under :data:`LINE_S` each, stops there too)
ALL_LINES_S = 20.0
#: what the kinds of files that are not regular files are called
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


class SourceError(Exception):
    """Why a source holds no records it can give (its message: a few words, the path in
    it)."""


def open_regular(path: Path) -> io.BufferedReader:
    """``path`` opened for reading without ever blocking: a named pipe, a device or a socket
    is refused (what a program writes its metrics to is a regular file), as is a link that
    dangles.

    Raises:
        FileNotFoundError: nothing is there.
        SourceError: it is not a regular file.
        OSError: it cannot be opened (permissions).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise SourceError(f"is {kind}, not a regular file: point metrics_from at the file "
                              f"the program writes")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _number(text: Any) -> float | int | None:
    """A cell or a JSON value as a number, or ``None`` (empty, a word, a bool)."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return text
    if isinstance(text, str):
        text = text.strip()
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return None
    return None


def _whole(value: Any) -> int | None:
    """A position (epoch, step) as a whole number >= 0, or ``None``: ``3``, ``3.0``, ``"3"``."""
    v = _number(value)
    if v is None or isinstance(v, float) and (not math.isfinite(v) or not v.is_integer()):
        return None
    return int(v) if v >= 0 else None


def _record(values: Mapping[str, Any], n: int) -> dict[str, Any] | None:
    """One record from a row of values: its position (``epoch``/``step`` when they are whole
    numbers; else ``step`` ``n``) and its numbers; ``None`` when it holds no number."""
    rec: dict[str, Any] = {}
    for key in POSITION:
        if key in values:
            whole = _whole(values[key])
            if whole is not None:
                rec[key] = whole
    metrics = {str(k): v for k, v in ((k, _number(v)) for k, v in values.items()
                                      if k not in POSITION and k is not None)
               if v is not None}
    if not metrics:
        return None
    if not any(k in rec for k in POSITION):
        rec["step"] = n
    rec.update(metrics)
    return rec


def csv_records(text: str) -> list[dict[str, Any]]:
    """The records of a CSV text with a header row (one per row with a number); a cell of
    any size is read (the text is at most :data:`MOST_BYTES`).

    Raises:
        SourceError: the text is no CSV the csv module reads (the row and its reason).
    """
    if csv.field_size_limit() < len(text) + 1:  # the csv module's default: 128 KiB a cell
        csv.field_size_limit(min(sys.maxsize, max(len(text) + 1, MOST_BYTES)))
    rows = csv.DictReader(io.StringIO(text))
    out = []
    try:
        for n, row in enumerate(rows, 1):
            rec = _record({k.strip(): v for k, v in row.items() if isinstance(k, str)}, n)
            if rec is not None:
                out.append(rec)
    except csv.Error as e:
        raise SourceError(f"is no CSV the csv module reads (line {rows.line_num}: {e})") \
            from None
    return out


def json_records(text: str) -> list[dict[str, Any]]:
    """The records of a JSON text: a list of objects, an object holding one (``log_history``
    first), or one object per line."""
    try:
        doc: Any = json.loads(text)
    except ValueError:
        doc = []
        for line in text.splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            doc.append(item)
    if isinstance(doc, dict):
        lists = [v for k, v in sorted(doc.items(), key=lambda kv: kv[0] != "log_history")
                 if isinstance(v, list) and any(isinstance(x, dict) for x in v)]
        doc = lists[0] if lists else [doc]
    out = []
    for n, item in enumerate(doc if isinstance(doc, list) else [], 1):
        if isinstance(item, dict):
            rec = _record(item, n)
            if rec is not None:
                out.append(rec)
    return out


def bounded(pattern: str | re.Pattern[str]) -> Any:
    """``pattern`` compiled by the ``regex`` package (the syntax of :mod:`re`), whose matches
    take a timeout: a pattern that backtracks catastrophically on a line is stopped after
    :data:`LINE_S` seconds instead of running for ever.

    Raises:
        SourceError: the ``regex`` package is missing, or does not take the pattern.
    """
    try:
        import regex  # noqa: PLC0415
    except ImportError:
        raise SourceError("reading printed lines needs the regex package, which bounds a "
                          "pattern's time per line (pip install 'plugdrop[cli]', or pip "
                          "install regex)") from None
    text = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
    try:
        return regex.compile(text)
    except regex.error as e:
        raise SourceError(f"its pattern {text!r} is not one the regex package takes "
                          f"({e})") from None


def stdout_records(lines: Iterable[str], pattern: str | re.Pattern[str] | Any,
                   where: Callable[[int], str] = "line {}".format) -> list[dict[str, Any]]:
    """The records of the lines a program printed that ``pattern`` matches (its named groups:
    the metrics, ``epoch`` and ``step``); the n-th match without a position is ``step`` n.
    Each line is matched in at most :data:`LINE_S` seconds (:func:`bounded`).

    Raises:
        SourceError: the pattern ran longer than that on a line (``where`` of its number
            says which), with why.
    """
    if isinstance(pattern, (str, re.Pattern)):
        pattern = bounded(pattern)
    out = []
    n = 0
    until = time.monotonic() + ALL_LINES_S
    for i, line in enumerate(lines, 1):
        if i % 64 == 0 and time.monotonic() > until:
            raise SourceError(
                f"its pattern {pattern.pattern!r} took more than {ALL_LINES_S:g}s to match "
                f"{i - 1:,} lines, up to {where(i - 1)}, and was stopped: a pattern that "
                f"backtracks on every line; anchor it (^...$) and make it specific")
        try:
            m = pattern.search(line, timeout=LINE_S)
        except TimeoutError:
            raise SourceError(
                f"its pattern {pattern.pattern!r} ran longer than {LINE_S:g}s on {where(i)} "
                f"({len(line):,} characters) and was stopped: a pattern that backtracks "
                f"(a repeat inside a repeat, such as (a+)+ or (\\w+\\s?)*); anchor it and "
                f"give each group one way to match") from None
        if m is None:
            continue
        n += 1
        rec = _record({k: v for k, v in m.groupdict().items() if v is not None}, n)
        if rec is not None:
            out.append(rec)
    return out


def tensorboard_records(folder: Path) -> list[dict[str, Any]]:
    """The scalars of the TensorBoard event files under ``folder`` (its subfolders too), one
    record per step, each tag a metric.

    Raises:
        ImportError: the ``tensorboard`` package is missing.
    """
    from tensorboard.backend.event_processing.event_accumulator import (  # noqa: PLC0415
        EventAccumulator)

    by_step: dict[int, dict[str, Any]] = {}
    for root, _, files in sorted(os.walk(folder)):
        if not any("tfevents" in f for f in files):
            continue
        acc = EventAccumulator(root, size_guidance={"scalars": 0, "tensors": 0})
        acc.Reload()
        tags = acc.Tags()
        for tag in tags.get("scalars", []):
            for e in acc.Scalars(tag):
                by_step.setdefault(int(e.step), {"step": int(e.step)})[tag] = float(e.value)
        for tag in tags.get("tensors", []):
            for e in acc.Tensors(tag):
                value = _tensor_scalar(e.tensor_proto)
                if value is not None:
                    by_step.setdefault(int(e.step), {"step": int(e.step)})[tag] = value
    return [by_step[s] for s in sorted(by_step)]


def _tensor_scalar(proto: Any) -> float | None:
    """A scalar written as a tensor summary (TensorFlow 2's ``tf.summary.scalar``)."""
    try:
        from tensorboard.util import tensor_util  # noqa: PLC0415

        array = tensor_util.make_ndarray(proto)
        return float(array) if array.size == 1 and array.dtype.kind in "fiu" else None
    except (ImportError, ValueError, TypeError):
        return None


class Source:
    """The records of one run from where its program writes them (:class:`MetricsFrom`).

    Args:
        spec: the config's ``metrics_from``.
        path: the source's path for this run (placeholders filled in, absolute); ``None`` for
            ``stdout``.
        logs: the run's ``logs`` folder (``attempt-N.stdout``: what ``stdout`` reads).
        first: the first attempt whose output ``stdout`` reads (the last one that started
            over: the records of the attempts before it are set aside).
    """

    def __init__(self, spec: MetricsFrom, path: Path | None, logs: Path, first: int = 1
                 ) -> None:
        self.spec, self.path, self.logs, self.first = spec, path, logs, first
        self.pattern: Any = None
        self.refused: str | None = None  # a pattern the regex package does not take
        if spec.kind == "stdout":
            try:
                self.pattern = bounded(spec.where)
            except SourceError as e:
                self.refused = str(e)

    def __str__(self) -> str:
        return f"metrics_from {self.spec.kind}: {self.path or self.spec.where}"

    def read(self) -> tuple[list[dict[str, Any]], str | None]:
        """``(records, problem)``: the records so far (merged by position), and why there are
        none when the source is missing, unreadable or not a regular file (``None``
        otherwise): its real cause, with the path as this run's."""
        try:
            raw = self._raw()
        except FileNotFoundError as e:
            missing = f" ({e.filename})" if e.filename and str(e.filename) != str(
                self.path) else ""
            return [], f"{self} does not exist{missing}"
        except SourceError as e:
            return [], f"{self} {e}"
        except (OSError, UnicodeDecodeError) as e:
            return [], f"{self} is unreadable ({getattr(e, 'strerror', None) or e})"
        except ImportError:
            return [], (f"{self}: reading TensorBoard files needs the tensorboard package "
                        f"(pip install tensorboard)")
        except Exception as e:  # a damaged event file: tensorboard's own error
            return [], f"{self} could not be read ({type(e).__name__}: {e})"
        return merge_records(raw), None

    def _raw(self) -> list[dict[str, Any]]:
        kind = self.spec.kind
        if kind == "stdout":
            if self.refused is not None:
                raise SourceError(self.refused)
            lines, where = self._stdout_lines()
            return stdout_records(lines, self.pattern, where)
        assert self.path is not None
        if kind == "tensorboard":
            if not self.path.is_dir():
                if self.path.exists():
                    raise SourceError("is not a folder (of TensorBoard event files)")
                raise FileNotFoundError(self.path)
            for root, _, files in os.walk(self.path):
                for f in files:
                    if "tfevents" in f and not stat.S_ISREG(os.stat(Path(root, f)).st_mode):
                        raise SourceError(f"holds {Path(root, f)}, which is not a regular "
                                          f"file")
            return tensorboard_records(self.path)
        text = _tail(self.path)
        return csv_records(text) if kind == "csv" else json_records(text)

    def _attempts(self) -> list[Path]:
        """The outputs of the attempts from :attr:`first` on, in their order."""
        numbered = [(int(re.sub(r"\D", "", p.stem) or 0), p)
                    for p in self.logs.glob("attempt-*.stdout")]
        return [p for n, p in sorted(numbered) if n >= self.first]

    def _stdout_lines(self) -> tuple[list[str], Callable[[int], str]]:
        """The lines of the output of every attempt from :attr:`first` on, in their order, and
        what names the place of the i-th (``line 3 of .../attempt-2.stdout``)."""
        files = self._attempts()
        if not files:
            raise FileNotFoundError(self.logs / "attempt-1.stdout")
        lines: list[str] = []
        starts: list[tuple[int, Path]] = []
        for f in files:
            starts.append((len(lines), f))
            lines += _tail(f).splitlines()

        def where(i: int) -> str:
            start, f = next((s, f) for s, f in reversed(starts) if s < i)
            return f"line {i - start} of {f}"

        return lines, where

    def mtime(self) -> Sequence[float]:
        """When the source last changed (what a follower compares)."""
        paths: list[Path] = self._attempts() if self.path is None else [self.path]
        out = []
        for p in paths:
            try:
                st = p.stat()
                out += [st.st_mtime, st.st_size]
            except OSError:
                pass
        return out


def _tail(path: Path) -> str:
    """The text of ``path``, at most its last :data:`MOST_BYTES` (from a line's start; a CSV's
    header row kept); a file that is not a regular one is refused (:func:`open_regular`)."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size <= MOST_BYTES:
            data = f.read()
        else:
            head = f.readline()
            f.seek(size - MOST_BYTES)
            f.readline()
            data = (head if path.suffix == ".csv" else b"") + f.read()
    return data.decode("utf-8", errors="replace")
