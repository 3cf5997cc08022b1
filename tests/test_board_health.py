"""A provisioned board's health while it tunes: heat, throttling waits, a crashed server brought back; and ``boards status``.

Real components: a board that is a real sshd in its own network namespace,
provisioned by the real ``edgetune provision`` (tunnel mode, a preinstalled
runtime: this host's venv), its real TVM RPC server registered with the real
host tracker through the SSH tunnel. This container has no thermal zones and
no cpufreq, so the board's ``sysfs_root`` is a fake sysfs tree (the board
shares this machine's filesystem): the readings, the throttling wait and the
"unknown" output are checked against files the tests write there.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from edgetune.board.rpc_tracker import TrackerAddress, device_counts, tracker_summary
from provision_fixtures import Site, assert_one_error, netns_sshd  # noqa: F401
from test_build_measure import HOST, candidates  # noqa: F401 - candidates is a fixture

pytestmark = pytest.mark.integration


def write_sysfs(root: Path, zones: dict[str, tuple[str, int]], cpus: list[tuple[int, int, str]]) -> None:
    """Thermal zones ``{name: (type, millidegrees)}`` and cpufreq ``[(cur kHz, max kHz, governor)]``."""
    for name, (kind, milli) in zones.items():
        zone = root / "class" / "thermal" / name
        zone.mkdir(parents=True, exist_ok=True)
        (zone / "type").write_text(kind + "\n")
        (zone / "temp").write_text(f"{milli}\n")
    for cpu, (cur, top, governor) in enumerate(cpus):
        freq = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "cpufreq"
        freq.mkdir(parents=True, exist_ok=True)
        (freq / "scaling_cur_freq").write_text(f"{cur}\n")
        (freq / "cpuinfo_max_freq").write_text(f"{top}\n")
        (freq / "scaling_governor").write_text(governor + "\n")


def set_temp(root: Path, milli: int) -> None:
    (root / "class" / "thermal" / "thermal_zone0" / "temp").write_text(f"{milli}\n")


@pytest.fixture(scope="module")
def site(netns_sshd, tmp_path_factory: pytest.TempPathFactory) -> Site:
    """Board ``hot`` provisioned once (fake sysfs at 45 C); board ``bare`` (empty sysfs) never provisioned."""
    root = tmp_path_factory.mktemp("site-health")
    base = root / "remote-hot"
    base.mkdir()
    (base / "venv").symlink_to(Path(sys.prefix))  # a runtime with this host's TVM, nothing to upload
    sysfs = root / "sysfs"
    write_sysfs(sysfs, {"thermal_zone0": ("cpu-thermal", 45000), "thermal_zone1": ("gpu-thermal", 41000)},
                [(1200000, 1800000, "ondemand"), (1200000, 1800000, "ondemand")])
    (root / "empty-sysfs").mkdir()
    site = Site(root).trust(netns_sshd)
    site.add("hot", netns_sshd, runtime="preinstalled", remote_dir=str(base), sysfs_root=str(sysfs))
    site.add("bare", netns_sshd, sysfs_root=str(root / "empty-sysfs"))
    result = site.cli("provision", "hot", "--no-verify")
    assert result.returncode == 0, result.stdout + result.stderr
    site.sysfs = sysfs  # type: ignore[attr-defined]
    site.pid_file = base / "server.pid"  # type: ignore[attr-defined]
    yield site
    site.teardown()


@pytest.fixture
def in_site(site: Site, monkeypatch: pytest.MonkeyPatch) -> Site:
    """This process sees the site's inventory and state (tunnel records), as the CLI does."""
    for name, value in site.env.items():
        monkeypatch.setenv(name, value)
    set_temp(site.sysfs, 45000)  # type: ignore[attr-defined]
    return site


def _address(site: Site) -> TrackerAddress:
    return TrackerAddress("127.0.0.1", site.tracker_port, "hot")


def _board(site: Site, notes: list[str], **measure: float):
    from edgetune.profile import load_profile
    from edgetune.provision.board import provisioned_board

    profile = load_profile("host").with_overrides(measure=measure) if measure else load_profile("host")
    return provisioned_board("hot", None, profile, _address(site), notes.append)


def _kill_server(site: Site) -> int:
    """SIGKILL the board's server process group; return its pid once it is gone."""
    pid = int(site.pid_file.read_text())  # type: ignore[attr-defined]
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if "tvm.exec.rpc_server" not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                break
        except OSError:
            break
        time.sleep(0.05)
    return pid


