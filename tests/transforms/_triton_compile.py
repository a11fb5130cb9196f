"""Compile every Triton kernel of plugdrop for a GPU target, on a machine without a GPU:
``python tests/transforms/_triton_compile.py ARCH`` (90: an H100/H200) prints one line per
compiled launch and exits non-zero at the first kernel that does not compile.

Triton's interpreter runs the kernels' code but compiles nothing, and a compiled kernel differs:
an integer argument equal to 1 becomes a constant (``x.to(...)`` on it fails), types are checked
for the GPU, loops are lowered. Here the launches that plugdrop makes for a set of tensors are
intercepted and compiled as the JIT would compile them (the same specialization of each
argument) down to the GPU's binary (Triton's own ``ptxas``; no GPU, no driver). For the row
kernel it also prints how the compiled pass reads ``x`` (vector or 16-bit loads) and rounds
to bfloat16. Run it in a process without ``TRITON_INTERPRET``."""

from __future__ import annotations

import sys

import torch
import triton
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend, GPUTarget
from triton.compiler import ASTSource

_POINTERS = {torch.float32: "*fp32", torch.float64: "*fp64", torch.bfloat16: "*bf16",
             torch.float16: "*fp16", torch.int32: "*i32", torch.int64: "*i64"}


class _Recorder:
    """Stands for a kernel: ``kernel[grid](*args, **constexprs)`` compiles it for the target."""

    def __init__(self, kernel, target: GPUTarget, seen: set) -> None:
        self.kernel, self.target, self.seen = kernel, target, seen

    def __getitem__(self, grid):
        return self.launch

    def launch(self, *args, **constexprs):
        fn = self.kernel
        names = fn.arg_names
        values = dict(zip(names, args)) | constexprs
        no_spec = {names[i] if isinstance(i, int) else i for i in fn.do_not_specialize}
        signature, consts, attrs = {}, {}, {}
        for i, name in enumerate(names):
            v = values[name]
            if name in constexprs:
                signature[name], consts[(i,)] = "constexpr", v
            elif isinstance(v, torch.Tensor):
                signature[name] = _POINTERS[v.dtype]
                attrs[(i,)] = [["tt.divisibility", 16]]
            elif isinstance(v, float):
                signature[name] = "fp32"
            else:
                kind, align = native_specialize_impl(BaseBackend, v, False, name not in no_spec,
                                                     True)
                if kind == "constexpr":
                    signature[name], consts[(i,)] = "constexpr", align
                else:
                    signature[name] = kind
                    if align == "D":
                        attrs[(i,)] = [["tt.divisibility", 16]]
        key = (fn.__name__, tuple(sorted(signature.items())), tuple(sorted(consts.items())))
        if key in self.seen:
            return
        self.seen.add(key)
        compiled = triton.compile(ASTSource(fn, signature, consts, attrs), target=self.target)
        print(f"compiled {fn.__name__}: "
              + ", ".join(f"{k}={v}" for k, v in signature.items() if v != "constexpr"))
        if fn.__name__ == "_rows_kernel":  # how its pass reads x and rounds (the test checks)
            ptx = compiled.asm["ptx"]
            print(f"memory of _rows_kernel W={values['W']} {signature['x_ptr']} "
                  f"{'scaled' if values['HAS_SCALE'] else 'unscaled'}: "
                  f"{ptx.count('ld.global.v')} vector loads, {ptx.count('ld.global.b16')} "
                  f"16-bit loads, {ptx.count('cvt.rn.bf16')} rounding conversions")


def main(arch: int) -> None:
    from plugdrop._kernels import cext, geometry
    from plugdrop._kernels.gpu import blockdrop, noise, rows, seeds

    target = GPUTarget("cuda", arch, 32)
    seen: set = set()
    for module, name in [(seeds, "_seeds_kernel"), (rows, "_rows_kernel"),
                         (rows, "_rows_cl_kernel"), (blockdrop, "_apply_kernel"),
                         (noise, "_noise_kernel")]:
        setattr(module, name, _Recorder(getattr(module, name), target, seen))
    # Seeds and the passes: 1-D, 2-D, 3-D maps; per channel and shared; contiguous and
    # channels-last; block as large as the map (sizes of 1 become constants); wide maps;
    # every float dtype; with and without a scale.
    cases = [((2, 3, 12, 12), (3, 3), False), ((2, 3, 12, 12), (5, 5), True),
             ((2, 3, 7, 7), (7, 7), False), ((4, 2, 40), (7,), False),
             ((2, 2, 5, 6, 7), (2, 3, 2), False), ((1, 1, 9, 9), (1, 1), True),
             ((2, 2, 4, 70), (1, 40), False), ((2, 2, 4, 70), (3, 3), True)]
    several = (1, 6)  # the geometries compiled in every dtype, with and without a scale
    key = (1, 2)
    on_device = torch.tensor(key, dtype=torch.int64)  # the key read on the device (CUDA graphs)
    for n, (shape, blocks, shared) in enumerate(cases):
        sizes = shape[2:]
        valid = tuple(s - b + 1 for s, b in zip(sizes, blocks))
        q = geometry.solve_keep(0.1, sizes, blocks)
        th = cext.thresholds(1 - q)
        channels = 1 if shared else shape[1]
        # every dtype and no scale (rescale="none") on two geometries; float32 on the others
        dtypes = [torch.float32, torch.bfloat16, torch.float64] if n in several \
            else [torch.float32]
        if n == several[0]:
            dtypes.append(torch.float16)
        for dtype in dtypes:
            x = torch.empty(shape, dtype=dtype)
            layouts = [x]
            if x.dim() in (4, 5):
                layouts.append(x.contiguous(memory_format=torch.channels_last if x.dim() == 4
                                            else torch.channels_last_3d))
            scale = geometry.scale_map(q, sizes, blocks, "cpu", torch.float32)
            if dtype == torch.float64:
                scale = scale.double()
            for xx in layouts:
                for s in ((scale, None) if n in several else (scale,)):
                    call = blockdrop.prepare(xx, s, th, channels, valid, blocks)
                    call(xx, *key)
                    if n == 0 and dtype == torch.float32:
                        call(xx, on_device)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        for multiplicative in (False, True):
            noise.noise(torch.empty(4, 8, dtype=dtype), (1, 2 ** 31 + 3), 0.1, multiplicative)
            if dtype == torch.float32:
                noise.noise(torch.empty(4, 8, dtype=dtype), (on_device,), 0.1, multiplicative)
    print(f"{len(seen)} kernels compiled for sm_{arch}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 90)
