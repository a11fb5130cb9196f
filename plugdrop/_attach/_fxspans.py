"""The spans of residual branches (see :mod:`._spans`) read from a torch.fx graph, for models
analysed without an example input.

The rule is the one of a run, on graph nodes: the entry is the first module called by the block
whose output feeds the branch, cuts it from the stream and is used nowhere else. Reading a
tensor's shape (``x.shape``, ``x.size()``) is not a use of its values: it neither joins the
branch to the stream nor leaks the entry's output. Reading the *stream's batch size* inside the
branch is a problem (the branch runs on fewer samples). Optional inputs of the model (those
with a default, such as ``attn_mask=None``) are taken to keep their default, as in a call
``model(x)``; with another call, analyse the model with an example input of that call.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable

import torch.fx as fx
import torch.nn as nn

from ._spans import Span, cls_name, counted

__all__ = ["graph_spans"]

_SHAPE_ATTRS = {"shape", "ndim", "dtype", "device", "is_cuda"}
_SHAPE_METHODS = {"size", "dim", "numel", "get_device", "type"}


def _keys(node: fx.Node) -> list[str]:
    return list(node.meta.get("nn_module_stack", {}).keys())


def _paths(node: fx.Node) -> list[str]:
    return [path for path, _ in node.meta.get("nn_module_stack", {}).values()]


def _reads_shape(node: fx.Node) -> bool:
    """Whether ``node`` reads a tensor's shape (or dtype, device), not its values."""
    return (node.op == "call_function" and node.target is getattr and len(node.args) > 1
            and node.args[1] in _SHAPE_ATTRS) or (
        node.op == "call_method" and node.target in _SHAPE_METHODS)


def closure(start: fx.Node, step: Callable[[fx.Node], list[fx.Node]],
            stop: fx.Node | None = None) -> set[fx.Node]:
    """``start`` and every node reached from it by ``step``, not going on past ``stop``."""
    seen: set[fx.Node] = set()
    todo = [start]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            if n is not stop:
                todo.extend(step(n))
    return seen


def _inputs(n: fx.Node) -> list[fx.Node]:
    """What ``n`` depends on by value (not through reading a shape)."""
    return [] if _reads_shape(n) else list(n.all_input_nodes)


def _users(n: fx.Node) -> list[fx.Node]:
    return [] if _reads_shape(n) else list(n.users)


def _required(n: fx.Node) -> bool:
    """Whether ``n`` depends on a model input without a default."""
    return any(a.op == "placeholder" and not a.args for a in closure(n, _inputs))


def _batch_reads(node: fx.Node) -> list[fx.Node]:
    """The nodes holding the batch size of the tensor a shape read ``node`` reads."""
    if node.op == "call_method" and node.target == "size":
        if len(node.args) > 1:
            return [node] if node.args[1] == 0 else []
        return [u for u in node.users if u.target is operator.getitem and u.args[1] == 0]
    if node.op == "call_function" and node.target is getattr and node.args[1] == "shape":
        return [u for u in node.users if u.target is operator.getitem and len(u.args) > 1
                and u.args[1] == 0]
    return []


def graph_spans(graph: fx.Graph, model: nn.Module, add: fx.Node, branch: fx.Node,
                src: fx.Node, exits: list[str]) -> dict[str, Span]:
    """The span of the branch ``branch`` that node ``add`` of a torch.fx ``graph`` of
    ``model`` adds to a shortcut of ``src``, for each of ``exits``."""
    scope = _keys(add)
    depth = len(scope)
    calls: dict[str, list[fx.Node]] = {}
    for n in graph.nodes:
        keys = _keys(n)
        if len(keys) > depth and keys[:depth] == scope:
            calls.setdefault(keys[depth], []).append(n)
    above = closure(branch, _inputs)
    from_src = closure(src, _users)
    outs: dict[str, fx.Node | None] = {}
    entry: tuple[str, fx.Node, fx.Node] | None = None
    for key, nodes in calls.items():
        members = set(nodes)
        out = [n for n in nodes if any(u not in members for u in n.users)]
        o = outs[key] = out[0] if len(out) == 1 else None
        if entry is not None or o is None or o is src or o not in above:
            continue
        stream = next((i for n in nodes for i in _inputs(n)
                       if i not in members and i in from_src), None)
        live = [n for n in closure(o, _users, stop=branch) if n.users or n.op == "output"]
        if stream is not None and all(n in above for n in live) and src not in closure(
                branch, lambda n: [] if n is o else _inputs(n)):
            entry = (key, o, stream)
    if entry is None:
        why = "no module of its block takes the stream and feeds the branch alone"
        return {name: Span(name, None, 0, (), why) for name in exits}
    key, o_entry, stream = entry
    order = list(calls)
    body_keys = [k for k in order[order.index(key):] if any(n in above for n in calls[k])]
    body = list(dict.fromkeys(p for k in body_keys for n in calls[k] for p in _paths(n)[depth:]))
    inside = closure(o_entry, _users) & above
    problem = _extra(model, calls, body_keys, key, stream, inside, depth)
    if problem is None:
        problem = _batch_size_read(model, above, inside, from_src | {src}, add, depth)
    entry_path = _paths(calls[key][0])[depth]
    arg: int | str = 0
    if o_entry.op == "call_module" and o_entry.target == entry_path:
        where = [j for j, a in enumerate(o_entry.args) if a is stream]
        arg = where[0] if where else next(
            (k for k, a in o_entry.kwargs.items() if a is stream), 0)
    # a module called twice has a second key ("0.norm@1") for the same path
    times = Counter(p for p, _ in {(p, k) for n in graph.nodes
                                   for k, p in zip(_keys(n), _paths(n))})
    return {name: counted(Span(name, entry_path, arg, tuple(body), problem), times, model)
            for name in exits}


def _extra(model: nn.Module, calls: dict[str, list[fx.Node]], body_keys: list[str],
           entry: str, stream: fx.Node, inside: set[fx.Node], depth: int) -> str | None:
    """A module of the body that takes, beside the stream, a value computed from a model input
    but not from the branch's input."""
    for k in body_keys:
        members = set(calls[k])
        for n in calls[k]:
            for i in _inputs(n):
                if i in members or (k == entry and i is stream) or i.op == "get_attr" or (
                        k != entry and i in inside) or not _required(i):
                    continue
                path = _paths(calls[k][0])[depth]
                return (f"module {path!r} ({cls_name(model, path)}) takes {i.name!r}, a value "
                        f"not computed from the branch's input (an attention mask, a "
                        f"context?)")
    return None


def _batch_size_read(model: nn.Module, above: set[fx.Node], inside: set[fx.Node],
                     stream: set[fx.Node], add: fx.Node, depth: int) -> str | None:
    """A batch size of the full stream read by the branch (a reshape to it would fail, or
    worse, on the kept samples)."""
    for n in above:
        t = n.args[0] if _reads_shape(n) and n.args else None
        if not isinstance(t, fx.Node) or t not in stream or t in inside:
            continue
        for b in _batch_reads(n):
            if any(u in inside for u in closure(b, lambda m: list(m.users))):
                where = _paths(add)[depth - 1] if depth else "(root)"
                return (f"the branch reads the batch size of the stream ({t.name!r}) "
                        f"in {where!r} ({cls_name(model, where) if depth else 'model'}): it "
                        f"must take its batch size from its own input")
    return None
