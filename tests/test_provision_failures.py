"""``edgetune provision`` failure cases against real SSH servers: each ends in one clear line.

A loopback sshd with its own host and user keys stands in for a board; the
"board without python3" is an sshd whose sessions chroot into a minimal Debian
rootfs. Every case runs the real CLI and checks the exit code and the single
``edgetune: error:`` line (what was expected, what was found, how to fix it).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from harness.sshd import keygen
from provision_fixtures import Site, assert_one_error, free_port, loopback_sshd, nopython_sshd  # noqa: F401

pytestmark = pytest.mark.integration


def test_unknown_host_key_is_refused_with_fingerprint_and_command(loopback_sshd, tmp_path: Path) -> None:
    site = Site(tmp_path).add("fresh", loopback_sshd)  # known_hosts left empty
    result = site.cli("provision", "fresh")
    line = assert_one_error(result, 3, "is not in", "SHA256:", f"ssh-keyscan -p {loopback_sshd.port} 127.0.0.1 >> ",
                            "--accept-new-host-key")
    # the fingerprint shown is the server's real one
    import paramiko

    key = paramiko.PKey.from_path(str(loopback_sshd.host_key))
    from edgetune.provision.ssh import fingerprint

    assert fingerprint(key) in line
    assert site.known_hosts.read_text() == ""  # nothing was added silently


def test_accept_new_host_key_records_it_then_arch_mismatch_is_refused(loopback_sshd, tmp_path: Path) -> None:
    # profile rpi4 is aarch64, this "board" is x86_64: connection succeeds, the check refuses
    site = Site(tmp_path).add("wrongarch", loopback_sshd, profile="rpi4")
    result = site.cli("provision", "wrongarch", "--accept-new-host-key")
    assert "added host key of [127.0.0.1]:" in result.stdout
    assert_one_error(result, 3, "board wrongarch is x86_64 but its profile rpi4 expects aarch64")
    assert loopback_sshd.host_public_line.split()[2] in site.known_hosts.read_text()
    # next time the key is known: same arch error, no host-key message
    again = site.cli("provision", "wrongarch")
    assert "added host key" not in again.stdout
    assert_one_error(again, 3, "expects aarch64")


def test_changed_host_key_is_refused_even_with_accept_new(loopback_sshd, tmp_path: Path) -> None:
    site = Site(tmp_path)
    other = keygen(tmp_path / "other_host_key", "impostor")
    kind, blob = Path(str(other) + ".pub").read_text().split()[:2]
    site.known_hosts.write_text(f"[127.0.0.1]:{loopback_sshd.port} {kind} {blob}\n")
    site.add("changed", loopback_sshd)
    result = site.cli("provision", "changed", "--accept-new-host-key")
    assert_one_error(result, 3, "CHANGED", "ssh-keygen -R")


def test_wrong_user_key_is_refused(loopback_sshd, tmp_path: Path) -> None:
    wrong = keygen(tmp_path / "wrong_key", "not-authorized")
    site = Site(tmp_path).trust(loopback_sshd).add("wrongkey", loopback_sshd, identity_file=str(wrong))
    result = site.cli("provision", "wrongkey")
    assert_one_error(result, 3, "SSH authentication as 'root'", str(wrong), "authorized_keys", "ssh -i")


def test_unreachable_host(tmp_path: Path, loopback_sshd) -> None:
    site = Site(tmp_path).trust(loopback_sshd)
    dead_port = free_port()  # nothing listens there
    site.add("gone", loopback_sshd, port=dead_port)
    result = site.cli("provision", "gone")
    assert_one_error(result, 3, f"cannot connect to 127.0.0.1:{dead_port}", "Connection refused", "ssh ")


def test_board_without_python3(nopython_sshd, tmp_path: Path) -> None:
    site = Site(tmp_path).trust(nopython_sshd).add("nopy", nopython_sshd)
    result = site.cli("provision", "nopy")
    assert "detected x86_64" in result.stdout
    assert_one_error(result, 3, "board nopy: python3 not found on the board", "apt-get install python3")


def test_tracker_port_in_use(loopback_sshd, tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        port = squatter.getsockname()[1]
        site = Site(tmp_path, tracker_port=port).trust(loopback_sshd).add("busy", loopback_sshd)
        result = site.cli("provision", "busy")
    assert_one_error(result, 3, f"tracker port {port} on 127.0.0.1 is in use by another program", "ss -ltnp")
    # refused before anything was uploaded
    assert "uploading" not in result.stdout


def test_inventory_errors_exit_2(tmp_path: Path) -> None:
    site = Site(tmp_path)
    site.inventory.write_text('[boards.x]\nhost = "h"\nprofile = "host"\npassword = "hunter2"\n')
    assert_one_error(site.cli("provision", "x"), 2, "passwords are not accepted", "identity_file")
    site.inventory.write_text('[boards.x]\nhost = "h"\nprofile = "host"\n')
    assert_one_error(site.cli("provision", "y"), 2, "no board named 'y'", "boards: x")
    missing = run_without_inventory()
    assert_one_error(missing, 2, "EDGETUNE_INVENTORY")


def run_without_inventory():
    import os

    from conftest import run_cli

    env = {k: v for k, v in os.environ.items() if k != "EDGETUNE_INVENTORY"}
    env["EDGETUNE_INVENTORY"] = ""
    return run_cli("boards", "status", env=env)


def test_preinstalled_runtime_with_another_tvm_version_is_refused(loopback_sshd, tmp_path: Path) -> None:
    """A board with a source-built runtime (runtime = "preinstalled") must match the host's TVM."""
    import sys

    base = tmp_path / "remote-old"
    fake = tmp_path / "fake-site" / "tvm"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "0.26.0"\n')
    (base / "venv" / "bin").mkdir(parents=True)
    python = base / "venv" / "bin" / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={fake.parent} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    site = Site(tmp_path).trust(loopback_sshd).add("old", loopback_sshd, runtime="preinstalled",
                                                   remote_dir=str(base))
    try:
        result = site.cli("provision", "old")
        assert_one_error(result, 3, "board old has TVM 0.26.0", "this host has 0.27", "rpc_setup/README.md")
    finally:
        site.teardown()  # the host tracker was started before the runtime check


def test_gpu_profile_on_a_runtime_without_opencl_is_refused_before_the_server_starts(loopback_sshd, tmp_path: Path) -> None:
    """The wheels' runtime has no OpenCL: provisioning an OpenCL profile says so and how to get one."""
    profile = tmp_path / "host-opencl.toml"
    profile.write_text(
        'name = "host-opencl"\n[target]\nkind = "opencl"\nmax_threads_per_block = 256\n'
        '[host_target]\nkind = "llvm"\n[rpc]\ndevice = "opencl"\n[device]\narch = "x86_64"\n'
    )
    site = Site(tmp_path).trust(loopback_sshd).add("gpu", loopback_sshd, profile=str(profile))
    try:
        result = site.cli("provision", "gpu")
    finally:
        site.teardown()  # the host tracker was started before the runtime check
    assert_one_error(result, 3, "board gpu", "no opencl support", "tvm.runtime.enabled('opencl') is False",
                     "USE_OPENCL=ON", "preinstalled")
    assert "runtime: TVM" in result.stdout  # the runtime was installed and probed
    assert "started the RPC server" not in result.stdout  # refused before a server that could not measure
