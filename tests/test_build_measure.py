"""The warm builder, the tracker runner and the resume cache against a real loopback board."""

from __future__ import annotations

import os
from contextlib import closing

import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import te
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import RunnerInput

from conftest import require_tool
from edgetune.builder.builder import CachedArtifact, WarmBuilder
from edgetune.builder.builds import BUILT
from edgetune.builder.intrinsics import families_for_target, load_tensor_intrinsics
from edgetune.history import open_history
from edgetune.measure.runner import MeasureConfig, TrackerRunner
from edgetune.tuning import CandidateCache

HOST = tvm.target.Target({"kind": "llvm", "num-cores": 2})
AARCH64 = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "mattr": ["+neon"], "num-cores": 2})


def matmul_mod(n: int = 64) -> tvm.IRModule:
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


@pytest.fixture(autouse=True)
def fresh_builds():
    """Each test builds for itself: the process keeps every module it built (builder.builds.BUILT), so a
    candidate an earlier test built would be reused, never timed out or counted as built."""
    from edgetune.builder.builds import BUILT

    BUILT.clear()
    yield
    BUILT.clear()


@pytest.fixture(scope="module")
def candidates():
    """Real MetaSchedule candidates for a 64x64 matmul on the host target."""
    load_tensor_intrinsics(HOST)
    ctx = ms.TuneContext(
        mod=matmul_mod(), target=HOST, space_generator="post-order-apply",
        search_strategy="replay-trace", task_name="mm", num_threads=2, rand_state=7,
    )
    ctx.pre_tuning(
        max_trials=4, num_trials_per_iter=4, design_spaces=ctx.generate_design_space(),
        database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel(),
    )
    found = ctx.generate_measure_candidates()
    assert found and len(found) == 4
    return ctx, found


def test_intrinsic_families_follow_the_target():
    assert families_for_target(AARCH64) == ("arm_cpu",)
    assert families_for_target(tvm.target.Target({"kind": "cuda", "arch": "sm_80"}, host={"kind": "llvm"})) == ("cuda",)
    assert families_for_target(tvm.target.Target({"kind": "opencl", "device": "mali"}, host={"kind": "llvm"})) == ()


def test_builder_builds_and_runner_measures(candidates, loopback_board):
    ctx, found = candidates
    with closing(WarmBuilder(timeout_sec=60, max_workers=2)) as builder:
        results = builder.build([BuilderInput(c.sch.mod, HOST) for c in found])
        assert [r.error_msg for r in results] == [None] * len(found)
        assert all(os.path.exists(str(r.artifact_path)) for r in results)
        assert builder.stats.built == len(found) and builder.stats.timed_out == 0
        runner = TrackerRunner(loopback_board, config=MeasureConfig(evaluator="fixed", number=2, repeat=2, min_repeat_ms=0))
        try:
            inputs = [RunnerInput(r.artifact_path, "cpu", c.args_info) for r, c in zip(results, found)]
            # a missing artifact in the middle fails as data and does not stop the batch
            inputs.insert(1, RunnerInput("/nonexistent/candidate.so", "cpu", found[0].args_info))
            outcome = [f.result() for f in runner.run(inputs)]
        finally:
            runner.close()
        assert outcome[1].run_secs is None and "TrackerRunner" in str(outcome[1].error_msg)
        measured = [o for i, o in enumerate(outcome) if i != 1]
        assert all(o.error_msg is None and len(o.run_secs) == 2 for o in measured)
        assert all(0 < float(s) < 1 for o in measured for s in o.run_secs)
        assert runner.stats.measured == len(found) and runner.stats.failed == 1
        assert runner.stats.device_seconds > 0
    # close() leaves the artifacts to the process: the next builder asked for the same modules reuses them
    assert all(os.path.exists(str(r.artifact_path)) for r in results)
    with closing(WarmBuilder(timeout_sec=60, max_workers=2)) as again:
        reused = again.build([BuilderInput(c.sch.mod, HOST) for c in found])
    assert [str(r.artifact_path) for r in reused] == [str(r.artifact_path) for r in results]
    assert again.stats.reused == len(found) and again.stats.built == 0


