"""YAML that remembers where each value came from, so that every error names its place.

A value of a YAML file carries ``file:line:column``; a value given elsewhere carries a label (a
command-line option such as ``--set KEY``, ``spec[0].p`` for Python data). Mappings and lists
read here are :class:`LocDict` and :class:`LocList`; plain values keep their Python types.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import SpecError

__all__ = ["Loc", "LocDict", "LocList", "MOST_BYTES", "fail", "loc_of", "plain", "read_text",
           "read_yaml", "suggest"]

#: the largest YAML file plugdrop reads (a config of ten thousand variants is about 1 MB; a
#: larger one is a mistake, and reading it with the place of every value would take minutes)
MOST_BYTES = 4 << 20
#: byte-order marks of the encodings a YAML file may have been saved in by mistake
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
         (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


@dataclass(frozen=True)
class Loc:
    """Where a value came from: ``file:line:column`` or a command-line option."""

    text: str

    def __str__(self) -> str:
        return self.text


def fail(loc: Loc | str | None, msg: str) -> SpecError:
    """The error ``msg`` prefixed with its place (nothing to prefix: ``msg`` alone)."""
    return SpecError(f"{loc}: {msg}" if loc else msg)


class LocDict(dict):
    """A mapping that remembers where it (``loc``) and each of its keys (:meth:`at`) came
    from."""

    def __init__(self, data: Mapping[Any, Any], loc: Loc, keys: Mapping[Any, Loc]):
        super().__init__(data)
        self.loc = loc
        self.keys_loc = dict(keys)

    def at(self, key: Any) -> Loc:
        """Where ``key`` was given (the mapping's own place when unknown)."""
        return self.keys_loc.get(key, self.loc)


class LocList(list):
    """A list that remembers where it came from."""

    def __init__(self, data: Sequence[Any], loc: Loc):
        super().__init__(data)
        self.loc = loc


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading ``1e-3`` and ``5e-4`` as floats (YAML 1.2 does; PyYAML's
    1.1 resolver wants a dot)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def _where(node: yaml.Node, file: str, label: str | None) -> Loc:
    if label is not None:
        return Loc(label)
    return Loc(f"{file}:{node.start_mark.line + 1}:{node.start_mark.column + 1}")


def _to_python(node: yaml.Node, file: str, label: str | None = None) -> Any:
    """A composed YAML node -> Python values that remember their locations; duplicate keys
    are errors."""
    loc = _where(node, file, label)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        keys: dict[Any, Loc] = {}
        for k, v in node.value:
            key = _to_python(k, file, label)
            kloc = _where(k, file, label)
            if isinstance(key, (dict, list)):
                raise fail(kloc, "a key must be a plain value")
            if key in out:
                raise fail(kloc, f"duplicate key {key!r} (first at {keys[key]}); keep one")
            out[key] = _to_python(v, file, label)
            keys[key] = kloc
        return LocDict(out, loc, keys)
    if isinstance(node, yaml.SequenceNode):
        return LocList([_to_python(v, file, label) for v in node.value], loc)
    return _Loader("").construct_object(node, deep=True)


def loc_of(value: Any, default: Loc | None) -> Loc | None:
    """Where ``value`` came from, if it knows, else ``default``."""
    return getattr(value, "loc", None) or default


def plain(value: Any) -> Any:
    """``value`` with plain dicts and lists instead of :class:`LocDict` / :class:`LocList`."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def suggest(name: Any, options: Iterable[Any]) -> str:
    """`` (did you mean 'x'?)`` for the option closest to ``name``, or ``""``."""
    close = difflib.get_close_matches(str(name), [str(o) for o in options], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def read_text(path: Path, what: str = "the file") -> str:
    """The text of a YAML file: UTF-8, with or without a byte-order mark.

    Raises:
        SpecError: one line naming the file and the fix: it cannot be read, it is a folder,
            it is larger than :data:`MOST_BYTES`, it was saved as UTF-16 or UTF-32, it holds a
            byte that is not UTF-8 (its offset named: a Latin-1 ``é``, say) or a NUL byte
            (not a text file).
    """
    try:
        if path.is_dir():
            raise SpecError(f"{path}: is a folder; give the YAML file of {what}")
        if path.stat().st_size > MOST_BYTES:
            raise SpecError(f"{path}: {path.stat().st_size} bytes is no YAML file of {what} "
                            f"(at most {MOST_BYTES >> 20} MB); give the right file")
        data = path.read_bytes()
    except OSError as e:
        raise SpecError(f"{path}: cannot read {what} ({e.strerror or e})") from None
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise SpecError(f"{path}: saved as {name}; save it as UTF-8 (your editor's "
                            f"'Save with encoding', or: iconv -f {name} -t UTF-8)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        byte = data[e.start:e.start + 1].hex()
        raise SpecError(f"{path}: byte 0x{byte} at offset {e.start} is not UTF-8 (a file "
                        f"saved as Latin-1 or another encoding?); save it as UTF-8") from None
    if "\x00" in text:
        raise SpecError(f"{path}: holds a NUL byte at offset {data.index(0)}: not a text "
                        f"file; give the YAML file of {what}")
    return text


#: the deepest nesting of brackets or indented blocks a YAML text may have (a config is a few
#: levels deep; PyYAML recurses once per level and would raise RecursionError near 1,000)
MOST_DEPTH = 100


def _too_deep(text: str) -> str | None:
    """``line:column`` where ``text`` first nests deeper than :data:`MOST_DEPTH` (flow brackets
    or indentation), else ``None``. Quotes are not parsed: a bracket inside a string counts,
    which only a text of a hundred brackets in strings would notice."""
    depth = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip(" -")
        if (len(line) - len(stripped)) // 2 > MOST_DEPTH:
            return f"{lineno}:1"
        for col, ch in enumerate(line, 1):
            if ch in "[{":
                depth += 1
                if depth > MOST_DEPTH:
                    return f"{lineno}:{col}"
            elif ch in "]}":
                depth = max(0, depth - 1)
            elif ch == "#" and (col == 1 or line[col - 2] in " \t"):
                break
    return None


def read_yaml(text: str, file: str, label: str | None = None) -> Any:
    """Read YAML ``text`` (from ``file``; or the value of command-line option ``label``) into
    values that remember their locations; ``None`` for an empty text. Floats may be written
    ``1e-3`` (YAML 1.2), tags that build Python objects are refused (PyYAML's safe loader).

    Raises:
        SpecError: the text is not valid YAML (naming the line and column), or a mapping
            repeats a key.
    """
    deep = _too_deep(text)
    if deep is not None:
        raise SpecError(f"{label or file}:{deep}: nested more than {MOST_DEPTH} levels deep: no "
                        f"config or spec is; give the right file (or close the brackets)")
    try:
        node = yaml.compose(text, Loader=_Loader)
    except RecursionError:  # pragma: no cover - _too_deep counts first
        raise SpecError(f"{label or file}: nested too deep to read; give the right file") \
            from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        if label is not None:
            raise SpecError(f"{label}: {text!r} is not valid YAML ({problem}); quote it or "
                              f"fix the brackets") from None
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        raise SpecError(f"{where}: not valid YAML: {problem}") from None
    if node is None:
        return None
    return _to_python(node, file, label)
