"""Building and loading the fused C kernels (``_csrc/blockdrop.c``). Private.

Built at first use with the system C compiler (``cc``; a fraction of a second, no PyTorch
headers) into a per-user cache, and loaded with ctypes (:func:`library`). Where the Python
headers are found, the same library also holds ``_csrc/pycall.c`` and is imported as a Python
module (:func:`extension`): the kernel's call from Python without ctypes' argument conversion
and libffi (most of a foreign call's cost on a small tensor). A library that cannot be built
with it (no headers, a compiler that fails on them) is built without it, and ctypes makes the
same calls. Where no compiler is found, the build fails, or ``PLUGDROP_NO_CEXT=1`` is set,
:func:`library` returns ``None``.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import warnings
from pathlib import Path
from types import ModuleType

import torch

SOURCE = Path(__file__).with_name("_csrc") / "blockdrop.c"
#: the CPython entry point, compiled into the same library where the headers are found
PY_SOURCE = SOURCE.with_name("pycall.c")
#: the module name ``pycall.c`` defines (its ``PyInit__plugdrop_cext``)
MODULE = "_plugdrop_cext"

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_ext: ModuleType | None = None
_tried = False


def _cache_dir() -> Path:
    base = os.environ.get("PLUGDROP_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME") \
        or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "plugdrop"


def _cpu_capability() -> str:
    try:
        return torch.backends.cpu.get_cpu_capability()
    except Exception:  # pragma: no cover - older torch
        return "DEFAULT"


def _torch_uses_libgomp() -> bool:
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return False
    return "libgomp" in maps and "libiomp" not in maps


def python_include() -> Path | None:
    """The directory of ``Python.h`` for this interpreter, if the headers are installed."""
    include = sysconfig.get_paths().get("include")
    if include and (Path(include) / "Python.h").is_file():
        return Path(include)
    return None


def _compile(compiler: str, flags: list[str], sources: list[Path], target: Path) -> str | None:
    """Compile ``sources`` into ``target`` (atomically: concurrent builders do not clash);
    the compiler's error output if it failed, else ``None``. Without OpenMP in the compiler,
    ``-fopenmp`` is dropped (plain threads)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        args = [*flags, *map(str, sources), "-o", str(out)]
        proc = subprocess.run([compiler, *args], capture_output=True, text=True)
        if proc.returncode != 0 and "-fopenmp" in flags:
            proc = subprocess.run([compiler, *(a for a in args if a != "-fopenmp")],
                                  capture_output=True, text=True)
        if proc.returncode != 0:
            return proc.stderr
        os.replace(out, target)
    return None


def _with_python(compiler: str, flags: list[str], key: str) -> Path | None:
    """The library built with the CPython entry point (cached, as is a failure to build it:
    a marker file, so that a later process does not try again); ``None`` where it cannot be
    built here."""
    include = python_include()
    if include is None:
        return None
    abi = (sysconfig.get_config_var("SOABI") or sys.version).encode()
    py_key = hashlib.sha256(key.encode() + PY_SOURCE.read_bytes() + abi
                            + str(include).encode()).hexdigest()[:16]
    target = _cache_dir() / f"blockdrop-py-{py_key}.so"
    failed = target.with_suffix(".failed")
    if target.exists():
        return target
    if failed.exists():
        return None
    if _compile(compiler, [*flags, f"-I{include}"], [SOURCE, PY_SOURCE], target) is not None:
        failed.touch()
        return None
    return target


def _build() -> tuple[ctypes.CDLL | None, ModuleType | None]:
    if os.environ.get("PLUGDROP_NO_CEXT", "") not in ("", "0"):
        return None, None
    if sys.platform.startswith("win"):
        return None, None
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") \
        or shutil.which("clang")
    if compiler is None:
        return None, None
    source = SOURCE.read_bytes()
    flags = ["-O3", "-shared", "-fPIC", "-pthread", "-fno-math-errno"]
    if _cpu_capability() in ("AVX2", "AVX512") and platform.machine() in ("x86_64", "AMD64"):
        flags += ["-mavx2", "-mfma"]  # the file name below is keyed by the flags
    if _torch_uses_libgomp():
        # Linked against libgomp.so.1, the kernel binds to the libgomp PyTorch already loaded
        # and runs on PyTorch's own worker threads (separate threads would fight its spinning
        # workers for the cores).
        flags.append("-fopenmp")
    key = hashlib.sha256(source + " ".join([compiler, *flags]).encode()
                         + sysconfig.get_platform().encode()).hexdigest()[:16]
    target = _with_python(compiler, flags, key)
    if target is None:
        target = _cache_dir() / f"blockdrop-{key}.so"
        if not target.exists():
            error = _compile(compiler, flags, [SOURCE], target)
            if error is not None:
                warnings.warn("plugdrop: building the fused DropBlock kernel failed; using "
                              "the torch-op path.\n" + error[-2000:], RuntimeWarning,
                              stacklevel=3)
                return None, None
    lib = ctypes.CDLL(str(target))
    _declare(lib)
    try:
        return lib, _import(target)
    except Exception:  # an interpreter that refuses the module: ctypes makes the calls
        return lib, None


def _import(path: Path) -> ModuleType | None:
    """The CPython module of the library at ``path`` (the library ctypes loaded: the same
    kernel and state), or ``None`` if it has none."""
    if not path.name.startswith("blockdrop-py-"):
        return None
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
    if spec is None:  # pragma: no cover - a path importlib does not take
        return None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _declare(lib: ctypes.CDLL) -> None:
    """The kernel's entry points' argument and result types."""
    fn = lib.plugdrop_blockdrop_packed
    i64 = ctypes.c_int64
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, i64, i64]
    fn.restype = ctypes.c_int
    keyed = lib.plugdrop_blockdrop_key
    keyed.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                      ctypes.c_void_p]
    keyed.restype = ctypes.c_int
    noise = lib.plugdrop_noise
    noise.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, i64, i64, i64,
                      ctypes.c_double, ctypes.c_int]
    noise.restype = ctypes.c_int
    lib.plugdrop_isa.argtypes = [ctypes.c_int]
    lib.plugdrop_isa.restype = ctypes.c_int


def library() -> ctypes.CDLL | None:
    """The loaded kernel library, or ``None`` if it cannot be had here."""
    global _lib, _ext, _tried
    if not _tried:
        with _lock:
            if not _tried:
                try:
                    _lib, _ext = _build()
                except Exception as e:  # a broken toolchain must never break training
                    warnings.warn(f"plugdrop: fused DropBlock kernel unavailable ({e}); using "
                                  f"the torch-op path.", RuntimeWarning, stacklevel=2)
                    _lib, _ext = None, None
                _tried = True
    return _lib


def extension() -> ModuleType | None:
    """The kernel library's CPython module (``keyed``: ``pycall.c``), or ``None`` where the
    library was built without it (or not at all)."""
    library()
    return _ext
