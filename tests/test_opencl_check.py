"""OpenCL kernels built for the Mali and generic mobile-GPU profiles run on a real OpenCL implementation (pocl).

The device code is the bundled profile's (``rk3399-mali``: Mali-T860's limits;
``opencl``: an Adreno-class GPU); only the host code is built for this machine
instead of the board's aarch64, so that it can run here and launch the kernels
with the geometry it computes. Every kernel is compared with the same workload
built for the CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import _missing

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def opencl_device():
    """This host's OpenCL device: skip without one locally, fail without it in CI."""
    try:
        import pyopencl as cl
    except ImportError:
        _missing("pyopencl is not installed (pip install -e '.[opencl]')")
    try:
        devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    except cl.Error:
        devices = []
    if not devices:
        _missing("no OpenCL device (apt-get install pocl-opencl-icd)")
    return devices[0]


@pytest.fixture(scope="module")
def mali():
    return _gpu_profile("rk3399-mali")


def _small_cnn():
    """conv 3x3, max pool, depthwise conv 3x3, pointwise conv, global average pool, dense."""
    from edgetune.tasks.demo import _GraphBuilder

    g = _GraphBuilder(7)
    x = g.relu(g.conv("input", 3, 16, 3))
    x = g.maxpool(x)
    x = g.relu(g.conv(x, 16, 16, 3, group=16))
    x = g.relu(g.conv(x, 16, 32, 1))
    return g.model("small_cnn", "input", 16, g.classifier(x, 32, 10), 10)


def _gpu_profile(name: str):
    """The bundled profile, with its host code built for this machine so that it runs here."""
    import tvm

    from edgetune.profile import load_profile

    profile = load_profile(name)
    return profile, tvm.target.Target(profile.target, host={"kind": "llvm"})


def _tasks(target):
    import tvm.s_tir.meta_schedule as ms
    from tvm.relax.frontend.onnx import from_onnx

    from edgetune.tasks import prepare_for_tuning

    mod = prepare_for_tuning(from_onnx(_small_cnn(), keep_params_in_input=False), target)
    return {task.task_name: task.dispatched[0] for task in ms.relax_integration.extract_tasks(mod, target)}


def _kind(workload) -> str:
    from edgetune.tasks.signature import block_names

    blocks = set(block_names(workload))
    if "group_conv2d_nchw" in blocks:
        return "depthwise conv2d"  # the model's only grouped convolution has one group per channel
    if "conv2d_nchw" in blocks:
        return "conv2d"
    if "matmul" in blocks:
        return "dense"
    if "pool_max" in blocks or any(name.endswith("_red") for name in blocks):
        return "pooling"  # max pool, and global average pool (a mean)
    return "other"


def _tuner_candidates(workload, target, count: int):
    """Schedules as the tuner builds them: MetaSchedule's design space for the target, sampled, postprocessed."""
    import tvm.s_tir.meta_schedule as ms

    found = []
    for seed in range(1, 60):
        context = ms.TuneContext(mod=workload, target=target, space_generator="post-order-apply", task_name="t", rand_state=seed)
        schedule = context.space_generator.generate_design_space(workload)[0]
        if all(postproc.apply(schedule) for postproc in context.space_generator.postprocs):
            found.append(schedule.mod)
        if len(found) == count:
            break
    assert found, "no candidate passed MetaSchedule's postprocessors"
    return found


def _untuned(workload, target):
    """What the untuned build runs on a GPU target: the default schedules of TVM's GPU pipeline (dlight)."""
    import tvm
    from tvm.relax.backend.gpu_generic import legalize_passes

    default_schedules = legalize_passes(target)[-1]  # dl.ApplyDefaultSchedule(gpu rules), as relax.build runs it
    copy = tvm.IRModule(dict(workload.functions.items()))  # the pass updates the module it is given
    with target, tvm.transform.PassContext(opt_level=3):
        return default_schedules(copy)


def _cpu_reference(workload, args):
    import tvm

    built = tvm.compile(workload, target=tvm.target.Target({"kind": "llvm"}))
    tensors = [tvm.runtime.tensor(a) for a in args]
    built(*tensors)
    return [t.numpy() for t in tensors]


