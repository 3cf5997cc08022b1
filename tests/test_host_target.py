"""Host detection: ``mcpu = "native"`` / ``num-cores = "auto"`` resolve to this machine's CPU and cores."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from edgetune.errors import ProfileError, TargetError
from edgetune.profile import load_profile
from edgetune.profile.host import HostCPU, cpu_disagreement, host_cpu, usable_cores


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.toml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_host_profile_resolves_this_machines_cpu_and_cores() -> None:
    from tvm.target import codegen

    profile = load_profile("host")
    assert profile.target["mcpu"] == str(codegen.llvm_get_system_cpu())
    assert profile.target["num-cores"] == len(os.sched_getaffinity(0)) == profile.device.num_threads
    assert profile.resolved["target.mcpu"] == f"native -> {profile.target['mcpu']}"
    # the TVM target carries it, so LLVM generates code for this CPU
    assert str(profile.tvm_target().attrs["mcpu"]) == profile.target["mcpu"]
    assert "native ->" in profile.describe()


def test_peak_is_estimated_from_the_cpu_when_unset() -> None:
    profile = load_profile("host")
    cpu = host_cpu()
    if cpu.ghz is None:
        pytest.skip("the kernel reports no CPU clock here")
    assert profile.device.peak_gflops == cpu.peak_gflops > 0
    assert "device.peak_gflops" in profile.resolved


def test_flops_per_cycle_follow_the_vector_units() -> None:
    def cpu(name: str, *features: str, arch: str = "x86_64") -> HostCPU:
        return HostCPU(name=name, arch=arch, cores=2, features=frozenset(features), ghz=2.0)

    assert cpu("sapphirerapids", "avx512f", "avx2", "fma").fp32_flops_per_cycle == 64
    assert cpu("znver4", "avx512f", "avx2", "fma").fp32_flops_per_cycle == 32
    assert cpu("haswell", "avx2", "fma").fp32_flops_per_cycle == 32
    assert cpu("x86-64").fp32_flops_per_cycle == 8
    assert cpu("cortex-a72", "neon", arch="aarch64").peak_gflops == 2 * 2.0 * 16


def test_usable_cores_is_the_affinity_mask() -> None:
    assert usable_cores() == len(os.sched_getaffinity(0))


def test_native_on_a_cross_compiled_profile_is_a_one_line_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        name = "board"
        [target]
        kind = "llvm"
        mtriple = "armv7l-linux-gnueabihf"
        mcpu = "native"
        """,
    )
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    message = str(info.value)
    assert "\n" not in message and "'target.mcpu' is 'native'" in message and "name the board's CPU" in message


def test_unknown_mcpu_is_a_one_line_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        name = "board"
        [target]
        kind = "llvm"
        mcpu = "notacpu9000"
        """,
    )
    with pytest.raises(TargetError) as info:
        load_profile(path).check_buildable()
    assert "\n" not in str(info.value) and "does not know target.mcpu 'notacpu9000'" in str(info.value)


def test_num_cores_must_be_an_integer_or_auto(tmp_path: Path) -> None:
    path = write(tmp_path, '\nname = "b"\n[target]\nkind = "llvm"\nnum-cores = "many"\n')
    with pytest.raises(ProfileError, match="must be an integer or 'auto', got 'many' instead"):
        load_profile(path)


def test_board_cpu_disagreeing_with_the_profile_is_said() -> None:
    assert cpu_disagreement("cortex-a72", "cortex-a72") is None
    assert "generic CPU" in cpu_disagreement(None, "cortex-a53")
    assert cpu_disagreement("cortex-a72", "cortex-a53") == "the board's CPU is cortex-a53 but the profile compiles for mcpu 'cortex-a72'"
