"""Fast checks of the provisioning pieces that need no SSH server: inventory, detection, runtime, tunnel."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgetune.errors import InventoryError, ProvisionError
from edgetune.profile import load_profile
from edgetune.provision.detect import BoardFacts, check_profile, parse_facts
from edgetune.provision.inventory import load_inventory
from edgetune.provision.runtime import host_versions, remote_dir, runtime_spec
from edgetune.provision.tunnel import tunnel_command

EXAMPLE = Path(__file__).resolve().parent.parent / "rpc_setup" / "boards.example.toml"


def _inventory(tmp_path: Path, text: str):
    path = tmp_path / "boards.toml"
    path.write_text(text)
    return load_inventory(path)


def test_example_inventory_loads_with_defaults() -> None:
    inventory = load_inventory(EXAMPLE)
    assert inventory.tracker.host == "127.0.0.1"
    assert set(inventory.boards) >= {"rk3399", "rpi4"}
    entry = inventory.boards["rk3399"]
    assert entry.mode == "tunnel" and entry.remote_dir == "~/.edgetune" and entry.port == 22
    for board in inventory.boards.values():
        load_profile(board.profile)  # every example board names a bundled profile


def test_inventory_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "env.toml"
    path.write_text('[boards.a]\nhost = "10.0.0.2"\nprofile = "rpi4"\n')
    monkeypatch.setenv("EDGETUNE_INVENTORY", str(path))
    assert load_inventory(None).get("a").host == "10.0.0.2"
    monkeypatch.delenv("EDGETUNE_INVENTORY")
    with pytest.raises(InventoryError, match="EDGETUNE_INVENTORY"):
        load_inventory(None)


@pytest.mark.parametrize(
    "text, message",
    [
        ('[boards.a]\nhost = "h"\nprofile = "rpi4"\npassword = "x"\n', "passwords are not accepted"),
        ('[defaults]\npassphrase = "x"\n', "passwords are not accepted"),
        ('[boards.a]\nhost = "h"\nprofile = "rpi4"\nprot = 22\n', "unknown key 'prot'"),
        ('[boards.a]\nhost = "h"\n', "needs 'profile'"),
        ('[boards.a]\nhost = "h"\nprofile = "rpi4"\nmode = "vpn"\n', "mode must be one of tunnel, direct"),
        ('[boards.a]\nhost = "h"\nprofile = "rpi4"\nport = 70000\n', "must be a TCP port"),
        ('[boards.a]\nhost = "h"\nprofile = "rpi4"\n[boards.b]\nhost = "g"\nprofile = "rpi4"\n',
         "both use rpc_port 9090"),
        ("[boards\n", "not valid TOML"),
        ('[boards.a]\nhost = "h"\nprofile = "rpi4"\nremote_dir = "~/x; rm -rf ~"\n', "may only contain"),
        ('[boards.a]\nhost = "h"\nprofile = "rpi4"\nruntime = "conda"\n', "runtime must be one of"),
    ],
)
def test_inventory_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InventoryError, match=message):
        _inventory(tmp_path, text)


RK3399_CPUINFO = "\n".join(
    f"cpuinfo=processor\t: {cpu}\ncpuinfo=CPU part\t: {'0xd03' if cpu < 4 else '0xd08'}" for cpu in range(6)
)


def test_big_little_clusters_from_cpu_part_ids() -> None:
    facts = parse_facts(f"arch=aarch64\ncores=6\nmem_kb=3900000\npython_version=3.11.2\n{RK3399_CPUINFO}\n"
                        "opencl= /dev/mali0\ncuda=\n")
    assert facts.clusters == (("Cortex-A53", (0, 1, 2, 3)), ("Cortex-A72", (4, 5)))
    assert facts.opencl == ("/dev/mali0",) and not facts.cuda
    assert facts.python_tag == "cp311" and facts.mem_mb == 3808
    assert "4x Cortex-A53 + 2x Cortex-A72" in facts.describe()
    assert check_profile(facts, load_profile("rk3399"), "b") == []


def test_arch_mismatch_names_both_facts() -> None:
    with pytest.raises(ProvisionError, match="board pi is armv7l but its profile rpi4 expects aarch64"):
        check_profile(BoardFacts(arch="armv7l", cores=4), load_profile("rpi4"), "pi")
    # aliases are the same architecture
    assert check_profile(BoardFacts(arch="arm64", cores=4), load_profile("rpi4"), "pi") == []


def test_soft_mismatches_are_warnings() -> None:
    warnings = check_profile(BoardFacts(arch="aarch64", cores=2), load_profile("rk3399-mali"), "b")
    assert any("pins cores [4, 5]" in w for w in warnings)
    assert any("OpenCL" in w for w in warnings)


def test_32bit_arm_has_no_wheel_and_points_to_source_build() -> None:
    with pytest.raises(ProvisionError, match="no apache-tvm .* wheel .* rpc_setup/README.md"):
        runtime_spec(BoardFacts(arch="armv7l", python_version="3.11.2"), "pi2")


def test_runtime_is_the_hosts_dependency_closure() -> None:
    versions = host_versions()
    import tvm

    assert versions["apache-tvm"].startswith(tvm.__version__.split(".dev")[0][:4])
    # what TVM's RPC server imports at start, directly or through tvm_ffi
    assert {"apache-tvm-ffi", "numpy", "typing-extensions", "ml-dtypes", "psutil", "cloudpickle", "tornado"} <= set(versions)
    spec = runtime_spec(BoardFacts(arch="arm64", python_version="3.12.3"), "b")
    assert spec.python_tag == "cp312" and "manylinux_2_28_aarch64" in spec.platforms()


def test_remote_dir_expands_home() -> None:
    facts = BoardFacts(arch="aarch64", home="/home/pi")
    assert remote_dir("~/.edgetune", facts) == "/home/pi/.edgetune"
    assert remote_dir("/data/edgetune/", facts) == "/data/edgetune"


def test_tunnel_never_prompts_or_adds_keys(tmp_path: Path) -> None:
    inventory = _inventory(
        tmp_path, '[boards.a]\nhost = "10.0.0.2"\nport = 2222\nuser = "pi"\nprofile = "rpi4"\n'
        'identity_file = "/k/id"\nrpc_port = 9091\nknown_hosts = "/k/known"\n'
    )
    command = tunnel_command(inventory.get("a"), 9190)
    text = " ".join(command)
    for option in ("BatchMode=yes", "StrictHostKeyChecking=yes", "UserKnownHostsFile=/k/known",
                   "ExitOnForwardFailure=yes", "-R 127.0.0.1:9190:127.0.0.1:9190",
                   "-L 127.0.0.1:9091:127.0.0.1:9091", "-p 2222", "-i /k/id", "-l pi"):
        assert option in text
    assert command[-1] == "10.0.0.2"


def test_cli_help_has_examples() -> None:
    from conftest import run_cli

    for args in (("provision", "--help"), ("boards", "--help")):
        result = run_cli(*args)
        assert result.returncode == 0 and "examples:" in result.stdout


def test_ssh_config_alias_fills_the_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text(
        "Host pi4-lab\n  HostName 192.168.7.4\n  Port 2200\n  User pi\n  IdentityFile ~/.ssh/pi_key\n"
    )
    monkeypatch.setenv("HOME", str(tmp_path))
    entry = _inventory(tmp_path, '[boards.a]\nhost = "pi4-lab"\nprofile = "rpi4"\n').get("a")
    assert (entry.host, entry.port, entry.user, entry.alias) == ("192.168.7.4", 2200, "pi", "pi4-lab")
    assert entry.identity_file == str(tmp_path / ".ssh" / "pi_key")
    # values written in the inventory win over the alias
    entry = _inventory(tmp_path, '[boards.a]\nhost = "pi4-lab"\nuser = "root"\nprofile = "rpi4"\n').get("a")
    assert entry.user == "root"


def test_board_cpu_that_disagrees_with_the_profile_mcpu_is_a_warning() -> None:
    a53_only = BoardFacts(arch="aarch64", cores=4, clusters=(("Cortex-A53", (0, 1, 2, 3)),))
    warnings = check_profile(a53_only, load_profile("rk3399"), "b")
    assert any("the board's CPU is Cortex-A53 but the profile compiles for mcpu 'cortex-a72'" in w for w in warnings)
    big_little = BoardFacts(arch="aarch64", cores=6, clusters=(("Cortex-A72", (4, 5)), ("Cortex-A53", (0, 1, 2, 3))))
    assert not any("board's CPU" in w for w in check_profile(big_little, load_profile("rk3399"), "b"))


def test_a_baseline_runtime_without_a_wheel_for_the_board_is_one_line() -> None:
    """Issue 29: provision --baseline asks the package index for the board's platform; none there is a LookupError."""
    from edgetune.provision.baseline import download_baseline_wheels
    from edgetune.provision.detect import BoardFacts

    with pytest.raises(LookupError) as info:
        download_baseline_wheels("litert", BoardFacts(arch="riscv64", python="python3", python_version="3.11.2"),
                                 lambda _m: None)
    assert "\n" not in str(info.value) and "ai-edge-litert" in str(info.value)


