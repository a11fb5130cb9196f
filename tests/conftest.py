import math
import os

# Nothing in the suite may reach a network: the Hugging Face libraries are told so before any
# test imports them (models are built from configs, never downloaded).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import pytest
import torch
import torch.nn as nn

# Where no GPU is, the Triton kernels (plugdrop/_kernels/gpu) run on CPU tensors in the tests
# that ask for them, through Triton's interpreter, which must be chosen before Triton is first
# imported (torch.compile imports it).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # one worker per core (./dev test): one torch thread each, not two threads per core;
        # and so in the processes a test starts (a program, the bootstrap, a run's job): an
        # OpenMP team of two threads on a core the other worker keeps busy spins while it
        # waits for its second thread (a timm script's run took 74 s instead of 20 s)
        torch.set_num_threads(1)
        if not os.environ.get("OMP_NUM_THREADS", "").strip():
            os.environ["OMP_NUM_THREADS"] = "1"


#: tests that share one xdist worker: the cluster they use is started once per test process,
#: so in one worker it starts once (a Ray cluster and its workers cost about 30 s of CPU), and
#: the Slurm and Ray tests, which mostly wait for the scheduler or a retry, wait one at a time
#: while the other worker computes (in two groups, both workers waited at the start)
_GROUPS = {"slurm_cluster": "clusters", "ray_cluster": "clusters"}
#: the longest tests (a full run's --durations, longest first), started first, so that none
#: of them ends the run on one worker alone while the other has nothing left to do: the short
#: tests fill the end on both (xdist hands each worker its next test when it is almost done)
_FIRST = (
    "tests/ablate/test_demo.py::test_the_demos_verdict_replicates_on_seeds_it_never_used",
    "tests/test_docs.py::test_the_docs_build_offline_without_warnings",
    "tests/ablate/test_preemption.py::test_under_torchrun_every_rank_stops_at_the_same_step",
    "tests/ablate/test_unedited.py::test_the_bootstrap_attaches_to_a_factory_of_the_users_own",
    "tests/transforms/test_triton.py::test_every_kernel_compiles_for_an_h100",
    "tests/ablate/test_scripts.py::test_what_every_run_would_meet_is_refused_before_any_run",
    "tests/ablate/test_scripts.py::test_a_run_stopped_and_resumed_without_checkpoints_starts_clean",
    "tests/test_typing.py::test_mypy_is_clean_on_the_package",
    "tests/ablate/test_unedited.py::test_the_timm_style_example_runs_unedited",
    "tests/ablate/test_program_examples.py::test_a_training_script_is_an_ablation",
    "tests/ablate/test_scripts.py::test_a_script_that_defines_its_model_is_ablated_unedited",
    "tests/ablate/test_launch.py::test_data_parallel_run_through_torchrun_inside_a_submitit_job",
    "tests/ablate/test_faults.py::test_a_full_disk_under_the_processes_launcher",
    "tests/transforms/test_triton.py::TestDropBlockTriton::test_same_seed_same_mask_in_every_memory_layout_through_hooks",
    "tests/transforms/test_triton.py::TestDropout2dTriton::test_same_seed_same_mask_in_every_memory_layout_through_hooks",
    "tests/ablate/test_warm.py::test_a_script_without_a_main_guard_is_not_run_again_in_its_jobs",
    "tests/test_wheel.py::test_the_installed_wheel_works_without_the_repository",
    "tests/ablate/test_runner.py::test_compile_setting_trains_the_compiled_model_with_its_attachments",
    "tests/ablate/test_scripts.py::test_a_program_that_hands_its_spec_to_attach_all_leaves_its_receipt",
)
_RANK = {nodeid: i for i, nodeid in enumerate(_FIRST)}


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the marks to group the tests
def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, group in _GROUPS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(group))
    # stable: the rest keep their order (a parametrized test's cases: where its name is)
    items.sort(key=lambda item: _RANK.get(item.nodeid.split("[")[0], len(_FIRST)))


_UNGROUPED: list[str] = []


@pytest.hookimpl(optionalhook=True)  # an xdist hook: -p no:xdist must still work
def pytest_xdist_node_collection_finished(node, ids):
    """(In the controller) notice where ``--dist loadgroup`` does not group: pytest-xdist 3.8
    with pytest 9.2 (pytest-dev/pytest-xdist#1386) loses the group that it puts into the
    test's id. The tests still pass, but each test process starts a cluster of its own."""
    if (node.config.getvalue("dist") == "loadgroup" and not _UNGROUPED
            and any("/test_slurm.py::test_a_batch_job" in i for i in ids)
            and not any("@" in i for i in ids)):
        _UNGROUPED.append(f"--dist loadgroup does not group the tests here (pytest "
                          f"{pytest.__version__} with this pytest-xdist: "
                          "pytest-dev/pytest-xdist#1386), so each test process starts its own "
                          "Slurm and Ray clusters: pip install 'pytest<9.2' (the dev extra's pin)")


