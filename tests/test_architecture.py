"""The layout's rules, checked: hooks only in the attachment layer, torch's private names only in
the compatibility module (which must still find every one in the installed torch), and a public
surface without the attachment's internals."""

from __future__ import annotations

import functools
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


# Writing a file: an open for writing, write_text/write_bytes, torch.save or savefig to a path.
WRITES = re.compile(
    r"\bopen\([^)]*[\"'](w|a|x|r\+|wb|ab|xb|a\+|w\+)[b+]?[\"']"
    r"|\.write_(text|bytes)\(|\btorch\.save\(|\.savefig\((?!buf)")

#: where the runner writes other than through its one writer, and why
RUNNER_WRITES = {
    "ablate/runs/files.py": "the one writer",
    "ablate/runs/locks.py": "flock needs an open file; failures become StorageError",
    "ablate/launch/processes.py": "a job's log: the child process streams into it",
    "ablate/config/reference.py": "./dev docs rewrites docs/reference/settings.md (a developer tool)",
}


def test_the_runner_writes_only_through_its_one_writer():
    """Every file of an ablation folder goes through ``ablate/runs/files.py`` (a temporary
    file, fsync, rename; a failed write is one line): no other module of the runner
    writes a file, but those named with their reason."""
    assert _offences(WRITES, lambda rel: not rel.startswith("ablate/")
                     or rel in RUNNER_WRITES) == []


# Reading code back: unpickling, torch.load (allowed once: as data, weights_only=True), YAML's
# object-building loaders, NumPy's pickled arrays, and the modules that unpickle by design.
READS_CODE = re.compile(
    r"\bpickle\.(load|loads|Unpickler)\b|\bweights_only\s*=\s*False|\btorch\.load\("
    r"|\byaml\.(load|unsafe_load|full_load|load_all|unsafe_load_all)\(|\ballow_pickle\s*=\s*True"
    r"|\b(import|from)\s+(marshal|shelve|dill|cloudpickle|joblib)\b|\.Unpickler\(")


def test_nothing_plugdrop_reads_back_is_unpickled():
    """What plugdrop reads (above all from a shared ``--out``: checkpoints, the stored config,
    records) is data, never code (SECURITY.md): no unpickling anywhere in the package, and
    ``torch.load`` only in ``ablate/runs/checkpoints.py``, with ``weights_only=True``."""
    assert _offences(READS_CODE, lambda rel: rel == "ablate/runs/checkpoints.py") == []
    reader = (PACKAGE / "ablate" / "runs" / "checkpoints.py").read_text()
    loads = [line for line in reader.splitlines() if "torch.load(" in line.split("#")[0]]
    assert loads and all("weights_only=True" in line for line in loads), loads
    assert not re.search(r"weights_only\s*=\s*False|pickle\.loads?\(", reader)


def test_the_checks_catch_what_they_look_for():
    for bad in ('open(path, "w")', "open(p, 'ab')", 'open(x, "a+")', "p.write_text(s)",
                "torch.save(state, path)", "fig.savefig(path, dpi=120)"):
        assert WRITES.search(bad), bad
    for good in ('open(path)', 'open(p, "rb")', "fig.savefig(buf, format='png')"):
        assert not WRITES.search(good), good
    for bad in ("cfg = pickle.loads(blob)", "pickle.load(f)", "torch.load(p, weights_only=False)",
                "torch.load(path)", "yaml.load(text, Loader=yaml.Loader)", "yaml.unsafe_load(t)",
                "np.load(p, allow_pickle=True)", "import dill", "from cloudpickle import loads",
                "pickle.Unpickler(f).load()"):
        assert READS_CODE.search(bad), bad
    for good in ("json.loads(text)", "yaml.compose(text, Loader=_Loader)", "pickle.dumps(x)",
                 "yaml.safe_load(text)", "load_checkpoint(path)"):
        assert not READS_CODE.search(good), good
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
    marked = torch.compiler.assume_constant_result(lambda: 1)  # what constant_result copies
    assert getattr(marked, _compat._CONSTANT_MARK) is True
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


# ------------------------------------------------------------------ ARCHITECTURE.md's rules

ROOT = PACKAGE.parent
MAX_LINES = 400


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@functools.lru_cache(maxsize=None)
def _nodes(path: Path) -> tuple:
    """Every node of the file's syntax tree (``ast.walk``'s order), parsed once per test
    process: several tests here read the whole package."""
    import ast

    return tuple(ast.walk(ast.parse(path.read_text())))