@pytest.mark.parametrize("profile_name", ["rk3399-mali", "opencl"])
def test_tuned_and_untuned_kernels_of_a_small_cnn_match_on_pocl(opencl_device, profile_name):
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from edgetune.builder.opencl_check import DeviceLimits, check_device_limits, read_opencl_program
    from edgetune.builder.opencl_host import HostOpenCL

    profile, target = _gpu_profile(profile_name)
    limit = int(profile.target["max_threads_per_block"])
    rng = np.random.default_rng(0)
    checked: dict[str, int] = {}
    with HostOpenCL(limits=DeviceLimits.from_target(tvm.target.Target(profile.target))) as device:
        for name, workload in _tasks(target).items():
            kind = _kind(workload)
            if kind == "other":
                continue
            args = [np.asarray(rng.uniform(-1, 1, [int(n) for n in a.shape])).astype(a.dtype)
                    for a in ArgInfo.from_prim_func(workload["main"])]
            reference = _cpu_reference(workload, args)
            for scheduled in [_untuned(workload, target), *_tuner_candidates(workload, target, 2)]:
                built = tvm.compile(scheduled, target=target)
                check_device_limits(scheduled, built, device.effective_limits)
                kernels = read_opencl_program(built).kernels
                launched = len(device.launches)
                outputs = device.run(built, args, scheduled=scheduled)
                assert {launch.name for launch in device.launches[launched:]} == set(kernels), name
                for launch in device.launches[launched:]:
                    assert int(np.prod(launch.local_size)) <= limit, (name, launch)  # the profile's work-group limit
                np.testing.assert_allclose(outputs[-1], reference[-1], rtol=1e-4, atol=1e-4, err_msg=f"{name} ({kind})")
                checked[kind] = checked.get(kind, 0) + 1
    assert set(checked) == {"conv2d", "depthwise conv2d", "dense", "pooling"}, checked
    assert all(count >= 3 for count in checked.values()), checked  # untuned + 2 tuned per task


def _elementwise(threads: int, n: int = 1024):
    """``B = A + 1`` with ``threads`` work-items per work-group."""
    import tvm
    import tvm.s_tir as s_tir
    from tvm import te

    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] + 1.0, name="B")
    schedule = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    (loop,) = schedule.get_loops(schedule.get_sblock("B"))
    outer, inner = schedule.split(loop, [None, threads])
    schedule.bind(outer, "blockIdx.x")
    schedule.bind(inner, "threadIdx.x")
    return schedule.mod


def test_the_built_module_carries_kernel_metadata_and_launch_geometry(opencl_device, mali):
    import tvm

    from edgetune.builder.opencl_check import read_opencl_program
    from edgetune.builder.opencl_host import HostOpenCL

    _profile, target = mali
    built = tvm.compile(_elementwise(128), target=target)
    program = read_opencl_program(built)
    assert list(program.kernels) == ["main_kernel"]
    info = program.kernels["main_kernel"]
    assert info.arg_types == ("handle64", "handle64")
    assert info.launch_param_tags == ("blockIdx.x", "threadIdx.x")
    assert "__kernel void main_kernel(" in program.source
    a = np.arange(1024, dtype="float32")
    with HostOpenCL() as device:
        _a, b = device.run(built, [a, np.zeros_like(a)])
        assert device.launches[-1].global_size == (1024,) and device.launches[-1].local_size == (128,)
        np.testing.assert_array_equal(b, a + 1)
        # the module stays whole, and a second run on new buffers uses them (TVM caches kernel lookups)
        assert read_opencl_program(built).kernels == program.kernels
        _a, b = device.run(built, [2 * a, np.zeros_like(a)])
        np.testing.assert_array_equal(b, 2 * a + 1)
        assert len(device.launches) == 2


def test_the_builder_rejects_a_candidate_over_the_devices_work_group_limit(mali):
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from edgetune.builder.builder import WarmBuilder

    profile, target = mali
    target = type(target)(profile.target, host={"kind": "llvm"})
    builder = WarmBuilder(max_workers=1)
    try:
        over, fits = builder.build([BuilderInput(_elementwise(512), target), BuilderInput(_elementwise(256), target)])
    finally:
        builder.close()
    assert over.artifact_path is None
    assert "512 threads per work-group" in over.error_msg and "at most 256" in over.error_msg, over.error_msg
    assert fits.error_msg is None and fits.artifact_path


def test_a_launch_over_the_limits_is_refused_before_it_runs(opencl_device):
    import tvm

    from edgetune.errors import DeviceLimitError
    from edgetune.builder.opencl_check import DeviceLimits
    from edgetune.builder.opencl_host import HostOpenCL

    generic = tvm.target.Target({"kind": "opencl", "max_threads_per_block": 1024}, host={"kind": "llvm"})
    built = tvm.compile(_elementwise(512), target=generic)
    small = DeviceLimits("a 128-thread GPU", max_threads_per_block=128, max_shared_memory_bytes=16384, source="test")
    a = np.zeros(1024, dtype="float32")
    with HostOpenCL(limits=small) as device, pytest.raises(DeviceLimitError, match="512 work-items per work-group"):
        device.run(built, [a, a.copy()])
    assert device.launches == []


def test_no_opencl_platform_is_one_clear_error(opencl_device, mali):
    import tvm

    from edgetune.errors import OpenCLUnavailableError
    from edgetune.builder.opencl_host import HostOpenCL

    _profile, target = mali
    built = tvm.compile(_elementwise(64), target=target)
    with pytest.raises(OpenCLUnavailableError, match="pocl-opencl-icd") as raised:
        HostOpenCL(platform="no-such-platform").run(built, [np.zeros(1024, "float32")] * 2)
    assert "\n" not in str(raised.value)