# ----------------------------------------------------------------------------- boards status


def test_status_shows_heat_and_the_trackers_keys(site: Site) -> None:
    result = site.cli("boards", "status", "hot")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["BOARD", "REACHABLE", "TVM", "SERVER", "REGISTERED", "TEMP", "GOVERNOR", "FREQ", "TUNNEL"]
    row = next(line for line in lines if line.startswith("hot "))
    assert "45.0 C (cpu-thermal)" in row and " ondemand " in row and "1200/1800 MHz" in row and row.endswith("up")
    # the columns line up: every cell starts where its header does
    assert row.index("45.0 C") == lines[0].index("TEMP") and row.index("ondemand") == lines[0].index("GOVERNOR")
    tracker = lines.index(next(line for line in lines if line.startswith("tracker: 127.0.0.1:")))
    assert lines[tracker + 1].split() == ["KEY", "REGISTERED", "FREE", "QUEUE"]
    assert lines[tracker + 2].split() == ["hot", "1", "1", "0"]


def test_status_json_and_a_board_without_sysfs_readings(site: Site) -> None:
    result = site.cli("boards", "status", "--json")
    assert_one_error(result, 3, "not ready: bare", "edgetune provision bare")
    data = json.loads(result.stdout)
    boards = {b["name"]: b for b in data["boards"]}
    assert boards["hot"]["temperature"] == "45.0 C (cpu-thermal)" and boards["hot"]["governor"] == "ondemand"
    # reachable (same sshd) but nothing under its sysfs_root: unknown, not an error
    assert boards["bare"]["reachable"] == "yes"
    assert (boards["bare"]["temperature"], boards["bare"]["governor"], boards["bare"]["frequency"]) == ("unknown",) * 3
    assert data["tracker"]["keys"] == [{"key": "hot", "registered": 1, "free": 1, "queue": 0}]
    assert data["history"] is None


