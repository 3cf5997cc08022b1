"""32-bit ARM boards (Raspberry Pi OS 32-bit): hard-float artifacts, a runtime built from registry
sources, and tuner candidates run on an emulated armv7 board.

The emulated board is a Debian armhf rootfs whose binaries run under
``qemu-arm-static`` (``uname -m`` = armv7l, as on a Pi). No apache-tvm wheel
exists for armv7l and the wheel's runtime sources are incomplete, so the board
gets what ``edgetune runtime build --arch armv7l`` can build: tvm-ffi from its
sdist, which loads a TVM-built library and calls it as the runtime does. A
small driver (``harness/kernel_run.cc``) feeds it inputs and writes outputs back.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import te, topi
from tvm.s_tir.meta_schedule.builder import BuilderInput

from conftest import _missing, require_tool, run_cli
from edgetune.builder.builder import WarmBuilder, shared_library_linker
from edgetune.builder.builds import BUILT
from edgetune.builder.intrinsics import load_tensor_intrinsics
from edgetune.artifact.compile import compile_model, export_model
from edgetune.profile import load_profile
from edgetune.tasks import load_model
from harness import arm64_rootfs

HARNESS = Path(__file__).resolve().parent / "harness"
EM_ARM = 40
EF_ARM_ABI_FLOAT_HARD = 0x400


def _elf32_arm_hard_float(path: Path) -> tuple[bool, str]:
    header = path.read_bytes()[:52]
    machine = int.from_bytes(header[18:20], "little")
    flags = int.from_bytes(header[36:40], "little")
    ok = header[:4] == b"\x7fELF" and header[4] == 1 and machine == EM_ARM and bool(flags & EF_ARM_ABI_FLOAT_HARD)
    return ok, f"class {header[4]}, machine {machine}, flags {flags:#x}"


@pytest.fixture(scope="module")
def armv7_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``edgetune runtime build --arch armv7l`` builds (the real command; sources cached per machine)."""
    require_tool("arm-linux-gnueabihf-g++", "g++-arm-linux-gnueabihf")
    out = tmp_path_factory.mktemp("rt-armv7l")
    done = run_cli("runtime", "build", "--arch", "armv7l", "--out", str(out),
                   "--cache", str(arm64_rootfs.cache_root() / "runtime-build"), timeout=1200)
    assert (out / "lib" / "libtvm_ffi.so").exists(), done.stdout + done.stderr
    out.joinpath("cli.json").write_text(json.dumps({"rc": done.returncode, "stdout": done.stdout,
                                                    "stderr": done.stderr}))
    return out


@pytest.fixture(scope="module")
def armv7_board(armv7_runtime: Path) -> Path:
    """The emulated armv7 board: an armhf rootfs holding the runtime and the kernel driver."""
    missing = arm64_rootfs.missing_components()
    if missing:
        _missing("cannot build the emulated armv7 board: " + ", ".join(missing))
    try:
        rootfs = arm64_rootfs.build_rootfs(arch="armhf", include=())
    except RuntimeError as error:
        _missing(str(error))
    home = rootfs / "tmp" / f"edgetune-armv7-{uuid.uuid4().hex[:8]}"
    home.mkdir(parents=True)
    shutil.copy2(armv7_runtime / "lib" / "libtvm_ffi.so", home / "libtvm_ffi.so")
    subprocess.run(
        ["arm-linux-gnueabihf-g++", "-std=c++17", "-O1", "-rdynamic", "-o", str(home / "kernel_run"),
         str(HARNESS / "kernel_run.cc"), f"-I{armv7_runtime / 'include'}", f"-L{armv7_runtime / 'lib'}",
         "-ltvm_ffi", "-Wl,-rpath,$ORIGIN"],
        check=True, capture_output=True,
    )
    yield home
    shutil.rmtree(home, ignore_errors=True)


