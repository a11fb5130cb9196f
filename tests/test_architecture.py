"""The layout's rules, checked: hooks only in the attachment layer, torch's private names only in
the compatibility module (which must still find every one in the installed torch), and a public
surface without the attachment's internals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from plugdrop import _compat

PACKAGE = Path(pd.__file__).parent

HOOK_API = re.compile(r"\.register_\w*hook\w*\s*\(")
PRIVATE_TORCH = re.compile(
    r"\btorch\._[A-Za-z]\w*"                                    # torch._dynamo, torch._C ...
    r"|\.(_forward_\w*hooks\w*|_backward_\w*hooks|_modules|_parameters|_buffers)\b"
    r"|\b(_orig_mod|_checkpoint_wrapped_module|_fsdp_wrapped_module|_get_scale_async)\b"
)


def _offences(pattern: re.Pattern, allowed: callable) -> list[str]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if allowed(rel):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if pattern.search(code):
                out.append(f"plugdrop/{rel}:{i}: {line.strip()}")
    return out


def test_hook_apis_are_used_only_in_the_attachment_layer():
    assert _offences(HOOK_API, lambda rel: rel.startswith("_attach/")) == []


def test_private_torch_names_are_used_only_in_the_compat_module():
    assert _offences(PRIVATE_TORCH, lambda rel: rel == "_compat.py") == []


def test_the_checks_catch_what_they_look_for():
    assert HOOK_API.search("module.register_forward_hook(h)")
    assert HOOK_API.search("x.register_hook(fn)")
    assert HOOK_API.search("p.register_post_accumulate_grad_hook(fn)")
    assert not HOOK_API.search("registered_hooks = []")
    for bad in ("from torch._dynamo.utils import counters", "m._forward_hooks.pop(k)",
                "m._modules.items()", "getattr(w, '_orig_mod')", "s._get_scale_async()"):
        assert PRIVATE_TORCH.search(bad), bad
    assert not PRIVATE_TORCH.search("self._settings[name]")


def test_every_private_torch_name_still_exists():
    m = nn.Linear(2, 2)
    for name in _compat.HOOK_DICTS + _compat._HOOK_FLAG_DICTS:
        assert isinstance(getattr(m, name), dict), name
    key = m.register_forward_hook(lambda *a: None, with_kwargs=True, always_call=True).id
    _compat.pop_hook(m, key)
    assert not any(key in getattr(m, n) for n in _compat.HOOK_DICTS + _compat._HOOK_FLAG_DICTS)
    assert _compat.compiled_frames() is not None
    assert hasattr(torch.amp.GradScaler, "_get_scale_async")
    assert callable(torch._dynamo.mark_static_address)
    assert _compat.WRAPPERS["OptimizedModule"] in vars(torch.compile(nn.Linear(1, 1)))["_modules"]
    from torch.distributed.algorithms._checkpoint import checkpoint_wrapper as cw

    wrapped = cw.checkpoint_wrapper(nn.Linear(1, 1))
    assert type(wrapped).__name__ in _compat.WRAPPERS
    assert isinstance(getattr(wrapped, _compat.WRAPPERS[type(wrapped).__name__]), nn.Linear)
    fsdp = pytest.importorskip("torch.distributed.fsdp._common_utils")
    assert fsdp.FSDP_WRAPPED_MODULE == _compat.WRAPPERS["FullyShardedDataParallel"]


def test_attach_only_methods_are_private():
    for cls in (pd.Transform, pd.ForwardTransform, pd.GradientTransform, pd.ManifoldMixup,
                pd.DropBlock, pd.ClipGradNorm):
        for name in ("at", "begin", "set_step", "call_param", "apply_param", "prepare"):
            assert not hasattr(cls, name), f"{cls.__name__}.{name} should be private"


def test_public_names_import_and_are_documented():
    for name in pd.__all__:
        obj = getattr(pd, name)
        if name != "__version__":
            assert (obj.__doc__ or "").strip(), f"plugdrop.{name} has no docstring"


def test_errors_are_value_errors_with_one_base():
    for cls in (pd.SettingError, pd.ShapeError, pd.SelectorError, pd.AttachError):
        assert issubclass(cls, pd.PlugdropError) and issubclass(cls, ValueError)
    with pytest.raises(pd.SettingError):
        pd.DropBlock(1.5)
    with pytest.raises(pd.ShapeError):
        pd.functional.drop_block(torch.ones(2, 3), 0.1)
    with pytest.raises(pd.SelectorError):
        pd.select(nn.Sequential(nn.Linear(1, 1)), "nope")
    with pytest.raises(pd.AttachError):
        pd.attach(nn.Sequential(nn.ReLU()), "0", pd.ClipGradNorm(1.0), where="params")
