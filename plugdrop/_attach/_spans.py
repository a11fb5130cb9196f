"""Where each residual branch starts and what it runs (its *span*), for
``DropPath(skip_compute=True)``, which takes the kept samples at a branch's entry and puts the
branch's outputs back at its exit.

The residual analysis (:mod:`._residual`) finds a branch as an addition ``short + branch``
inside a block ``S``, the branch being the output of its *exit* module. The branch's *entry*
is the first module called by ``S`` itself such that

- its stream argument (its first positional tensor, else its first keyword tensor) is the
  stream (the shortcut's source ``x``) or computed from it;
- its output feeds the branch, and cuts it from the stream: every path of the computation from
  the branch back to ``x`` goes through that output (so the branch depends on ``x`` only
  through the entry, and gathering the entry's input gathers the whole branch);
- its output is used nowhere but in the branch (not by the shortcut, not by the block's output
  by another way, not by a second branch).

The *body* is every module the block calls from the entry to the exit whose output feeds the
branch, with everything those modules call. A span also says what makes skipping wrong there
(``problem``): a module of the body that takes a batch-sized tensor not computed from the
branch's input (an attention mask, a context), an entry or exit that runs more than once per
forward, no entry at all. What the body's modules are (BatchNorm...) is judged at attach.

Found from a run (the autograd graph of an example input; :class:`RunSpans`) or from a torch.fx
graph (:mod:`._fxspans`), remembered per model.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn as nn

from .. import _selection
from ._hooks import observers_idle

__all__ = ["Span", "RunSpans", "cls_name", "counted", "known", "modules", "probe_empty", "run",
           "store"]


@dataclass(frozen=True)
class Span:
    """One residual branch, from its entry to its exit."""

    #: the module whose output is the branch (or is the branch's, unchanged)
    exit: str
    #: the module whose input the branch starts from (``None``: none found)
    entry: str | None
    #: the entry's argument that carries the stream: a position, or a keyword
    arg: int | str
    #: the modules the branch runs, entry and exit included
    body: tuple[str, ...]
    #: why the branch cannot run on the kept samples alone (``None``: it can)
    problem: str | None = None
    #: whether the branch was seen to run on an empty batch (a run on zero samples)
    empty_ok: bool = False


#: model -> exit name -> its span, from the model's last residual analysis
_SPANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def known(model: nn.Module) -> dict[str, Span] | None:
    """The spans found by the last residual analysis of ``model`` (``None``: never analysed)."""
    return _SPANS.get(model)


def store(model: nn.Module, spans: dict[str, Span]) -> None:
    _SPANS[model] = spans


def modules(model: nn.Module) -> dict[str, nn.Module]:
    """Module name -> module, with the names plugdrop gives (wrappers seen through)."""
    return {e.name: e.module for e in _selection.walk(model) if not e.wrapper}


def cls_name(model: nn.Module, name: str) -> str:
    """The class name of module ``name`` of ``model``, for messages."""
    module = modules(model).get(name)
    return "?" if module is None else type(module).__name__


def _tensors(value: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """``(where, tensor)`` for every tensor of a call's arguments (nested containers too)."""
    if isinstance(value, torch.Tensor):
        yield "", value
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            for w, t in _tensors(v):
                yield f"[{i}]{w}", t
    elif isinstance(value, dict):
        for k, v in value.items():
            for w, t in _tensors(v):
                yield f"[{k!r}]{w}", t


# ----------------------------------------------------------------------------- from a run

class _Call:
    """One module call of the analysed forward."""

    __slots__ = ("name", "parent", "seq", "args", "kwargs", "arg", "stream", "stream_node",
                 "out", "out_node", "out_nodes", "arg_nodes")

    def __init__(self, name: str, parent: _Call | None, seq: int, args: tuple, kwargs: dict,
                 node: Any) -> None:
        self.name, self.parent, self.seq = name, parent, seq
        self.args, self.kwargs = args, kwargs
        self.arg: int | str = 0
        self.stream: torch.Tensor | None = None
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                self.arg, self.stream = i, a
                break
        else:
            for k, a in kwargs.items():
                if isinstance(a, torch.Tensor):
                    self.arg, self.stream = k, a
                    break
        self.arg_nodes = {id(t): node(t) for _, t in _tensors((args, kwargs))}
        self.stream_node = None if self.stream is None else self.arg_nodes[id(self.stream)]
        self.out: Any = None
        self.out_node: Any = None  # of a tensor output
        self.out_nodes: list[Any] = []  # of every tensor in the output

    def inside(self, call: _Call) -> bool:
        c: _Call | None = self
        while c is not None:
            if c is call:
                return True
            c = c.parent
        return False