def _run_on_board(board: Path, library: Path, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Run ``main`` of ``library`` on the emulated board; every argument comes back as written by the kernel."""
    rootfs = board.parents[1]
    inside = Path("/") / board.relative_to(rootfs)
    call = uuid.uuid4().hex[:8]
    shutil.copy2(library, board / f"{call}.so")
    specs = []
    for i, array in enumerate(arrays):
        np.ascontiguousarray(array).tofile(board / f"{call}-{i}.bin")
        specs.append(f"{array.dtype}:{'x'.join(map(str, array.shape))}:{inside}/{call}-{i}.bin")
    done = subprocess.run(["chroot", str(rootfs), f"{inside}/kernel_run", f"{inside}/{call}.so", "main", *specs],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ran main with {len(arrays)} arguments"
    return [np.fromfile(board / f"{call}-{i}.bin.out", dtype=a.dtype).reshape(a.shape) for i, a in enumerate(arrays)]


def _workloads() -> dict[str, tuple[tvm.IRModule, list[tuple[int, ...]]]]:
    """conv2d, depthwise conv2d and dense as a CNN has them, each with a fused bias + ReLU epilogue."""
    data = te.placeholder((1, 8, 14, 14), name="data")
    weight = te.placeholder((16, 8, 3, 3), name="weight")
    bias = te.placeholder((1, 16, 1, 1), name="bias")
    conv = topi.nn.relu(topi.nn.conv2d_nchw(data, weight, 1, 1, 1) + bias)
    dw_weight = te.placeholder((8, 1, 3, 3), name="dw_weight")
    depthwise = topi.nn.depthwise_conv2d_nchw(data, dw_weight, 1, 1, 1)
    x = te.placeholder((4, 64), name="x")
    w = te.placeholder((32, 64), name="w")
    b = te.placeholder((32,), name="b")
    dense = topi.nn.relu(topi.nn.dense(x, w) + b)
    workloads = {"conv2d": [data, weight, bias, conv], "depthwise_conv2d": [data, dw_weight, depthwise],
                 "dense": [x, w, b, dense]}
    return {name: (tvm.IRModule({"main": te.create_prim_func(tensors)}),
                   [tuple(int(d) for d in t.shape) for t in tensors]) for name, tensors in workloads.items()}


def _tuner_candidates(mod: tvm.IRModule, target: tvm.target.Target, count: int) -> list[tvm.IRModule]:
    load_tensor_intrinsics(target)
    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                         search_strategy="replay-trace", task_name="armv7", num_threads=1, rand_state=3)
    ctx.pre_tuning(max_trials=count, num_trials_per_iter=count, design_spaces=ctx.generate_design_space(),
                   database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    return [c.sch.mod for c in ctx.generate_measure_candidates()]


def _host_reference(mod: tvm.IRModule, inputs: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray:
    """The same workload compiled for this host without a schedule: an independent path to the answer."""
    func = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    args = [tvm.runtime.tensor(a) for a in inputs] + [tvm.runtime.tensor(np.zeros(out_shape, "float32"))]
    func["main"](*args)
    return args[-1].numpy()


def test_armv7_profiles_export_hard_float_models(tmp_path: Path) -> None:
    """A whole model for rpi3-32 links with the gnueabihf toolchain into an ELF32 hard-float library."""
    require_tool("arm-linux-gnueabihf-g++", "g++-arm-linux-gnueabihf")
    profile = load_profile("rpi3-32")
    model = load_model("demo:tiny-cnn")
    path = export_model(compile_model(model.mod, profile.tvm_target()), tmp_path / "model.so", profile)
    ok, described = _elf32_arm_hard_float(path)
    assert ok, described


def test_runtime_build_from_registry_sources(armv7_runtime: Path) -> None:
    """libtvm_ffi is built for armv7; the TVM runtime's missing sources are named, in one line, exit 3."""
    ok, described = _elf32_arm_hard_float(armv7_runtime / "lib" / "libtvm_ffi.so")
    assert ok, described
    cli = json.loads((armv7_runtime / "cli.json").read_text())
    report = json.loads((armv7_runtime / "runtime-build.json").read_text())
    assert report["arch"] == "armv7l" and report["libtvm_ffi"] == "lib/libtvm_ffi.so"
    if report["libtvm_runtime"] is None:  # apache-tvm 0.27's wheel: its runtime sources lack TVM's support headers
        assert cli["rc"] == 3
        assert "include/tvm/support/io.h" in report["missing_sources"]
        error = cli["stderr"].strip()
        assert "\n" not in error and "cannot be built from registry sources" in error and "io.h" in error
        from tvm import _version  # the tree to build from: the commit the wheel says it was built from
        commit = _version.__commit_id__.removeprefix("g")
        assert report["apache_tvm_commit"] == commit and f"at the wheel's commit {commit}," in error
        assert "Traceback" not in cli["stderr"]
    else:
        assert cli["rc"] == 0 and report["missing_sources"] == []


def test_runtime_build_rejects_an_unknown_arch(tmp_path: Path) -> None:
    done = run_cli("runtime", "build", "--arch", "sparc", "--out", str(tmp_path / "rt"))
    assert done.returncode == 3
    assert done.stderr.strip() == "edgetune: error: --arch must be one of armv7l, aarch64, got 'sparc' instead"


@pytest.mark.parametrize("workload", ["conv2d", "depthwise_conv2d", "dense"])
def test_tuner_candidates_compute_correctly_on_the_emulated_armv7_board(armv7_board: Path, workload: str) -> None:
    """Candidates the tuner generates for rpi4-32, cross-compiled by the builder, match the host's answer."""
    profile = load_profile("rpi4-32")
    target = profile.tvm_target()
    mod, shapes = _workloads()[workload]
    candidates = _tuner_candidates(mod, target, count=2)
    assert len(candidates) == 2
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype("float32") for shape in shapes[:-1]]
    expected = _host_reference(mod, inputs, shapes[-1])
    with closing(WarmBuilder(cross_compiler=profile.build.cross_compiler, timeout_sec=120, max_workers=1)) as builder:
        results = builder.build([BuilderInput(c, target) for c in candidates])
        assert [r.error_msg for r in results] == [None, None]
        for candidate, result in zip(candidates, results):
            library = Path(str(result.artifact_path))
            if _rewrites_weight_layout(candidate):
                # The builder's artifact takes the weight already packed (the runner feeds it random
                # data); to check values, link the candidate with its packing block kept instead.
                library = library.with_name("with-packing.so")
                tvm.compile(candidate, target=target).export_library(
                    str(library), fcompile=shared_library_linker(profile.build.cross_compiler, ()))
            ok, described = _elf32_arm_hard_float(library)
            assert ok, described
            outputs = _run_on_board(armv7_board, library, [*inputs, np.full(shapes[-1], np.nan, "float32")])
            np.testing.assert_allclose(outputs[-1], expected, rtol=1e-4, atol=1e-4)
            for given, returned in zip(inputs, outputs):  # inputs are not written
                np.testing.assert_array_equal(given, returned)


