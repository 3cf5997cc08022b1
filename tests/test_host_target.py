"""Host detection: ``mcpu = "native"`` / ``num-cores = "auto"`` resolve to this machine's CPU and cores."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from edgetune.errors import ProfileError, TargetError
from edgetune.profile import load_profile
from edgetune.common import cpu_family
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


# -- a CPU model whose instructions this machine does not all offer (a VM that masks AVX-512) ------------------------
#: the flags of a Zen 3 class machine, or of a Zen 4 guest whose hypervisor hides AVX-512: AVX2 and FMA
AVX2_FLAGS = frozenset({"sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c"})


def _features(target: dict) -> frozenset[str]:
    import tvm
    from tvm.target import codegen

    return frozenset(str(f) for f in codegen.llvm_get_cpu_features(tvm.target.Target(target)))


def test_the_instructions_a_cpu_model_has_and_a_machine_lacks_are_named() -> None:
    from edgetune.common.cpu_family import unavailable_instructions

    zen4 = _features({"kind": "llvm", "mcpu": "znver4", "mtriple": "x86_64-linux-gnu"})
    missing = unavailable_instructions(zen4, AVX2_FLAGS)
    assert missing[0] == "avx512f" and "avx512vnni" in missing and "avx2" not in missing
    assert unavailable_instructions(zen4, AVX2_FLAGS | {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd",
                                                       "avx512_vnni", "avx512_bf16", "avx512ifma", "avx512vbmi",
                                                       "avx512_vbmi2", "avx512_bitalg", "avx512_vpopcntdq"}) == []
    assert unavailable_instructions(zen4, frozenset()) == []  # flags unknown: nothing is assumed missing


def test_native_turns_off_what_a_masked_cpu_model_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Zen 4 guest without AVX-512: LLVM says znver4, whose code would die on its first AVX-512 instruction."""
    import platform

    from tvm.target import codegen

    import edgetune.profile.host as host

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(codegen, "llvm_get_system_cpu", lambda: "znver4")
    monkeypatch.setattr(cpu_family, "cpuinfo_flags", lambda: AVX2_FLAGS)
    cpu = host.host_cpu.__wrapped__()
    assert cpu.name == "znver4" and cpu.mattr == ("-avx512f",)
    assert "avx2" in cpu.features and not any(f.startswith("avx512") for f in cpu.features)
    assert cpu.fp32_flops_per_cycle == 32 and "without avx512f" in cpu.describe()
    # the same model where the machine offers AVX-512: nothing turned off
    monkeypatch.setattr(cpu_family, "cpuinfo_flags", lambda: AVX2_FLAGS | {"avx512f", "avx512bw", "avx512dq", "avx512vl",
                                                                      "avx512cd", "avx512_vnni", "avx512_bf16",
                                                                      "avx512ifma", "avx512vbmi", "avx512_vbmi2",
                                                                      "avx512_bitalg", "avx512_vpopcntdq"})
    assert host.host_cpu.__wrapped__().mattr == ()

    # the host profile carries it: AVX2 code, the AVX2 family's library and layouts, no AVX-512 VNNI for int8
    monkeypatch.setattr(host, "host_cpu", lambda: cpu)
    from edgetune.common.cpu_family import family_of

    profile = load_profile("host")
    assert profile.target["mcpu"] == "znver4" and profile.target["mattr"] == ["-avx512f"]
    assert "target.mattr" in profile.resolved and "-avx512f" in profile.resolved["target.mattr"]
    assert family_of(profile.tvm_target()).name == "x86-64-avx2"
    assert profile.int8_instruction() != "avx512-vnni"


def test_a_profile_that_names_the_instruction_itself_keeps_its_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import edgetune.profile.host as host

    monkeypatch.setattr(host, "host_cpu", lambda: HostCPU(name="znver4", arch="x86_64", cores=2, features=frozenset(),
                                                           ghz=2.0, mattr=("-avx512f",)))
    path = write(tmp_path, """
        name = "mine"
        [target]
        kind = "llvm"
        mcpu = "native"
        mattr = ["+avx512f"]
        """)
    profile = load_profile(path)
    assert profile.target["mattr"] == ["+avx512f"] and "target.mattr" not in profile.resolved


def test_the_host_profile_uses_only_instructions_this_machine_offers() -> None:
    """On this machine, whatever it is: the code the host profile asks LLVM for runs here (a masked VM included)."""
    from edgetune.common.cpu_family import _llvm_features, unavailable_instructions

    target = load_profile("host").tvm_target()
    assert unavailable_instructions(_llvm_features(target)) == []


def test_the_embedded_board_refuses_a_profile_with_instructions_this_cpu_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgetune.board.base import check_runnable_on_host
    from edgetune.errors import BoardError

    path = write(tmp_path, """
        name = "zen4"
        [target]
        kind = "llvm"
        mcpu = "znver4"
        """)
    profile = load_profile(path)
    monkeypatch.setattr(cpu_family, "cpuinfo_flags", lambda: AVX2_FLAGS)
    with pytest.raises(BoardError) as info:
        check_runnable_on_host(profile)
    message = str(info.value)
    assert "\n" not in message and "avx512f" in message and "illegal instruction" in message
    assert "--profile host" in message and '"-avx512f"' in message
    # with AVX-512 turned off, the same CPU model runs here
    path = write(tmp_path, """
        name = "zen4-avx2"
        [target]
        kind = "llvm"
        mcpu = "znver4"
        mattr = ["-avx512f"]
        """)
    check_runnable_on_host(load_profile(path))
