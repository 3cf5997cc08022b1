"""``edgetune provision`` end to end on a board in its own network namespace.

The board (a real sshd in an ``ip netns`` behind a veth pair) cannot reach the
host's loopback, where the tracker listens: registration and the kernel round
trip only work through the SSH tunnel that provisioning sets up. Covers the
first provision (runtime upload, tracker, tunnel, server, verify), the second
(everything reused), status, a killed server (reported, then restored),
``--all`` with one good and one unreachable board, teardown, direct mode and
``tune --board`` resolution.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from edgetune.board.rpc_tracker import TrackerAddress, device_counts, tracker_summary
from harness.sshd import NetNamespace, start_sshd
from provision_fixtures import Site, assert_one_error, free_port, netns_sshd, port_refuses  # noqa: F401

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def site(netns_sshd, tmp_path_factory: pytest.TempPathFactory) -> Site:
    """One inventory with the namespace board, provisioned once for the module."""
    site = Site(tmp_path_factory.mktemp("site-netns")).trust(netns_sshd).add("nsboard", netns_sshd)
    started = time.monotonic()
    result = site.cli("provision", "nsboard")
    site.first = result  # type: ignore[attr-defined]
    site.first_seconds = time.monotonic() - started  # type: ignore[attr-defined]
    yield site
    site.teardown()


def _registered(site: Site, key: str) -> int:
    return device_counts(tracker_summary(TrackerAddress("127.0.0.1", site.tracker_port, key)), key)[0]


def test_first_provision_goes_through_the_tunnel(site: Site, netns_sshd) -> None:
    result = site.first  # type: ignore[attr-defined]
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for step in ("detected x86_64", "uploading", "(installed)", "started the host tracker on 127.0.0.1",
                 "tunnel up", "started the RPC server", "verified ok"):
        assert step in out, f"{step!r} missing from:\n{out}"
    assert "nsboard  host" in out  # the status table
    assert _registered(site, "nsboard") == 1
    # the board really cannot reach the host's tracker except through the tunnel
    assert port_refuses(netns_sshd.netns.host_addr, site.tracker_port, netns_sshd.netns)
    assert not port_refuses("127.0.0.1", site.tracker_port, netns_sshd.netns)  # the -R forward


def test_second_provision_reuses_everything(site: Site) -> None:
    result = site.cli("provision", "nsboard")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(already there)" in result.stdout
    assert "RPC server already running" in result.stdout
    assert "uploading" not in result.stdout and "started the host tracker" not in result.stdout
    assert "verified ok" in result.stdout


def test_status_reports_healthy_board(site: Site) -> None:
    result = site.cli("boards", "status")
    assert result.returncode == 0, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("nsboard"))
    assert "yes" in row and "0.27" in row and "running (" in row and "yes (1 free)" in row and row.endswith("up")


def test_killed_server_is_reported_then_restored(site: Site) -> None:
    record = Path(site.root / "remote-nsboard" / "server.pid")  # the board shares this filesystem
    pid = int(record.read_text())
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while _registered(site, "nsboard") and time.monotonic() < deadline:
        time.sleep(0.5)
    status = site.cli("boards", "status")
    assert_one_error(status, 3, "not ready: nsboard", "edgetune provision nsboard")
    row = next(line for line in status.stdout.splitlines() if line.startswith("nsboard"))
    assert " dead " in row and " no " in row
    again = site.cli("provision", "nsboard")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "started the RPC server" in again.stdout and "verified ok" in again.stdout
    assert int(record.read_text()) != pid
    assert site.cli("boards", "status").returncode == 0


def test_all_in_parallel_reports_each_board(site: Site, netns_sshd, tmp_path: Path) -> None:
    """--all: the provisioned board, a second fresh board in another namespace, and an unreachable one."""
    second = start_sshd(tmp_path / "sshd2", user_key=netns_sshd.user_key, netns=NetNamespace.create())
    try:
        group = Site(tmp_path, tracker_port=site.tracker_port)
        group.state, group.known_hosts = site.state, site.known_hosts  # same tracker, tunnel records and keys
        second.write_known_hosts(group.known_hosts)
        group.add("nsboard", netns_sshd, remote_dir=str(site.root / "remote-nsboard"),
                  rpc_port=_rpc_port(site, "nsboard"))
        group.add("nsboard2", second)
        group.add("offline", netns_sshd, port=free_port(), host="127.0.0.1")
        result = group.cli("provision", "--all")
        assert result.returncode == 3, result.stdout + result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("edgetune: error:")]
        assert len(errors) == 1 and "board offline: cannot connect" in errors[0]
        rows = {line.split()[0]: line for line in result.stdout.splitlines()
                if line.startswith(("nsboard ", "nsboard2 ", "offline "))}
        assert "ok (max error" in rows["nsboard"] and "ok (max error" in rows["nsboard2"]
        assert "FAILED" in rows["offline"]
        # both boards registered with the one tracker, each through its own tunnel
        assert _registered(site, "nsboard") == 1 and _registered(site, "nsboard2") == 1
        group.boards = [b for b in group.boards if "[boards.offline]" not in b]
        group.write()
        assert group.cli("boards", "teardown", "nsboard2").returncode == 0
    finally:
        second.stop()


def _rpc_port(site: Site, name: str) -> int:
    text = site.inventory.read_text().split(f"[boards.{name}]", 1)[1]
    return int(text.split("rpc_port = ", 1)[1].split()[0])


def test_tune_board_resolves_inventory_entry(site: Site) -> None:
    from edgetune.provision.board import choose_board

    os.environ["EDGETUNE_INVENTORY"] = str(site.inventory)
    try:
        where = choose_board("nsboard", None)
        assert (where.profile, where.tracker, where.key) == ("host", f"127.0.0.1:{site.tracker_port}", "nsboard")
    finally:
        del os.environ["EDGETUNE_INVENTORY"]
    unknown = site.cli("tune", "--board", "nope", "--model", "demo:tiny-cnn")
    assert_one_error(unknown, 2, "no board named 'nope'")


def test_teardown_stops_server_tunnel_and_tracker(site: Site) -> None:
    result = site.cli("boards", "teardown", "nsboard", "--tracker")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "stopped server, tunnel" in result.stdout and "host tracker: stopped" in result.stdout
    status = site.cli("boards", "status")
    row = next(line for line in status.stdout.splitlines() if line.startswith("nsboard"))
    assert "stopped" in row and row.endswith("down") and "tracker: not running" in status.stdout
    assert port_refuses("127.0.0.1", site.tracker_port)


def test_direct_mode_over_the_veth_link(netns_sshd, tmp_path: Path) -> None:
    """No tunnel: the tracker listens on the host's veth address and the board dials it."""
    host_addr = netns_sshd.netns.host_addr
    site = Site(tmp_path, tracker_host=host_addr, advertise=host_addr).trust(netns_sshd)
    site.add("direct", netns_sshd, mode="direct")
    try:
        result = site.cli("provision", "direct")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "WARNING: the tracker listens on" in result.stdout
        assert "WARNING: direct mode" in result.stdout and "tunnel up" not in result.stdout
        assert "verified ok" in result.stdout
        status = site.cli("boards", "status")
        assert status.returncode == 0 and "n/a" in status.stdout
    finally:
        site.teardown()


def test_direct_mode_refuses_a_loopback_tracker(netns_sshd, tmp_path: Path) -> None:
    site = Site(tmp_path).trust(netns_sshd).add("direct", netns_sshd, mode="direct")
    assert_one_error(site.cli("provision", "direct"), 3, 'mode = "direct"', "[tracker] host")


def test_preinstalled_runtime_is_checked_not_replaced(netns_sshd, tmp_path: Path) -> None:
    """runtime = "preinstalled" (the source-build path): the board's own venv is used as is."""
    import sys

    base = tmp_path / "remote-pre"
    base.mkdir()
    (base / "venv").symlink_to(Path(sys.prefix))  # a venv with TVM 0.27, made without edgetune
    site = Site(tmp_path).trust(netns_sshd).add("pre", netns_sshd, runtime="preinstalled", remote_dir=str(base))
    try:
        result = site.cli("provision", "pre")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "(preinstalled, version matches)" in result.stdout and "uploading" not in result.stdout
        assert "verified ok" in result.stdout
        assert not (base / "wheels").exists()
    finally:
        site.teardown()