def _imports(modules: dict[str, Path] = MODULES, top: str = "plugdrop"
             ) -> tuple[dict[str, set[str]], list[str]]:
    """Module -> the plugdrop modules it imports (lazy imports included), and every private
    name one module takes from another (``from .x import _y``, ``x._y`` of an imported
    module)."""
    import ast

    edges: dict[str, set[str]] = {m: set() for m in modules}
    private: list[str] = []
    for mod, path in modules.items():
        tree = _nodes(path)
        base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        bound: dict[str, str] = {}
        for node in tree:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == top:
                        edges[mod].add(a.name)
                        bound[a.asname or top] = a.name if a.asname else top
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parent = base[:len(base) - node.level + 1]
                    target = ".".join(parent + ([node.module] if node.module else []))
                elif (node.module or "").split(".")[0] == top:
                    target = node.module or ""
                else:
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in modules:
                        edges[mod].add(sub)
                        bound[a.asname or a.name] = sub
                    else:
                        edges[mod].add(target)
                        if a.name.startswith("_") and not a.name.startswith("__"):
                            private.append(f"{mod} imports {a.name} from {target}")
        for node in tree:
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in bound and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                    and f"{bound[node.value.id]}.{node.attr}" not in modules):
                private.append(f"{mod} uses {bound[node.value.id]}.{node.attr}")
        edges[mod].discard(mod)
    return edges, private


def _layers() -> tuple[dict[str, int], dict[str, int]]:
    """The two layer tables of ARCHITECTURE.md: library ranks and the tools' room ranks."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    block = text.split("```layers\n", 1)[1].split("```", 1)[0]
    tables: list[dict[str, int]] = []
    for line in block.splitlines():
        if line.startswith("#"):
            tables.append({})
            continue
        rank, _, *names = line.split()
        tables[-1].update({name: int(rank) for name in names})
    return tables[0], tables[1]


def _rank(table: dict[str, int], mod: str) -> int | None:
    """The rank of the longest name of ``table`` that is ``mod`` or a package holding it."""
    best = max((n for n in table if mod == n or mod.startswith(n + ".")), key=len, default=None)
    return None if best is None else table[best]


def test_every_module_has_a_layer():
    library, tools = _layers()
    assert [m for m in MODULES if _rank(library, m) is None] == []
    tool_modules = [m for m in MODULES if _rank(library, m) == library["plugdrop.ablate"]]
    assert [m for m in tool_modules if _rank(tools, m) is None] == []


def test_imports_go_down_the_layers_and_tools_use_the_public_api():
    library, tools = _layers()
    tool = library["plugdrop.ablate"]
    edges, _ = _imports()
    wrong = []
    for mod, targets in edges.items():
        for t in targets:
            rm, rt = _rank(library, mod), _rank(library, t)
            assert rm is not None and rt is not None, (mod, t)
            if rm == tool and rt < tool and t != "plugdrop":
                wrong.append(f"{mod} -> {t} (the tools use `import plugdrop` only)")
            elif rm == tool and rt == tool and _rank(tools, t) > _rank(tools, mod):  # type: ignore[operator]
                wrong.append(f"{mod} -> {t} (up the runner's rooms)")
            elif rt > rm:
                wrong.append(f"{mod} -> {t} (up the layers)")
    assert wrong == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk of the import graph meets (a package's face counts as a
    module: a module that imports its own package's face closes a cycle)."""
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    return cycles


def test_the_import_graph_has_no_cycle():
    edges, _ = _imports()
    assert _cycles(edges) == []


