"""``where="params"``: gradient transforms on the gradients of a module's parameters.

Plain parameters get a tensor hook acting on each backward's gradient before it is accumulated
into ``.grad``; sharded DTensor parameters (FSDP2's ``fully_shard``) get a post-accumulate-grad
hook acting on the reduce-scattered gradient shard, whose norms are those of the whole
parameter.
"""

from __future__ import annotations

import copy
import weakref

import torch
import torch.nn as nn
from torch.utils.hooks import RemovableHandle

from ..transforms import GradientTransform
from ._hooks import Hook

class _ParamGradHook:
    """Tensor hook on a parameter: transforms its gradient before accumulation into .grad."""

    def __init__(self, transform: GradientTransform, layer: str, param: torch.Tensor):
        self.transform = transform
        self.layer = layer
        self.param = weakref.ref(param)

    def __call__(self, grad: torch.Tensor) -> torch.Tensor:
        return self.transform._call_param(grad, self.layer, self.param())


class _ParamPostGradHook:
    """Post-accumulate-grad hook on a sharded (DTensor, FSDP2) parameter: FSDP2 assigns the
    reduce-scattered gradient shard to ``.grad`` and calls these hooks, not tensor hooks."""

    def __init__(self, transform: GradientTransform, layer: str):
        self.transform = transform
        self.layer = layer

    def __call__(self, param: torch.Tensor) -> None:
        if param.grad is not None:
            param.grad = self.transform._call_param(param.grad, self.layer, param)


def _is_dtensor(t: torch.Tensor) -> bool:
    return any(c.__name__ == "DTensor" for c in type(t).__mro__)


class ParamsHook(Hook):
    """Forward pre-hook for ``where="params"``; owns the tensor hooks on the parameters.

    Tensor hooks on parameters do not survive ``copy.deepcopy`` or pickling (torch drops them),
    and ``fully_shard`` replaces parameters, so each forward checks that they are installed on
    the module's current parameters and installs them if not: a copy of the model regains them
    at its first forward. Sharded DTensor parameters (FSDP2) get a post-accumulate-grad hook
    acting on the reduced gradient shard (norms of DTensors are global); plain parameters a
    tensor hook acting on each backward's gradient before accumulation.
    """

    where = "params"

    def __init__(self, transform: GradientTransform, name: str, param_names: list[str],
                 device: torch.device | None = None):
        super().__init__(transform, name, None, device)
        self.transform = transform
        self.param_names = param_names
        # id(param) -> (weakref to it, hook handle, parameter name)
        self._installed: dict[int, tuple[weakref.ref, RemovableHandle, str]] = {}
        self._sharded: set[str] = set()  # names whose parameter is an FSDP2 shard

    _TRANSIENT = ("_installed", "_sharded")

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_installed"], state["_sharded"] = {}, set()
        return state

    def __deepcopy__(self, memo: dict) -> "ParamsHook":
        new = ParamsHook.__new__(ParamsHook)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            new.__dict__[k] = type(v)() if k in self._TRANSIENT else copy.deepcopy(v, memo)
        return new

    def install(self, module: nn.Module) -> None:
        for pname in self.param_names:
            p = module.get_parameter(pname)
            known = self._installed.get(id(p))
            if known is not None and known[0]() is p:
                continue
            if _is_dtensor(p):
                # fully_shard replaced the parameter: drop the hooks left on the old one
                for key, (_, old, name) in list(self._installed.items()):
                    if name == pname:
                        old.remove()
                        del self._installed[key]
                self._sharded.add(pname)
                handle = p.register_post_accumulate_grad_hook(
                    _ParamPostGradHook(self.transform, self.name))
            elif pname in self._sharded:
                continue  # FSDP2's unsharded view during forward: the shard carries the hook
            else:
                handle = p.register_hook(_ParamGradHook(self.transform, self.name, p))
            self._installed[id(p)] = (weakref.ref(p), handle, pname)

    def uninstall(self) -> None:
        for ref, handle, _ in self._installed.values():
            if ref() is not None:
                handle.remove()
        self._installed.clear()

    def __call__(self, module: nn.Module, args: tuple) -> None:
        self.install(module)
        if torch.is_grad_enabled():
            self._count()
        return None
