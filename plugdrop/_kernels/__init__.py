"""Kernels: vectorized mask generation per device. Private: the public entry points are in
:mod:`plugdrop.functional`.

Everything here works on channels-first tensors ``(B, C, *spatial)`` with 1 to 3 spatial dims;
nothing synchronizes host and device on CUDA.

- :mod:`.geometry`  coverage counts, the exact seed probability, rescaling maps
- :mod:`.draws`     Bernoulli draws (sparse geometric gaps on CPU)
- :mod:`.dense`     the dense block mask (CUDA, ``torch.compile``)
- :mod:`.autograd`  autograd functions with small saved state, sparse block zeroing
- :mod:`.cext`      the optional fused C kernel (``_csrc/blockdrop.c``)
"""

from . import autograd, cext, dense, draws, geometry

__all__ = ["autograd", "cext", "dense", "draws", "geometry"]