def _worker_pids(builder: WarmBuilder) -> set[int]:
    builder.start()
    return {builder._pool.submit(os.getpid).result() for _ in range(8)}


def test_a_closed_builders_workers_serve_the_next_builder_of_its_settings(candidates, monkeypatch):
    """A benchmark, a zoo build or a test session runs many tunes in one process: each used to start its workers."""
    _ctx, found = candidates
    first = WarmBuilder(timeout_sec=61, max_workers=1)
    pids = _worker_pids(first)
    first.close()
    with closing(WarmBuilder(timeout_sec=61, max_workers=1)) as second:
        assert _worker_pids(second) == pids  # the same warm worker
        (result,) = second.build([BuilderInput(found[0].sch.mod, HOST)])
        assert result.error_msg is None and os.path.exists(str(result.artifact_path))
    # other settings, or another environment (what the workers inherit), start their own; one idle pool at most
    with closing(WarmBuilder(timeout_sec=62, max_workers=1)) as other:
        assert _worker_pids(other).isdisjoint(pids)
    monkeypatch.setenv("EDGETUNE_TEST_WORKER_ENV", "1")
    with closing(WarmBuilder(timeout_sec=61, max_workers=1)) as changed:
        assert _worker_pids(changed).isdisjoint(pids)
    from edgetune.builder import builder as module

    assert len(module._idle_pools) == 1
    stopped = WarmBuilder(timeout_sec=63, max_workers=1)
    stopped.start()
    stopped.close(keep_workers=False)
    assert len(module._idle_pools) == 1 and stopped._pool is None


def test_build_timeout_is_data_and_workers_recover(candidates):
    _ctx, found = candidates
    with closing(WarmBuilder(timeout_sec=0.001, max_workers=1)) as builder:
        results = builder.build([BuilderInput(found[0].sch.mod, HOST)])
        assert results[0].artifact_path is None
        assert "timeout" in str(results[0].error_msg).lower()
        assert builder.stats.timed_out == 1
        builder.timeout_sec = 60.0  # a replaced worker must build normally again
        builder._pool._timeout = 60.0
        again = builder.build([BuilderInput(found[1].sch.mod, HOST)])
        assert again[0].error_msg is None


def test_cross_compiled_artifact_is_aarch64(candidates):
    compiler = require_tool("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu")
    _ctx, found = candidates
    mod = found[0].sch.mod
    with closing(WarmBuilder(cross_compiler=compiler, timeout_sec=120, max_workers=1)) as builder:
        (result,) = builder.build([BuilderInput(mod, AARCH64)])
        assert result.error_msg is None, result.error_msg
        header = open(str(result.artifact_path), "rb").read(20)
    assert header[:4] == b"\x7fELF"
    assert int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64


def test_resume_cache_recognises_measured_candidates(candidates, tmp_path):
    ctx, found = candidates
    history = open_history(str(tmp_path / "h.db"))
    workload = history.commit_workload(ctx.mod)
    for i, cand in enumerate(found[:2]):
        history.commit_tuning_record(
            ms.database.TuningRecord(cand.sch.trace, workload, [1e-3 * (i + 1)], HOST, cand.args_info)
        )
    cache = CandidateCache()
    assert cache.add_history(history, ctx.mod, HOST) == 2
    keys = [cache.lookup_mod(c.sch.mod) for c in found]
    assert keys[0] and keys[1] and keys[2] is None and keys[3] is None
    assert cache.lookup_key(keys[1]) == pytest.approx([2e-3])
    # the builder skips cached candidates; the runner serves their stored times
    with closing(WarmBuilder(timeout_sec=60, max_workers=1, lookup_cached=cache.lookup_mod)) as builder:
        results = builder.build([BuilderInput(c.sch.mod, HOST) for c in found[:3]])
    assert CachedArtifact.parse(results[0].artifact_path) == CachedArtifact(keys[0])
    assert CachedArtifact.parse(results[2].artifact_path) is None  # built: a real artifact path
    assert builder.stats.cached == 2 and builder.stats.built == 1
    history.close()