def test_no_file_is_over_400_lines():
    long = {m: n for m, p in MODULES.items()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_no_private_name_is_taken_from_another_module():
    _, private = _imports()
    assert private == []


def test_the_rule_checks_catch_what_they_look_for(tmp_path):
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("from .sub import b\n_hidden = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import _hidden\n"
                                      "    from .. import a\n    return a._hidden\n")
    modules = {_module_name(p, tmp_path): p for p in sorted(pkg.rglob("*.py"))}
    edges, private = _imports(modules, "toy")
    assert edges["toy.a"] == {"toy.sub.b"} and edges["toy.sub.b"] == {"toy.a"}
    assert _cycles(edges) == [["toy.a", "toy.sub.b", "toy.a"]]
    assert private == ["toy.sub.b imports _hidden from toy.a", "toy.sub.b uses toy.a._hidden"]
    library, tools = _layers()
    assert _rank(library, "plugdrop._kernels.blockdrop") == library["plugdrop._kernels"]
    assert _rank(tools, "plugdrop.ablate.study.jobs") == tools["plugdrop.ablate.study"]
    assert _rank(library, "plugdrop.ablate.runs.files") == library["plugdrop.ablate"]
    assert _rank(library, "plugdrop_other") is None


@pytest.mark.slow
def test_importing_plugdrop_imports_no_compiler():
    """``import plugdrop`` stays cheap for an eager user (and every job of an ablation): it
    loads no part of torch.compile (dynamo alone costs seconds); compiling loads it. A job of
    Slurm or Ray (which unpickles its callable from the launchers' package) loads no part of
    the report either: scipy and matplotlib are the driver's. Nor does a process that starts
    ``plugdrop ablate`` (a torchrun rank, a launcher's job) import scipy before it decides
    (a second of each one's start)."""
    import os
    import subprocess
    import sys

    code = ("import sys, plugdrop\n"
            "loaded = sorted(m for m in sys.modules if m.startswith(('torch._dynamo', "
            "'torch._inductor')))\n"
            "import plugdrop.ablate.launch.submitit, plugdrop.ablate.launch.ray\n"
            "loaded += sorted(m for m in sys.modules if m.startswith(("
            "'plugdrop.ablate.report', 'scipy', 'matplotlib')))\n"
            "import plugdrop.cli, plugdrop.cli.ablate, plugdrop.ablate.study, "
            "plugdrop.ablate.execute, plugdrop.ablate.worker, plugdrop.ablate.decide\n"
            "loaded += sorted(m for m in sys.modules if m.startswith(('scipy', 'matplotlib')))\n"
            "sys.exit(f'loaded: {loaded[:5]}' if loaded else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]


# ----------------------------------------------------------------------- one study loop

STUDY = "plugdrop.ablate.study"


def _defs(kind: type, pick: callable) -> list[str]:
    """``module:name`` of every node of ``kind`` in the package that ``pick`` accepts."""
    out = []
    for mod, path in MODULES.items():
        for node in _nodes(path):
            if isinstance(node, kind) and (name := pick(node)):
                out.append(f"{mod}:{name}")
    return out


def test_the_decisions_import_nothing_of_the_report_the_launchers_or_the_driver():
    edges, _ = _imports()
    wrong = [f"{m} -> {t}" for m, targets in edges.items()
             if m.startswith("plugdrop.ablate.decide") for t in targets
             if t.startswith(("plugdrop.ablate.report", "plugdrop.ablate.launch",
                              "plugdrop.ablate.study", "plugdrop.ablate.programs",
                              "plugdrop.ablate.execute", "plugdrop.ablate.worker",
                              "plugdrop.ablate.train", "plugdrop.ablate.search"))]
    assert wrong == []


def test_one_outcome_type_one_run_state_one_round_loop_one_claim_one_manifest():
    """What the study driver owns is defined once: the outcome of a study, the run's state
    (the word "failed" is a run's state in one place; the ending of an attempt and a
    candidate's state reuse it), the loop that asks a strategy for rounds, the dispatch of a
    round to a launcher, the folder's lock, and ``ablation.json``'s record."""
    import ast

    outcomes = _defs(ast.ClassDef, lambda n: n.name if n.name.endswith("Outcome") else None)
    assert outcomes == [f"{STUDY}.outcome:Outcome"]
    def failed(n: ast.AST) -> str | None:  # "failed" given to a name, or compared with
        values = ([n.value] if isinstance(n, (ast.Assign, ast.AnnAssign)) else
                  n.comparators if isinstance(n, ast.Compare) else [])
        for v in values:
            for c in ([v] if not isinstance(v, ast.Tuple) else v.elts):
                if isinstance(c, ast.Constant) and c.value == "failed":
                    return "failed"
        return None

    assert _defs(ast.AST, failed) == ["plugdrop.ablate.runs.state:failed"]
    calls = lambda name: _defs(ast.Call, lambda n: name if (  # noqa: E731
        getattr(n.func, "attr", None) or getattr(n.func, "id", None)) == name else None)
    assert calls("next_round") == [f"{STUDY}.driver:next_round"]
    assert calls("dispatch") == [f"{STUDY}.driver:dispatch"]
    assert sorted({c for c in calls("Lock") if c.startswith("plugdrop.ablate")}) == [
        f"{STUDY}.driver:Lock"]  # the folder's lock (threading's elsewhere)
    def record(n: ast.Dict) -> str | None:  # a folder's record: its hash and its runs
        keys = {k.value for k in n.keys if isinstance(k, ast.Constant)}
        return "record" if {"config_hash", "runs", "variants"} <= keys else None

    assert sorted(_defs(ast.Dict, record)) == [
        "plugdrop.ablate.report.write:record",  # results.json
        f"{STUDY}.folder:record"]  # ablation.json
    assert not (PACKAGE / "ablate" / "runner.py").exists()
    assert not (PACKAGE / "ablate" / "search" / "runner.py").exists()
