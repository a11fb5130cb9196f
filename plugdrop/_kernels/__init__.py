"""Kernels: vectorized mask generation per device. Private: the public entry points are in
:mod:`plugdrop.functional`.

The kernels work on channels-first tensors ``(B, C, *spatial)`` with 1 to 3 spatial dims (the
dispatch modules below view other layouts as such); nothing synchronizes host and device on
CUDA.

- :mod:`.geometry`  coverage counts, the exact seed probability, rescaling maps
- :mod:`.draws`     Bernoulli draws (sparse geometric gaps on CPU)
- :mod:`.dense`     the dense block mask (CUDA, ``torch.compile``)
- :mod:`.autograd`  autograd functions with small saved state, sparse block zeroing
- :mod:`.cext`      the optional fused C kernel (``_csrc/blockdrop.c``)
- :mod:`.gpu`       the Triton kernels for accelerators (DropBlock with the C kernel's seeds,
  noise), imported only where Triton is
- :mod:`.ops`       the fused kernel as a custom op (what ``torch.compile`` traces)

Each op's dispatch (which of the above serves a call, its plans and caches, the hooks' eager
fast paths) is in one file: :mod:`.blockdrop` (DropBlock, Dropout2d), :mod:`.masks` (DropPath,
Dropout), :mod:`.noise` (Gaussian noise).
"""

from . import autograd, cext, dense, draws, geometry

__all__ = ["autograd", "cext", "dense", "draws", "geometry"]