def test_baseline_lists_on_the_command_line() -> None:
    import argparse

    from edgetune.common.choices import baseline_runtimes

    assert baseline_runtimes("onnxruntime,litert") == ("onnxruntime", "litert") and baseline_runtimes("none") == ()
    with pytest.raises(argparse.ArgumentTypeError, match="did you mean 'litert'"):
        baseline_runtimes("onnxruntime,litrt")
    with pytest.raises(argparse.ArgumentTypeError, match="each runtime once"):
        baseline_runtimes("litert,litert")


def test_a_cache_directory_is_filled_by_one_process_at_a_time(tmp_path) -> None:
    """Two provisions at once (or test files in parallel) must not download into one wheel cache together."""
    import subprocess
    import sys

    from edgetune.provision.runtime import cache_lock

    target = tmp_path / "wheels" / "tvm-aarch64"
    probe = ("import fcntl, sys; lock = open(sys.argv[1], 'w'); fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)")
    lock_file = str(tmp_path / "wheels" / ".tvm-aarch64.lock")
    with cache_lock(target):
        assert target.is_dir()
        assert subprocess.run([sys.executable, "-c", probe, lock_file], capture_output=True).returncode != 0
    assert subprocess.run([sys.executable, "-c", probe, lock_file], capture_output=True).returncode == 0
