"""Selection: from a selector to the modules it names. Private; see :func:`plugdrop.select`.

Names are the qualified names of ``model.named_modules()`` with wrapper segments removed, so a
model wrapped by DDP/DataParallel (``module.``), ``torch.compile`` (its wrapper prefix), a checkpoint
wrapper or FSDP is addressed with the bare model's names. The raw names work too.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Union

import torch.nn as nn

from ._compat import WRAPPERS
from .errors import SelectorError


Predicate = Callable[[str, nn.Module], bool]
Selector = Union[str, type, tuple, Predicate, nn.Module, Sequence["Selector"]]


def _wrapped_attr(module: nn.Module) -> str | None:
    for cls in type(module).__mro__:
        attr = WRAPPERS.get(cls.__name__)
        if attr is not None and isinstance(getattr(module, attr, None), nn.Module):
            return attr
    return None


class Entry:
    __slots__ = ("name", "raw", "module", "wrapper")

    def __init__(self, name: str, raw: str, module: nn.Module, wrapper: bool):
        self.name, self.raw, self.module, self.wrapper = name, raw, module, wrapper


def walk(model: nn.Module) -> list[Entry]:
    """Every module of ``model`` in ``named_modules()`` order, with its canonical name."""
    out: list[Entry] = []
    memo: set[int] = set()

    def visit(module: nn.Module, raw: str, name: str) -> None:
        if id(module) in memo:
            return
        memo.add(id(module))
        inner = _wrapped_attr(module)
        out.append(Entry(name, raw, module, inner is not None))
        for child_name, child in module.named_children():
            child_raw = f"{raw}.{child_name}" if raw else child_name
            if child_name == inner:
                child_canon = name
            else:
                child_canon = f"{name}.{child_name}" if name else child_name
            visit(child, child_raw, child_canon)

    visit(model, "", "")
    return out


def names(model: nn.Module) -> dict[int, str]:
    """id(module) -> canonical name (the innermost wins for a wrapper and its module)."""
    return {id(e.module): e.name for e in walk(model)}


# ----------------------------------------------------------------------------------- globs


def _segment_regex(seg: str) -> str:
    if seg == "*":
        return r"[^.]+"
    out, i = [], 0
    while i < len(seg):
        ch = seg[i]
        if ch == "*":
            out.append(r"[^.]*")
        elif ch == "?":
            out.append(r"[^.]")
        elif ch == "[":
            j = seg.find("]", i + 2 if i + 1 < len(seg) and seg[i + 1] in "!^" else i + 1)
            if j == -1:
                out.append(re.escape(ch))
            else:
                body = seg[i + 1:j]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def glob_to_regex(pattern: str) -> str:
    """Segment-aware glob: ``*`` within one dotted segment, ``**`` any number of segments."""
    segs = pattern.split(".")
    collapsed: list[str] = []
    for s in segs:
        if s == "**" and collapsed and collapsed[-1] == "**":
            continue
        collapsed.append(s)
    segs = collapsed
    if segs == ["**"]:
        return r".*"
    parts: list[str] = []
    for i, seg in enumerate(segs):
        if seg == "**":
            parts.append(r"(?:[^.]+\.)*" if i == 0 else r"(?:\.[^.]+)*")
            continue
        if i > 0 and not (i == 1 and segs[0] == "**"):
            parts.append(r"\.")
        parts.append(_segment_regex(seg))
    return "".join(parts)


def _string_matcher(selector: str) -> Callable[[Entry], bool]:
    if selector.startswith("re:"):
        try:
            rx = re.compile(selector[3:])
        except re.error as e:
            raise SelectorError(f"selector {selector!r} is not a valid regular expression: {e}") \
                from None
    else:
        rx = re.compile(glob_to_regex(selector))
    return lambda e: bool(rx.fullmatch(e.name) or (e.raw != e.name and rx.fullmatch(e.raw)))


def _flatten(selector: Selector) -> list[Selector]:
    if isinstance(selector, (list, set, frozenset)):
        out: list[Selector] = []
        for s in selector:
            out.extend(_flatten(s))
        return out
    return [selector]


def _matcher(selector: Selector, role: str) -> Callable[[Entry], bool]:
    if isinstance(selector, str):
        return _string_matcher(selector)
    if isinstance(selector, nn.Module):  # the module object itself (model.layer3)
        return lambda e: e.module is selector
    if isinstance(selector, type):
        if not issubclass(selector, nn.Module):
            raise TypeError(f"{role} type {selector.__name__} is not an nn.Module subclass")
        return lambda e: isinstance(e.module, selector)
    if isinstance(selector, tuple) and selector and all(isinstance(t, type) for t in selector):
        return lambda e: isinstance(e.module, selector)
    if callable(selector):
        return lambda e: bool(selector(e.name, e.module))
    raise TypeError(
        f"{role} must be a glob or 're:' string, an nn.Module type or tuple of types, a "
        f"predicate (name, module) -> bool, or a list of these; got "
        f"{type(selector).__name__} {selector!r}"
    )


def _describe(selector: Selector) -> str:
    if isinstance(selector, nn.Module):
        return f"the module object {type(selector).__name__}"
    if isinstance(selector, type):
        return selector.__name__
    if isinstance(selector, tuple):
        return "(" + ", ".join(t.__name__ for t in selector) + ")"
    return repr(selector)


def _no_match(model: nn.Module, selector: Selector, entries: list[Entry]) -> SelectorError:
    all_names = [e.name for e in entries if not e.wrapper and e.name]
    msg = f"selector {_describe(selector)} matched no module of {type(model).__name__}."
    if isinstance(selector, str):
        probe = selector[3:] if selector.startswith("re:") else selector
        close = difflib.get_close_matches(probe.replace("*", ""), all_names, n=6, cutoff=0.5)
        if close:
            msg += " Closest names: " + ", ".join(repr(c) for c in close) + "."
    tops = [n for n in all_names if "." not in n][:12]
    if tops:
        msg += " Top-level modules: " + ", ".join(repr(t) for t in tops) + "."
    msg += (" Globs match dotted segments ('*' within one, '**' across any number); list all "
            "names with plugdrop.select(model, '**').")
    return SelectorError(msg)


def resolve(model: nn.Module, selector: Selector, exclude: Selector | None = None
            ) -> list[tuple[str, nn.Module]]:
    """``[(canonical name, module)]`` picked by ``selector`` minus ``exclude``.

    In ``named_modules()`` order, without duplicates. Raises :class:`SelectorError` if a selector
    matches nothing (naming the closest names) and ``TypeError`` for a malformed selector.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    entries = walk(model)
    candidates = [e for e in entries if not e.wrapper]
    parts = _flatten(selector)
    if not parts:
        raise SelectorError("selector is an empty list: name at least one layer")
    chosen: set[int] = set()
    for part in parts:
        match = _matcher(part, "selector")
        hits = [e for e in candidates if match(e)]
        if not hits:
            raise _no_match(model, part, entries)
        chosen.update(id(e.module) for e in hits)
    if exclude is not None:
        for part in _flatten(exclude):
            match = _matcher(part, "exclude")
            hits = [e for e in candidates if match(e)]
            if not hits:  # a typo would silently exclude nothing
                err = _no_match(model, part, entries)
                raise SelectorError(f"exclude: {err}")
            for e in hits:
                chosen.discard(id(e.module))
        if not chosen:
            raise SelectorError(
                f"selector {_describe(selector)} matched only modules that exclude="
                f"{_describe(exclude)} removes: nothing is left to attach to"
            )
    out, seen = [], set()
    for e in candidates:
        if id(e.module) in chosen and id(e.module) not in seen:
            seen.add(id(e.module))
            out.append((e.name, e.module))
    return out


def iter_modules(model: nn.Module) -> Iterator[nn.Module]:
    seen: set[int] = set()
    for m in model.modules():
        if id(m) not in seen:
            seen.add(id(m))
            yield m
