"""Residual branches found by running the model once (or, without an example input, by
tracing it symbolically with torch.fx): the modules whose output is added to a shortcut of the
block that calls them (where DropPath belongs).

One forward of an example input (in eval mode, under autograd, the model restored after)
records, through forward pre-hooks and hooks, which module returned which tensor and which
module was running; a ``TorchFunctionMode`` sees every tensor addition. An addition ``a + b``
made inside module ``S`` is a residual connection when one operand (the branch) was returned
by a module inside ``S`` and the other (the shortcut) is an autograd ancestor of it (an
identity shortcut, ``x + f(x)``) or was returned by a module inside ``S`` whose input is such
an ancestor (a projection shortcut, ``downsample(x) + f(x)``). The branch module is the
outermost module inside ``S`` that returned the branch tensor (``drop_path1`` in a timm ViT
block, ``bn2`` in a torchvision ResNet block, ``mlp`` in ``x + self.mlp(x)``).
"""

from __future__ import annotations

import operator
import weakref
from typing import Any

import torch.fx as fx

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from .. import _selection
from ..errors import AttachError
from . import _fxspans, _spans

_ADDS = {torch.add, torch.Tensor.add, torch.Tensor.add_, torch.Tensor.__add__,
         torch.Tensor.__radd__, torch.Tensor.__iadd__}

#: model -> the residual branches found by its last analysis
_FOUND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: model -> modules whose output is a branch's output unchanged (``mlp`` under an identity
#: ``drop_path``): DropPath there is the same as on the branch
_SAME: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: models torch.fx could not trace (not tried again)
_UNTRACEABLE: weakref.WeakSet = weakref.WeakSet()


def _node(t: torch.Tensor, leaves: dict[int, Any]) -> Any:
    return t.grad_fn if t.grad_fn is not None else leaves.get(id(t))


def _is_ancestor(short: torch.Tensor, branch: torch.Tensor, leaves: dict[int, Any]) -> bool:
    """Whether ``short`` is ``branch`` or an autograd ancestor of it."""
    if short is branch:
        return True
    target = _node(short, leaves)
    return target is not None and _spans.reaches(branch.grad_fn, target, variable=short)


class _Recorder:
    def __init__(self, model: nn.Module) -> None:
        self.stack: list[str] = []
        self.produced: dict[int, list[str]] = {}  # id(tensor) -> modules that returned it
        self.inputs: dict[str, torch.Tensor] = {}
        self.keep: list[torch.Tensor] = []          # keeps ids valid during the forward
        self.leaves: dict[int, Any] = {}
        self.branches: set[str] = set()
        self.same: set[str] = set()
        self.spans = _spans.RunSpans(model, self.leaves)

    def _inside(self, name: str) -> bool:
        scope = self.stack[-1] if self.stack else ""
        return name != scope and (scope == "" or name.startswith(scope + "."))

    def _branch_module(self, t: torch.Tensor) -> str | None:
        names = [n for n in self.produced.get(id(t), []) if self._inside(n)]
        return names[-1] if names else None  # the last to return it: the outermost

    def on_add(self, a: torch.Tensor, b: torch.Tensor) -> None:
        for branch, short in ((b, a), (a, b)):
            name = self._branch_module(branch)
            if name is None:
                continue
            src = short if _is_ancestor(short, branch, self.leaves) else self._projection(
                short, branch)
            if src is not None:
                self.branches.add(name)
                exits = [n for n in self.produced.get(id(branch), []) if self._inside(n)]
                self.same.update(exits)
                self.spans.branch(self.stack[-1] if self.stack else "", exits, branch, src)
                return

    def _projection(self, short: torch.Tensor, branch: torch.Tensor) -> torch.Tensor | None:
        """The input of the projection that returned ``short``, if ``branch`` comes from it."""
        proj = self._branch_module(short)
        x = self.inputs.get(proj) if proj is not None else None
        return x if x is not None and _is_ancestor(x, branch, self.leaves) else None