def test_status_honours_tvm_tracker_variables_and_rejects_bad_input(site: Site, tmp_path: Path) -> None:
    env = {"EDGETUNE_INVENTORY": "", "TVM_TRACKER_PORT": str(site.tracker_port), "TVM_TRACKER_KEY": "hot"}
    from conftest import run_cli

    result = run_cli("boards", "status", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == f"tracker: 127.0.0.1:{site.tracker_port} (TVM_TRACKER_HOST/PORT)"
    assert result.stdout.splitlines()[2].split() == ["hot", "1", "1", "0"]
    assert_one_error(run_cli("boards", "status", "--tracker", "nohost", env=env), 3, "--tracker must be HOST:PORT")
    assert_one_error(run_cli("boards", "status", "--db", str(tmp_path / "none.db"), env=env), 4,
                     "no such tuning history file")
    dead = run_cli("boards", "status", "--tracker", "127.0.0.1:1", env=env)
    assert_one_error(dead, 3, "cannot reach the RPC tracker at 127.0.0.1:1")


# ----------------------------------------------------------------------------- heat and throttling


def test_heat_is_read_from_the_boards_sysfs(in_site: Site) -> None:
    from edgetune.provision.heat import read_heat
    from edgetune.provision.inventory import load_inventory
    from edgetune.provision.ssh import BoardConnection

    inventory = load_inventory()
    with BoardConnection(inventory.get("hot")) as connection:
        reading = read_heat(connection)
    assert [(z.name, z.type, z.temp_c) for z in reading.zones] == [
        ("thermal_zone0", "cpu-thermal", 45.0), ("thermal_zone1", "gpu-thermal", 41.0)]
    assert [(c.cpu, c.cur_khz, c.max_khz, c.governor) for c in reading.cpus] == [
        (0, 1200000, 1800000, "ondemand"), (1, 1200000, 1800000, "ondemand")]
    assert reading.throttling(80.0, 0.8) == ""  # ondemand clocks down on purpose: not judged
    assert reading.throttling(44.0, 0.8) == "SoC at 45.0 C, above 44 C"
    with BoardConnection(inventory.get("bare")) as connection:
        empty = read_heat(connection)
    assert (empty.zones, empty.cpus, empty.temperature_text(), empty.frequency_text()) == ((), (), "unknown", "unknown")


def test_a_hot_board_waits_until_it_cools(in_site: Site, tmp_path: Path) -> None:
    notes: list[str] = []
    board = _board(in_site, notes, max_temp_c=70.0, cool_wait_sec=30.0)
    board.heat_log = tmp_path / "heat.jsonl"
    with board:
        set_temp(in_site.sysfs, 95000)  # type: ignore[attr-defined]
        cooler = threading.Timer(2.0, set_temp, (in_site.sysfs, 52000))  # type: ignore[attr-defined]
        cooler.start()
        started = time.monotonic()
        board.before_batch()
        waited = time.monotonic() - started
        board.after_batch()
    assert 1.5 < waited < 15, waited
    assert notes[0] == "board hot is throttling (SoC at 95.0 C, above 70 C); waiting up to 30 s for it to cool"
    assert notes[-1].startswith("board hot cooled in ")
    lines = [json.loads(line) for line in board.heat_log.read_text().splitlines()]
    assert lines[0]["when"] == "before" and lines[0]["max_temp_c"] == 95.0
    assert lines[-1]["when"] == "after" and lines[-1]["max_temp_c"] == 52.0
    assert {line["when"] for line in lines[1:-1]} == {"cooling"}
    health = board.health_summary()
    assert health["throttle_waits"] == 1 and health["hottest_c"] == 95.0 and health["server_restarts"] == 0


def test_the_wait_is_bounded_and_a_slow_clock_counts_as_throttling(in_site: Site, tmp_path: Path) -> None:
    sysfs = in_site.sysfs  # type: ignore[attr-defined]
    notes: list[str] = []
    board = _board(in_site, notes, cool_wait_sec=1.5)
    try:
        write_sysfs(sysfs, {}, [(600000, 1800000, "performance"), (1800000, 1800000, "performance")])
        with board:
            started = time.monotonic()
            board.before_batch()
            waited = time.monotonic() - started
    finally:
        write_sysfs(sysfs, {}, [(1200000, 1800000, "ondemand"), (1200000, 1800000, "ondemand")])
    assert 1.4 < waited < 6, waited
    assert "cpu0 at 600 of 1800 MHz under the performance governor" in notes[0]
    assert notes[-1].startswith("board hot still throttling after ") and notes[-1].endswith("measuring anyway")


def test_a_board_without_ssh_is_measured_as_a_plain_tracker_board(in_site: Site) -> None:
    from dataclasses import replace

    from edgetune.profile import load_profile
    from edgetune.provision.board import ProvisionedBoard
    from edgetune.provision.inventory import load_inventory
    from harness.sshd import free_port

    inventory = load_inventory()
    notes: list[str] = []
    gone = replace(inventory.get("hot"), port=free_port())  # nothing listens there; the tracker still has the server
    board = ProvisionedBoard(gone, inventory, load_profile("host"), _address(in_site), notes.append)
    with board as address:
        board.before_batch()
        board.after_batch()
    assert address == _address(in_site)
    assert len(notes) == 1 and notes[0].startswith("WARNING: board hot: no SSH (") and "Connection refused" in notes[0]
    assert board.health_summary()["readings"] == 0 and board.restarts == 0


# ----------------------------------------------------------------------------- a crashed server


def test_a_server_killed_mid_batch_is_restarted_and_no_candidate_is_lost(in_site: Site, candidates) -> None:  # noqa: F811
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from edgetune.builder.builder import WarmBuilder
    from edgetune.measure.runner import MeasureConfig, TrackerRunner

    _ctx, found = candidates
    notes: list[str] = []
    board = _board(in_site, notes)
    with closing(WarmBuilder(timeout_sec=60, max_workers=2)) as builder, board as address:
        built = builder.build([BuilderInput(c.sch.mod, HOST) for c in found])
        inputs = [RunnerInput(r.artifact_path, "cpu", c.args_info) for r, c in zip(built, found)] * 2
        runner = TrackerRunner(address, config=MeasureConfig(evaluator="fixed", number=1, repeat=1, min_repeat_ms=0,
                                                             cooldown_sec=0.8), board_wait_sec=60, hooks=board)
        old = int(in_site.pid_file.read_text())  # type: ignore[attr-defined]
        killer = threading.Timer(1.2, _kill_server, (in_site,))
        killer.start()
        try:
            results = [f.result() for f in runner.run(inputs)]
        finally:
            killer.join()
            runner.close()
    assert [r.error_msg for r in results] == [None] * 8, runner.stats.errors
    assert runner.stats.sessions_lost == 1 and runner.stats.unmeasured == 0 and runner.stats.failed == 0
    assert board.restarts == 1
    assert "board hot: the RPC server is gone; restarting it (attempt 1 of 3)" in notes
    assert any(note.startswith("board hot: RPC server back (pid ") for note in notes)
    assert int(in_site.pid_file.read_text()) != old  # type: ignore[attr-defined]
    # the batch's sessions ended with it: the restarted server is free for the next batch at once
    deadline = time.monotonic() + 5
    while device_counts(tracker_summary(_address(in_site)), "hot") != (1, 1) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert device_counts(tracker_summary(_address(in_site)), "hot") == (1, 1)


# ----------------------------------------------------------------------------- through the tuning pipeline


def test_tune_on_the_board_records_heat_and_goes_on_after_its_server_is_killed(in_site: Site, tmp_path: Path) -> None:
    """``tune --board hot`` as the CLI builds it: heat around every batch, the killed server is back, nothing lost."""
    from edgetune.api import tune_options
    from edgetune.errors import TuningInterrupted
    from edgetune.tuning import run_tune
    from edgetune.tuning.progress import ProgressSink

    class KillAfterFirstBatch(ProgressSink):
        def __init__(self) -> None:
            self.phases: list[str] = []
            self.batches = 0

        def on_phase(self, progress) -> None:
            self.phases.append(progress.phase)

        def on_batch(self, progress, task) -> None:
            self.batches += 1
            if self.batches == 1:
                _kill_server(in_site)

    out = tmp_path / "run"
    options = tune_options(
        "demo:tiny-cnn", board="hot", trials=20, out=out, evaluate=False, warm_start="off",
        overrides={"tuning": {"num_trials_per_iter": 8},
                   "measure": {"evaluator": "fixed", "number": 1, "repeat": 1, "min_repeat_ms": 0}},
    )
    sink = KillAfterFirstBatch()
    old = int(in_site.pid_file.read_text())  # type: ignore[attr-defined]
    try:
        summary = run_tune(options, sink=sink)
    except TuningInterrupted as error:  # a KeyboardInterrupt: it would end the whole pytest session
        pytest.fail(f"the run stopped: {error}")
    assert not summary.interrupted and sink.batches >= 2
    health = summary.measurement["board_health"]
    assert health["server_restarts"] == 1 and health["hottest_c"] == 45.0, health
    assert "board hot: the RPC server is gone; restarting it (attempt 1 of 3)" in sink.phases
    assert int(in_site.pid_file.read_text()) != old  # type: ignore[attr-defined]
    assert summary.measurement["unmeasured"] == 0
    heat = [json.loads(line) for line in (out / "board-heat.jsonl").read_text().splitlines()]
    whens = [h["when"] for h in heat]
    assert whens.count("before") == whens.count("after") >= 2 and whens[0] == "before"  # every runner batch
    assert all(h["max_temp_c"] == 45.0 and h["board"] == "hot" for h in heat)
    assert health["readings"] == len(heat)
    assert json.loads((out / "summary.json").read_text())["measurement"]["board_health"] == health
    # the history says which board measured what; boards status reads it back
    with closing(sqlite3.connect(out / "history.db")) as conn:
        rows = conn.execute("SELECT board_id, COUNT(*), COUNT(DISTINCT workload_id) FROM records GROUP BY board_id").fetchall()
    # every measured record names its server; a candidate served from the history (its module was
    # measured already, e.g. as a task's default schedule) is stored under the key alone
    measured = [row for row in rows if "@" in row[0]]
    assert len(measured) == 1 and measured[0][0].startswith("hot@127.0.0.1:"), rows
    assert all(row[0] == "hot" for row in rows if "@" not in row[0]), rows
    board_id, count, workloads = measured[0]
    status = in_site.cli("boards", "status", "hot", "--db", str(out / "history.db"))
    assert status.returncode == 0, status.stdout + status.stderr
    lines = status.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("history: ") and line.endswith(str(out / "history.db")))
    assert lines[at + 1].split() == ["BOARD", "RECORDS", "FAILED", "WORKLOADS", "LAST", "MEASURED", "(UTC)"]
    table = [line.split() for line in lines[at + 2 : at + 2 + len(rows)]]
    assert [board_id, str(count), "0", str(workloads)] in [cells[:4] for cells in table], lines
    data = json.loads(in_site.cli("boards", "status", "hot", "--db", str(out / "history.db"), "--json").stdout)
    assert len(data["history"]["boards"]) == len(rows)
    (entry,) = [e for e in data["history"]["boards"] if e["board_id"] == board_id]
    assert entry["board_id"] == board_id and entry["records"] == count and len(entry["workloads"]) == workloads
    assert sum(w["records"] for w in entry["workloads"]) == count and all(w["task"] for w in entry["workloads"])