def test_mali_opencl_candidate_builds_for_an_aarch64_host():
    """rk3399-mali: OpenCL kernels generated on the host, packed in an aarch64 library."""
    from edgetune.profile import load_profile

    require_tool("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu")
    profile = load_profile("rk3399-mali")
    target = profile.tvm_target()
    assert load_tensor_intrinsics(target) == ()
    ctx = ms.TuneContext(
        mod=matmul_mod(), target=target, space_generator="post-order-apply",
        search_strategy="replay-trace", task_name="mm", num_threads=2, rand_state=1,
    )
    ctx.pre_tuning(
        max_trials=1, num_trials_per_iter=1, design_spaces=ctx.generate_design_space(),
        database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel(),
    )
    (candidate,) = ctx.generate_measure_candidates()
    with closing(WarmBuilder(cross_compiler=profile.build.cross_compiler, timeout_sec=120, max_workers=1)) as builder:
        (result,) = builder.build([BuilderInput(candidate.sch.mod, target)])
        assert result.error_msg is None, result.error_msg
        data = open(str(result.artifact_path), "rb").read()
    assert data[:4] == b"\x7fELF" and int.from_bytes(data[18:20], "little") == 183
    assert b"__kernel" in data  # the OpenCL C source travels inside the library


def test_candidates_are_timed_on_flushed_caches_on_a_cpu_by_default():
    """Weights come from memory inside a model: timed warm, a schedule can win alone and lose there (issue 26)."""
    from edgetune.measure.runner import cache_flush_preproc
    from edgetune.profile import load_profile

    assert MeasureConfig().enable_cpu_cache_flush
    assert cache_flush_preproc(load_profile("host").measure, "cpu") == "cache_flush_cpu_non_first_arg"
    assert tvm.get_global_func("cache_flush_cpu_non_first_arg", allow_missing=True) is not None  # what the board runs
    assert cache_flush_preproc(MeasureConfig(enable_cpu_cache_flush=False), "cpu") == ""
    for gpu in ("cuda", "opencl"):  # the flush walks host memory: never over a GPU's buffers
        assert cache_flush_preproc(MeasureConfig(), gpu) == ""


def test_a_profiles_timing_is_flushed_on_a_cpu_and_warm_on_a_gpu_or_when_turned_off():
    """What the history stores with each record (schema 5), so that the two are never ranked together."""
    from edgetune.measure.runner import timing_of
    from edgetune.profile import load_profile

    host = load_profile("host")
    assert timing_of(host) == "flushed"
    assert timing_of(host.with_overrides(measure={"enable_cpu_cache_flush": False})) == "warm"
    assert timing_of(load_profile("cuda")) == "warm"


def _code_addresses(path: str) -> dict[str, str]:
    """Where each function of a library lies (``nm``): a kernel's speed depends on it."""
    import subprocess

    listing = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout
    return {fields[2]: fields[0] for fields in (line.split() for line in listing.splitlines())
            if len(fields) == 3 and fields[1] in "tT"}


def _outputs(library: str, mod: tvm.IRModule) -> list:
    """``main`` of ``library`` run on the same random inputs; every argument as it is afterwards."""
    import numpy as np
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.random([int(d) for d in info.shape]).astype(info.dtype))
            for info in ArgInfo.from_prim_func(mod["main"])]
    tvm.runtime.load_module(library)["main"](*args)
    return [arg.numpy() for arg in args]


def test_a_direct_link_puts_a_candidates_code_where_the_drivers_link_does(candidates):
    """build.candidate_link "direct" against "driver" (the default): every function at the same address, so a
    kernel is timed as the driver's library would run it, and the same outputs."""
    import numpy as np

    _ctx, found = candidates
    mods = [c.sch.mod for c in found[:2]]
    outputs, addresses = {}, {}
    for name, settings in {"direct": {"direct_link": True}, "driver": {}}.items():
        BUILT.clear()  # each variant builds its own (the process would reuse the same module's artifact)
        with closing(WarmBuilder(timeout_sec=60, max_workers=1, **settings)) as builder:
            results = builder.build([BuilderInput(mod, HOST) for mod in mods])
            assert [r.error_msg for r in results] == [None, None]
            paths = [str(r.artifact_path) for r in results]
            addresses[name] = [_code_addresses(path) for path in paths]
            outputs[name] = [_outputs(path, mod) for path, mod in zip(paths, mods)]
    assert all("__tvm_ffi_main" in found for found in addresses["direct"])
    assert addresses["direct"] == addresses["driver"]
    for ours, theirs in zip(outputs["direct"], outputs["driver"]):
        for mine, other in zip(ours, theirs):
            np.testing.assert_array_equal(mine, other)