def pytest_terminal_summary(terminalreporter):
    for line in _UNGROUPED:
        terminalreporter.write_line(f"warning: {line}", yellow=True)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        return x + self.act(self.bn(self.conv(x)))


class Net(nn.Module):
    """A small ResNet-like model with the usual naming (stem, layerN.M, head)."""

    def __init__(self, c=8, classes=5):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.layer1 = nn.Sequential(Block(c), Block(c))
        self.layer2 = nn.Sequential(Block(c), Block(c))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(self.pool(x).flatten(1))


@pytest.fixture
def one_thread():
    """One torch thread, as in the runner's subprocesses and every launcher's job
    (OMP_NUM_THREADS=1): the same float summation order."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def net():
    return Net()


def sigma_tol(samples: torch.Tensor, k: float = 5.0) -> float:
    """k standard errors of the mean of independent ``samples`` (floored for tiny variance)."""
    n = samples.numel()
    return k * max(samples.double().std().item(), 1e-3) / math.sqrt(n)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="store the numbers of tests/golden as the new golden ones (a "
                          "deliberate change of numbers, committed on its own with the reason)")


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


def memory_layouts(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """The values of ``x`` (``(B, C, *spatial)``, 1 to 3 spatial dims) in several memory
    orders: contiguous, channels-last, and views no kernel takes as they are (a channels-last
    view with gaps between the pixels, every other element of a wider tensor, a view at an
    offset, the last two dims swapped in memory, the batch innermost). Each equals ``x``."""
    b, c = x.shape[:2]
    out = {"contiguous": x.contiguous()}
    if x.dim() in (4, 5):
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        out["channels_last"] = x.contiguous(memory_format=fmt)
    wide = torch.zeros(b, *x.shape[2:], c + 3, dtype=x.dtype, device=x.device)
    wide[..., :c] = x.movedim(1, -1)
    out["channels_last_with_gaps"] = wide[..., :c].movedim(-1, 1)
    double = torch.zeros(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype, device=x.device)
    double[..., ::2] = x
    out["every_other_element"] = double[..., ::2]
    bigger = torch.zeros(b + 1, c + 1, *x.shape[2:], dtype=x.dtype, device=x.device)
    bigger[1:, 1:] = x
    out["offset_view"] = bigger[1:, 1:]
    if x.dim() >= 4:
        out["last_dims_swapped"] = x.transpose(-1, -2).contiguous().transpose(-1, -2)
    out["batch_innermost"] = x.movedim(0, -1).contiguous().movedim(-1, 0)
    for name, v in out.items():
        assert torch.equal(v, x), name
    return out


def triton_path(monkeypatch: pytest.MonkeyPatch) -> str:
    """Send the DropBlock, Dropout2d and noise kernels to Triton: on CUDA where a GPU is (the
    caller's tensors must be there), else on CPU tensors through the interpreter; skip where
    Triton cannot run. Returns the device the tests should use."""
    from plugdrop._kernels import gpu

    if not gpu.available():
        pytest.skip("Triton is not installed here")
    if torch.cuda.is_available():
        return "cuda"
    if not gpu.interpreted():
        pytest.skip("Triton's interpreter was not chosen before Triton was imported "
                    "(TRITON_INTERPRET=1)")
    monkeypatch.setattr(gpu, "ON_CPU", True)
    _unsanitized_interpreter()
    reason = _interpreter_fails()
    if reason:
        pytest.skip(reason)
    return "cpu"


_INTERPRETER: list[str] = []


def _interpreter_fails() -> str:
    """Why this Triton's interpreter cannot run the kernels ("" where it can): each kernel
    tried once on a tiny tensor, as a GPU's first use tries them (Triton 3.0, torch 2.4's,
    cannot: its interpreter takes no literal int as ``tl.arange``'s bounds)."""
    if not _INTERPRETER:
        from plugdrop._kernels import gpu

        try:
            gpu._probe(torch.device("cpu"))
            _INTERPRETER.append("")
        except Exception as e:
            import triton

            first = (str(e).strip().splitlines() or [""])[0][:200]
            _INTERPRETER.append(f"Triton {triton.__version__}'s interpreter cannot run the "
                                f"kernels ({type(e).__name__}: {first}); on a GPU they are "
                                f"tried at first use")
    return _INTERPRETER[0]


def _unsanitized_interpreter() -> None:
    """Triton's interpreter checks every 32-bit integer product for overflow, an assertion
    that only fires in its debug mode (and the kernels' hashes wrap on purpose): switched off
    here, the interpreted kernels run 1.7x as fast, with the same results."""
    try:
        import dataclasses

        from triton.runtime import interpreter

        builder = interpreter.interpreter_builder
        if builder.options.sanitize_overflow:
            builder.options = dataclasses.replace(builder.options, sanitize_overflow=False)
    except (ImportError, AttributeError, TypeError):  # another Triton: only slower
        pass