def reaches(start: Any, target: Any, barrier: tuple = (), variable: Any = None) -> bool:
    """Whether the autograd graph from node ``start`` reaches node ``target`` (or the
    AccumulateGrad node of tensor ``variable``) without expanding the ``barrier`` nodes."""
    if start is None or (target is None and variable is None):
        return False
    # Each node met is held here, not only its id: torch (2.11, for one) wraps an autograd
    # node in a new Python object at each access and frees it when unreferenced, so the id of
    # a node already walked could come back as another node's and cut the walk short.
    seen: dict[int, Any] = {}
    stack = [start]
    while stack:
        fn = stack.pop()
        if fn is target or (variable is not None and type(fn).__name__ == "AccumulateGrad"
                            and getattr(fn, "variable", None) is variable):
            return True
        if id(fn) in seen or any(fn is b for b in barrier):
            continue
        seen[id(fn)] = fn
        stack.extend(f for f, _ in fn.next_functions if f is not None)
    return False


class RunSpans:
    """The spans of the branches met in one forward: fed by the residual analysis's hooks
    (:meth:`start`, :meth:`end`, :meth:`branch`), read by :meth:`finish`."""

    def __init__(self, model: nn.Module, leaves: dict[int, Any]) -> None:
        self.model = model
        self.leaves = leaves
        self.owned = {id(t) for t in (*model.parameters(), *model.buffers())}
        self.calls: list[_Call] = []
        self.open: list[_Call] = []
        self.counts: Counter[str] = Counter()
        self.found: list[tuple[list[str], _Call | None, int, torch.Tensor, Any, torch.Tensor,
                               Any]] = []

    def node(self, t: torch.Tensor) -> Any:
        return t.grad_fn if t.grad_fn is not None else self.leaves.get(id(t))

    def start(self, name: str, args: tuple, kwargs: dict) -> None:
        call = _Call(name, self.open[-1] if self.open else None, len(self.calls), args, kwargs,
                     self.node)
        self.calls.append(call)
        self.open.append(call)
        self.counts[name] += 1

    def end(self, name: str, output: Any) -> None:
        if self.open and self.open[-1].name == name:
            call = self.open.pop()
            call.out = output
            call.out_nodes = [self.node(t) for _, t in _tensors(output)]
            if isinstance(output, torch.Tensor):
                call.out_node = call.out_nodes[0]

    def branch(self, scope: str, exits: list[str], branch: torch.Tensor,
               src: torch.Tensor) -> None:
        """The addition of ``branch`` (returned by ``exits``, innermost first) to a shortcut
        of ``src`` inside module ``scope`` (``""``: the root); its span is read at
        :meth:`finish`, when the block's output is known."""
        owner = self.open[-1] if self.open and self.open[-1].name == scope else None
        self.found.append((exits, owner, len(self.calls), branch, self.node(branch), src,
                           self.node(src)))

    def _span(self, exits: list[str], owner: _Call | None, seen: int, branch: torch.Tensor,
              br: Any, src: torch.Tensor, src_node: Any, outs: list[Any]) -> Span:
        level = [c for c in self.calls[:seen] if c.parent is owner
                 and (owner is None or c.seq > owner.seq)]
        last = next((c for c in reversed(level) if c.out is branch), None)
        entry = None
        if last is not None and br is not None and src_node is not None:
            entry = next((c for c in level if c.seq <= last.seq and self._starts(
                c, br, src, src_node, outs)), None)
        if entry is None or last is None:
            why = "no module of its block takes the stream and feeds the branch alone"
            return Span(exits[-1], None, 0, (), why)
        body = [c for c in level if entry.seq <= c.seq <= last.seq and any(
            n is br or reaches(br, n, (src_node,)) for n in c.out_nodes if n is not None)]
        names = list(dict.fromkeys(c.name for c in self.calls
                                   if any(c.inside(b) for b in body)))
        problem = self._extra(body, entry, src, src_node)
        return Span(exits[-1], entry.name, entry.arg, tuple(names), problem)

    def _starts(self, c: _Call, br: Any, src: torch.Tensor, src_node: Any,
                outs: list[Any]) -> bool:
        """Whether call ``c`` can be the entry of the branch ``br`` from stream ``src``, in a
        block whose output nodes are ``outs``: its input comes from the stream, its output
        feeds the branch, cuts it from the stream and reaches the block's output only
        through the branch."""
        if c.stream is None or c.out_node is None or c.out is src or c.out_node is src_node:
            return False
        if c.out_node is br:
            return True
        return ((c.stream is src or reaches(c.stream_node, src_node, variable=src))
                and reaches(br, c.out_node, (src_node,))
                and not reaches(br, src_node, (c.out_node,), src)
                and not any(reaches(o, c.out_node, (br, src_node)) for o in outs))

    def _extra(self, body: list[_Call], entry: _Call, src: torch.Tensor,
               src_node: Any) -> str | None:
        """What a module of the body takes beside the stream that has the batch's size and is
        not computed from the branch's input (nothing: ``None``)."""
        batch = src.shape[0] if src.dim() else None
        for c in body:
            for _, t in _tensors((c.args, c.kwargs)):
                if (c is entry and t is c.stream) or id(t) in self.owned or t.dim() == 0 \
                        or t.shape[0] != batch:
                    continue
                node = c.arg_nodes.get(id(t))
                if c is not entry and node is not None and (
                        node is entry.out_node or reaches(node, entry.out_node, (src_node,))):
                    continue
                return (f"module {c.name!r} ({cls_name(self.model, c.name)}) takes "
                        f"{_describe(c, t)}, a tensor of the batch's size {tuple(t.shape)} "
                        f"not computed from the branch's input (an attention mask, a context?)")
        return None

    def finish(self, output: Any) -> dict[str, Span]:
        """The spans, once the forward returned ``output``."""
        spans: dict[str, Span] = {}
        for exits, owner, seen, branch, br, src, src_node in self.found:
            outs = [self.node(t) for _, t in _tensors(owner.out if owner is not None
                                                      else output)]
            span = counted(self._span(exits, owner, seen, branch, br, src, src_node, outs),
                           self.counts, self.model)
            for name in exits:
                spans[name] = replace(span, exit=name)
        return spans