def _linked(mod: tvm.IRModule, path: str, monkeypatch, flags: tuple[str, ...] = (), tools=None) -> list[str]:
    """Link ``mod``'s candidate library at ``path`` in this process; what ran: the programs, or "driver"."""
    import subprocess

    from tvm.support import cc

    from edgetune.builder import builder as module

    ran: list[str] = []
    real_run, real_create_shared = subprocess.run, cc.create_shared

    def run(command, *args, **kwargs):
        ran.append(os.path.basename(command[0]))
        return real_run(command, *args, **kwargs)

    def create_shared(*args, **kwargs):
        ran.append("driver")
        return real_create_shared(*args, **kwargs)

    monkeypatch.setattr(module.subprocess, "run", run)
    monkeypatch.setattr(cc, "create_shared", create_shared)
    if tools is not None:
        monkeypatch.setattr(module, "direct_link_tools", lambda cross_compiler: tools)
    tvm.compile(mod, target=HOST).export_library(path, fcompile=module.shared_library_linker("", flags, direct=True))
    monkeypatch.undo()
    return ran


def test_a_candidate_is_linked_by_ld_not_the_driver_unless_flags_ask_for_it(candidates, tmp_path, monkeypatch):
    from edgetune.builder.builder import direct_link_tools

    direct_link_tools("")  # asked once per process, before the links below are watched
    _ctx, found = candidates
    mod = found[0].sch.mod
    assert _linked(mod, str(tmp_path / "direct.so"), monkeypatch) == ["ld"]
    assert _linked(mod, str(tmp_path / "flags.so"), monkeypatch, flags=("-Wl,-O1",)) == ["driver"]
    assert len(_outputs(str(tmp_path / "direct.so"), mod)) == 3


def test_a_direct_link_the_linker_refuses_falls_back_to_the_driver(candidates, tmp_path, monkeypatch):
    """An ld that fails (a toolchain edgetune misreads) costs a driver link, never the candidate."""
    from edgetune.builder.builder import DirectLinkTools

    _ctx, found = candidates
    mod = found[0].sch.mod
    refusing = DirectLinkTools("/bin/false", ("-o", "@edgetune-output@.so", "@edgetune-objects@.o"), None)
    library = tmp_path / "candidate.so"
    assert _linked(mod, str(library), monkeypatch, tools=refusing) == ["false", "driver"]
    assert len(_outputs(str(library), mod)) == 3


def test_the_direct_link_uses_the_tools_and_start_up_files_the_compiler_names():
    from edgetune.builder.builder import direct_link_tools

    tools = direct_link_tools("")
    assert tools is not None and os.path.basename(tools.linker) == "ld" and os.access(tools.linker, os.X_OK)
    assert tools.support_library and tools.support_library.endswith(".a") and os.path.isfile(tools.support_library)
    command = tools.command("out.so", ["a.o", "b.o"])
    assert command[command.index("-o") + 1] == "out.so" and "-shared" in command
    starts = [os.path.basename(word) for word in command if word.endswith(".o")]
    assert starts == ["crti.o", "crtbeginS.o", "a.o", "b.o", "crtendS.o", "crtn.o"]  # the driver's start-up files
    assert command.index(tools.support_library) == command.index("b.o") + 1
    assert not [word for word in command if word.startswith(("-l", "-L", "-plugin"))]  # no library scanned
    cross = direct_link_tools(require_tool("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu"))
    assert cross is not None and "aarch64-linux-gnu" in cross.linker and "aarch64-linux-gnu" in cross.support_library
    assert "--fix-cortex-a53-843419" in cross.arguments  # the driver's erratum fix stays
    assert direct_link_tools("no-such-compiler-g++") is None