class _Pre:
    def __init__(self, rec: _Recorder, name: str) -> None:
        self.rec, self.name = rec, name

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.rec.stack.append(self.name)
        self.rec.spans.start(self.name, args, kwargs)
        for a in args:
            if isinstance(a, torch.Tensor):
                self.rec.inputs[self.name] = a
                self.rec.keep.append(a)
                break


class _Post:
    def __init__(self, rec: _Recorder, name: str) -> None:
        self.rec, self.name = rec, name

    def __call__(self, module: nn.Module, args: tuple, output: Any) -> None:
        rec = self.rec
        if rec.stack and rec.stack[-1] == self.name:
            rec.stack.pop()
        rec.spans.end(self.name, output)
        if isinstance(output, torch.Tensor):
            rec.produced.setdefault(id(output), []).append(self.name)
            rec.keep.append(output)


class _AddWatch(TorchFunctionMode):
    def __init__(self, rec: _Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        if (func in _ADDS and len(args) >= 2 and isinstance(args[0], torch.Tensor)
                and isinstance(args[1], torch.Tensor)):
            self.rec.on_add(args[0], args[1])
        return func(*args, **(kwargs or {}))


def _grad_input(x: Any, rec: _Recorder) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        x = x.detach().requires_grad_()
        rec.keep.append(x)
        y = x.view_as(x)  # its AccumulateGrad node, to recognise the input as a shortcut
        rec.leaves[id(x)] = y.grad_fn.next_functions[0][0] if y.grad_fn is not None else None
        return x
    if isinstance(x, (tuple, list)):
        return type(x)(_grad_input(v, rec) for v in x)
    if isinstance(x, dict):
        return {k: _grad_input(v, rec) for k, v in x.items()}
    return x


def find(model: nn.Module, example_input: Any) -> list[str]:
    """The residual branches of ``model``, in ``named_modules()`` order (see the module doc)."""
    entries = [e for e in _selection.walk(model) if not e.wrapper]
    rec = _Recorder(model)
    handles = []
    for e in entries:
        if e.name:
            handles.append(e.module.register_forward_pre_hook(_Pre(rec, e.name),
                                                              with_kwargs=True))
            handles.append(e.module.register_forward_hook(_Post(rec, e.name)))
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        inputs = _grad_input(example_input, rec)
        with torch.enable_grad(), _AddWatch(rec):
            output = _spans.run(model, inputs)
        spans = rec.spans.finish(output)
        for h in handles:
            h.remove()
        handles = []
        _spans.probe_empty(model, example_input, spans)
    except Exception as e:
        where = rec.stack[-1] if rec.stack else ""
        module = dict((en.name, en.module) for en in entries).get(where, model)
        raise AttachError(
            f"residual_branches could not run {type(model).__name__} on the example input: "
            f"it failed in module {where or '(root)'!r} ({type(module).__name__}): "
            f"{type(e).__name__}: {e}") from e
    finally:
        for h in handles:
            h.remove()
        for m, training in modes:
            m.training = training
    found = [e.name for e in entries if e.name in rec.branches]
    _FOUND[model] = found
    _SAME[model] = rec.same
    _spans.store(model, spans)
    return found


def known(model: nn.Module) -> list[str] | None:
    """The branches found by the last analysis of ``model`` (``None``: never analysed)."""
    return _FOUND.get(model)


def equivalent(model: nn.Module, name: str) -> bool:
    """Whether DropPath on module ``name`` acts as on a residual branch: a branch, a module
    inside one, or one whose output reaches a branch unchanged (through identities)."""
    found = _FOUND.get(model) or []
    return name in _SAME.get(model, ()) or any(
        name == b or name.startswith(b + ".") for b in found)


# ------------------------------------------------------------------- symbolic (torch.fx)

_FX_ADDS = {operator.add, operator.iadd, torch.add}
_FX_METHODS = {"add", "add_", "__add__", "__radd__", "__iadd__"}


class _Tracer(fx.Tracer):
    """An fx tracer that remembers the module it was in when tracing failed."""

    def __init__(self) -> None:
        super().__init__()
        self.failed_in: str | None = None

    def call_module(self, m: nn.Module, forward: Any, args: Any, kwargs: Any) -> Any:
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception:
            if self.failed_in is None:
                self.failed_in = self.path_of_module(m)
            raise


def _stack(node: fx.Node) -> list[str]:
    return [path for path, _ in node.meta.get("nn_module_stack", {}).values()]


def _fx_ancestors(node: fx.Node) -> set[fx.Node]:
    return _fxspans.closure(node, lambda n: list(n.all_input_nodes))


def _below(node: fx.Node, scope: list[str]) -> str | None:
    """The module just inside ``scope`` that produced ``node``."""
    stack = _stack(node)
    if stack[:len(scope)] != scope or len(stack) <= len(scope):
        return None
    return stack[len(scope)]


def _module_inputs(node: fx.Node, path: str) -> list[fx.Node]:
    """The nodes from outside module ``path`` that its computation of ``node`` reads."""
    out, seen, todo = [], set(), [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if path in _stack(n):
            todo.extend(n.all_input_nodes)
        else:
            out.append(n)
    return out


def find_symbolic(model: nn.Module) -> list[str]:
    """:func:`find` without an example input, by tracing ``model`` with torch.fx."""
    tracer = _Tracer()
    try:
        with torch.no_grad():  # plugdrop's hooks stay idle on fx proxies (see _hooks)
            graph = tracer.trace(model)
    except Exception as e:
        where = tracer.failed_in
        raise AttachError(
            f"residual_branches could not trace {type(model).__name__} symbolically (torch.fx)"
            f"{'' if where is None else f': it failed in module {where!r}'}: "
            f"{type(e).__name__}: {e}. Pass an example input, "
            f"plugdrop.residual_branches(model, x), which runs the model instead") from e
    branches: set[str] = set()
    same: set[str] = set()
    spans: dict[str, _spans.Span] = {}
    for node in graph.nodes:
        is_add = (node.op == "call_function" and node.target in _FX_ADDS) or (
            node.op == "call_method" and node.target in _FX_METHODS)
        if not is_add or len(node.args) < 2 or not all(
                isinstance(a, fx.Node) for a in node.args[:2]):
            continue
        scope = _stack(node)
        a, b = node.args[0], node.args[1]
        for branch, short in ((b, a), (a, b)):
            name = _below(branch, scope)
            if name is None:
                continue
            ancestors = _fx_ancestors(branch)
            proj = _below(short, scope)
            src = short if short in ancestors else None
            if src is None and proj is not None and proj != name:
                inputs = _module_inputs(short, proj)
                if inputs and all(i in ancestors for i in inputs):
                    src = inputs[0]
            if src is not None:
                branches.add(name)
                exits = _through_identities(branch, scope, model)
                same.update(exits)
                spans.update(_fxspans.graph_spans(graph, model, node, branch, src,
                                                [*sorted(exits), name]))
                break
    found = [e.name for e in _selection.walk(model) if not e.wrapper and e.name in branches]
    _FOUND[model] = found
    _SAME[model] = same
    _spans.store(model, spans)
    return found


def _through_identities(node: fx.Node, scope: list[str], model: nn.Module) -> set[str]:
    """Modules inside ``scope`` whose output reaches ``node`` through ``nn.Identity`` calls."""
    out: set[str] = set()
    while node.op == "call_module" and isinstance(model.get_submodule(str(node.target)),
                                                  nn.Identity) and node.all_input_nodes:
        node = node.all_input_nodes[0]
        name = _below(node, scope)
        if name is None:
            break
        out.add(name)
    return out



def try_symbolic(model: nn.Module) -> list[str] | None:
    """:func:`find_symbolic`, or ``None`` when torch.fx cannot trace the model (remembered)."""
    if model in _UNTRACEABLE:
        return None
    try:
        return find_symbolic(model)
    except AttachError:
        _UNTRACEABLE.add(model)
        return None