def _describe(c: _Call, t: torch.Tensor) -> str:
    for i, a in enumerate(c.args):
        if a is t:
            return f"positional argument {i}"
    for k, a in c.kwargs.items():
        if a is t:
            return f"argument {k!r}"
    return "a nested argument"


def counted(span: Span, counts: Any, model: nn.Module) -> Span:
    """``span`` marked when its entry or exit runs more than once per forward."""
    if span.problem is not None or span.entry is None:
        return span
    for role, name in (("entry", span.entry), ("exit", span.exit)):
        if counts[name] > 1:
            return replace(span, problem=f"its {role} {name!r} ({cls_name(model, name)}) runs "
                                         f"{counts[name]} times per forward")
    return span


# ------------------------------------------------------------------------ an empty batch

def run(model: nn.Module, inputs: Any) -> Any:
    """``model`` called on an example input (a tuple: positional inputs, a dict: keywords)."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, tuple):
        return model(*inputs)
    return model(inputs)


def _no_rows(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x[:0] if x.dim() else x
    if isinstance(x, (tuple, list)):
        return type(x)(_no_rows(v) for v in x)
    if isinstance(x, dict):
        return {k: _no_rows(v) for k, v in x.items()}
    return x


class _Returned:
    def __init__(self, names: set[str], name: str) -> None:
        self.names, self.name = names, name

    def __call__(self, module: nn.Module, args: tuple, output: Any) -> None:
        self.names.add(self.name)


def probe_empty(model: nn.Module, example_input: Any, spans: dict) -> None:
    """Mark the spans whose exit returned when the model ran on an empty batch (the example
    input cut to zero samples, without autograd, plugdrop's observers idle): those branches
    run on zero samples, so a draw that keeps none of them skips them entirely."""
    returned: set[str] = set()
    named = modules(model)
    handles = [named[n].register_forward_hook(_Returned(returned, n))
               for n in spans if n in named]
    try:
        with torch.no_grad(), observers_idle():
            run(model, _no_rows(example_input))
    except Exception:  # the model (or part of it) does not take an empty batch
        pass
    finally:
        for h in handles:
            h.remove()
    for name in returned:
        spans[name] = replace(spans[name], empty_ok=True)
