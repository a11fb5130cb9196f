"""Every public function of plugdrop.functional refuses integer and boolean tensors with the
same documented TypeError (naming the function, the dtype and the shape), before anything else
(even where it would return its input: p=0, training=False)."""

import pytest
import torch

import plugdrop as pd
from plugdrop import functional as F

INDEX = torch.tensor([1, 0])

#: each public function, called on a tensor ``x`` of shape (2, 4, 6, 6) and a float tensor
#: ``f`` of that shape (for the functions that take two tensors)
CALLS = {
    "drop_block": lambda x, f: F.drop_block(x, 0.1, 3),
    "dropout2d": lambda x, f: F.dropout2d(x, 0.1),
    "dropout": lambda x, f: F.dropout(x, 0.1),
    "drop_path": lambda x, f: F.drop_path(x, 0.1),
    "drop_token": lambda x, f: F.drop_token(x, 0.1, layout="channels_first"),
    "gaussian_noise": lambda x, f: F.gaussian_noise(x, 0.1),
    "clip_grad_value": lambda x, f: F.clip_grad_value(x, 0.1),
    "clip_grad_norm": lambda x, f: F.clip_grad_norm(x, 0.1),
    "scale_grad": lambda x, f: F.scale_grad(x, 0.1),
    "grad_noise": lambda x, f: F.grad_noise(x, 0.1),
    "mixup": lambda x, f: F.mixup(x, 0.3, INDEX),
    "cutmix": lambda x, f: F.cutmix(x, 0.3, INDEX),
    "drop_head": lambda x, f: F.drop_head(x, 0.1, 2),
    "clip_grad_adaptive": lambda x, f: F.clip_grad_adaptive(x, f),
    "centralize_grad": lambda x, f: F.centralize_grad(x, 0.5),
    "patchup": lambda x, f: F.patchup(x, 0.3, INDEX, 3),
}
#: the same, doing nothing to a float tensor (where the function has such a setting)
IDLE = {
    "drop_block": lambda x: F.drop_block(x, 0.1, 3, training=False),
    "dropout": lambda x: F.dropout(x, 0.0),
    "gaussian_noise": lambda x: F.gaussian_noise(x, 0.1, training=False),
    "centralize_grad": lambda x: F.centralize_grad(x, 0.0),
    "clip_grad_adaptive": lambda x: F.clip_grad_adaptive(torch.ones(4), x.flatten()[:4]),
}


def test_the_table_covers_every_public_function():
    assert sorted(CALLS) == sorted(F.__all__)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_integer_and_boolean_tensors_raise_the_documented_type_error(name, dtype):
    x = torch.ones(2, 4, 6, 6, dtype=dtype)
    f = torch.ones(2, 4, 6, 6)
    CALLS[name](f, f)  # a float tensor passes
    with pytest.raises(TypeError, match=rf"^{name} acts on floating-point tensors, got a "
                                        rf"{dtype} tensor of shape \(2, 4, 6, 6\) as [xg]; "
                                        rf"convert it with [xg]\.float\(\)"):
        CALLS[name](x, f)


@pytest.mark.parametrize("name", sorted(IDLE))
def test_integer_tensors_raise_even_where_nothing_would_be_done(name):
    with pytest.raises(TypeError, match=f"{name} acts on floating-point tensors"):
        IDLE[name](torch.ones(2, 4, 6, 6, dtype=torch.int64))


def test_a_non_tensor_raises_a_type_error_naming_the_argument():
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        F.gaussian_noise([1.0, 2.0], 0.1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="param must be a torch.Tensor"):
        F.clip_grad_adaptive(torch.ones(3), None)  # type: ignore[arg-type]


def test_the_transforms_raise_the_same_error_naming_the_layer():
    m = torch.nn.Sequential(torch.nn.Identity()).train()
    pd.attach(m, "0", pd.GaussianNoise(0.1))
    with pytest.raises(TypeError, match=r"layer '0'.*GaussianNoise acts on floating-point "
                                        r"activations, got a torch.int64 tensor"):
        m(torch.ones(2, 3, dtype=torch.int64))