def _rewrites_weight_layout(candidate: tvm.IRModule) -> bool:
    """Whether MetaSchedule's RewriteLayout packed a weight (a preprocessing block the builder strips)."""
    return "meta_schedule.layout_rewrite_preproc" in candidate.script()


def test_a_wrong_kernel_is_caught_on_the_board(armv7_board: Path) -> None:
    """The check can fail: a library computing something else gives other outputs; a bad call is an error."""
    profile = load_profile("rpi4-32")
    target = profile.tvm_target()
    x = te.placeholder((16,), name="x")
    y = te.compute((16,), lambda i: x[i] * 2.0, name="y")
    mod = tvm.IRModule({"main": te.create_prim_func([x, y])})
    with closing(WarmBuilder(cross_compiler=profile.build.cross_compiler, timeout_sec=120, max_workers=1)) as builder:
        (result,) = builder.build([BuilderInput(mod, target)])
        library = Path(str(result.artifact_path))
        data = np.arange(16, dtype="float32")
        outputs = _run_on_board(armv7_board, library, [data, np.zeros(16, "float32")])
        np.testing.assert_array_equal(outputs[1], data * 2.0)
        assert not np.array_equal(outputs[1], data * 3.0)
        with pytest.raises(AssertionError, match="kernel_run"):  # a shape the kernel refuses: its own error
            _run_on_board(armv7_board, library, [np.zeros(8, "float32"), np.zeros(8, "float32")])


def _dynamic_tags(library: Path) -> str:
    """The library's dynamic section as ``readelf -d`` prints it (binutils come with the compilers)."""
    return subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout


def test_a_candidate_needing_the_compilers_helpers_is_linked_directly_and_runs_on_the_board(armv7_board: Path) -> None:
    """64-bit division is a libgcc call on armv7 (``__divdi3``): the direct link must bring it.

    The builder links a candidate with the cross compiler's own ld and libgcc.a in place of the driver's
    libraries (build.candidate_link "direct"): no libgcc_s.so needed, the helper linked into the library
    itself. Through the driver it comes from libgcc_s instead.
    """
    profile = load_profile("rpi4-32")
    target = profile.tvm_target()
    a = te.placeholder((16,), name="a", dtype="int64")
    b = te.placeholder((16,), name="b", dtype="int64")
    quotient = te.compute((16,), lambda i: te.floordiv(a[i], b[i]), name="quotient")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, quotient])})
    numerators = np.array([7_000_000_000, -7_000_000_000, 2**40, -(2**40) - 1, 5, -5, 12, 10**12] * 2, dtype="int64")
    denominators = np.array([3, 7, -3, 5, 2, 2, -5, 10**6] * 2, dtype="int64")
    tags = {}
    for direct in (True, False):
        BUILT.clear()  # each link builds its own (the process would reuse the same module's artifact)
        with closing(WarmBuilder(cross_compiler=profile.build.cross_compiler, timeout_sec=120, max_workers=1,
                                 direct_link=direct)) as builder:
            (result,) = builder.build([BuilderInput(mod, target)])
            assert result.error_msg is None, result.error_msg
            library = Path(str(result.artifact_path))
            tags[direct] = _dynamic_tags(library)
            if direct:
                symbols = subprocess.run(["readelf", "-sW", str(library)], capture_output=True, text=True,
                                         check=True).stdout.splitlines()
                helper = [line.split() for line in symbols if line.endswith((" __aeabi_ldivmod", " __divdi3"))]
                assert helper and all(fields[6] != "UND" for fields in helper), helper  # linked in, from libgcc.a
            outputs = _run_on_board(armv7_board, library, [numerators, denominators, np.zeros(16, "int64")])
        np.testing.assert_array_equal(outputs[-1], numerators // denominators)
    assert "libgcc_s" not in tags[True], tags[True]
    assert "libgcc_s" in tags[False], tags[False]  # the driver's link, for contrast
