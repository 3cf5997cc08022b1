"""Beyond one host: a board farm of 8, 32 and 128 boards fed by 1-4 build hosts, simulated (issue 17).

Two phases.

1. **Calibration** (real components, on this machine, under two minutes): the
   script measures what the simulation needs instead of assuming it.

   * build: a real :class:`edgetune.builder.builder.WarmBuilder` with one
     worker builds a batch of real MetaSchedule candidates (replay-trace
     samples of a ``demo:resnet18`` conv2d task, target
     ``{"kind": "llvm", "num-cores": 2}``); seconds per candidate on one
     worker, workers started outside the timed window.
   * board: the same candidates measured by a real
     :class:`edgetune.measure.runner.TrackerRunner` on the loopback board
     (:class:`edgetune.board.local.LocalBoard`, one RPC server) with the host
     profile's ``[measure]`` settings: upload + load + timing per candidate
     (``MeasureStats.upload_seconds + device_seconds``). This is the x86
     loopback board, not an ARM board; the ``board-bound`` scenario adds the
     1 s per candidate that ``benchmarks/board_farm.py`` used to play a board
     slower than the host (``measure.cooldown_sec = 1``).
   * tracker: real ``tracker_summary`` round trips against the LocalBoard's
     TVM tracker and real ``request_board`` calls (tracker request + RPC
     session to the server). The tracker is one Python process: its service
     time is the CPU its process group spends per call (/proc, clock ticks);
     the rest of a round trip is latency. Session set-up = request_board
     minus one query round trip. 4 concurrent clients are timed too, for
     reference (client threads share one GIL on a loaded machine).
   * history: real ``HistoryDatabase.commit_measurement`` calls of those
     candidates' records into SQLite and, when a PostgreSQL server can be
     started as ``tests/conftest.py``'s ``postgres_url`` does, PostgreSQL; one
     writer and 4 concurrent writers (threads, one handle each, as 4 tuning
     processes would hold). Serialised time per write: SQLite's 4-writer
     figure (one writer at a time); PostgreSQL's server CPU per write (the
     postmaster and its children), the rest of a write being client side.
   * search: MetaSchedule's evolutionary search and cost model run on the
     host too; that figure is not re-measured here but taken from RESULTS.md
     (builder_runner_overhead, edgetune: median 5.2 s outside builder and
     runner for 32 candidates = 0.16 s per candidate), ``--search-sec``.

2. **Simulation** (pure Python, heapq): J concurrent tuning jobs (``edgetune
   tune`` processes), each looping as ``TrackerRunner`` and the pipeline do:
   search (host CPU, one worker) -> build the batch of N candidates on its
   host's W workers -> one tracker query, then k = max(1, min(N, free
   boards)) board requests, each served by the tracker one at a time; each
   granted board pays the session set-up, then takes candidates off the batch
   until none are left and is released -> commit_workload + N
   commit_measurement, served by the history database one at a time at its
   serialised time per write (the rest of a write is a delay in the job) -> next search. Jobs are spread over the H
   hosts (job j on host j mod H); ``--shared-builds`` puts every host's
   workers in one queue instead (what a distributed build service would
   give). J = max(2 x ceil(B / N), H x W): two jobs per group of N boards, so
   one job's batch is measured while the other searches and builds, and at
   least one job per host worker.

Output: a table of candidates committed per simulated minute, utilisation of
boards, host workers, tracker and database, and the bottleneck (the most
utilised resource), per scenario, boards and hosts; with ``--write-results``
also the RESULTS.md section and ``benchmarks/farm_simulation.png``.

Usage::

  python benchmarks/farm_simulation.py                          # calibrate, simulate, print
  python benchmarks/farm_simulation.py --quick                  # smaller calibration and horizon
  python benchmarks/farm_simulation.py --calibration benchmarks/farm_calibration.json  # reuse numbers
  python benchmarks/farm_simulation.py --write-results          # also RESULTS.md section + PNG
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
MARK = "farm_simulation"
CALIBRATION_FILE = HERE / "farm_calibration.json"
PLOT_FILE = HERE / "farm_simulation.png"
#: RESULTS.md, builder_runner_overhead (edgetune, seeds 0-2): 5.2 s of wall clock outside builder.build() and
#: the runner (search, cost model, MetaSchedule) for 32 measured candidates
SEARCH_SEC_FROM_RESULTS = 5.2 / 32
#: board_farm.py's stand-in for a board slower than the host (measure.cooldown_sec = 1)
BOARD_BOUND_EXTRA_SEC = 1.0
CONCURRENT_CLIENTS = 4
#: simulated seconds of the "builds free" cases
EXTRA_HORIZON_SEC = 120.0


# --------------------------------------------------------------------------- parameters


@dataclass
class Params:
    """What one simulated farm is made of; times in seconds."""

    boards: int
    hosts: int
    workers_per_host: int = 2
    batch: int = 8  # tuning.num_trials_per_iter of the host profile
    jobs: int = 0  # 0: max(2 x ceil(boards / batch), hosts x workers_per_host)
    build_sec: float = 0.3  # per candidate, one worker
    search_sec: float = SEARCH_SEC_FROM_RESULTS  # per candidate, one worker, sequential per job
    device_sec: float = 0.1  # per candidate on a board (upload + load + timing)
    session_sec: float = 0.05  # per granted board: RPC session set-up (board side, not the tracker)
    tracker_sec: float = 0.002  # tracker service time (its CPU) per query of free boards
    tracker_request_sec: float = 0.002  # tracker service time (its CPU) per board request and the board's return
    tracker_latency_sec: float = 0.0  # round trip outside the tracker's CPU (network, client): a delay, not serialised
    db_sec: float = 0.005  # history service time per write (serialised: SQLite's write lock, PostgreSQL's server CPU)
    db_latency_sec: float = 0.0  # rest of a write's time (client side: JSON, SQLAlchemy, round trips): a delay per job
    shared_builds: bool = False
    horizon_sec: float = 1800.0

    def job_count(self) -> int:
        return self.jobs or max(2 * math.ceil(self.boards / self.batch), self.hosts * self.workers_per_host)


@dataclass
class SimResult:
    params: Params
    committed: int
    built: int
    measured: int
    per_min: float
    util: dict[str, float]
    bounds: dict[str, float]  # candidates / min each resource could give alone
    bottleneck: str
    tracker_requests: int
    db_writes: int
    max_board_queue: int = 0


# --------------------------------------------------------------------------- simulation


class _Server:
    """A FIFO queue in front of ``slots`` identical servers; counts busy time inside the horizon."""

    def __init__(self, sim: "_Sim", slots: int) -> None:
        self.sim = sim
        self.free = slots
        self.queue: deque[tuple[float, Callable[[], None]]] = deque()
        self.busy = 0.0
        self.served = 0

    def submit(self, duration: float, done: Callable[[], None]) -> None:
        if self.free > 0:
            self._start(duration, done)
        else:
            self.queue.append((duration, done))

    def _start(self, duration: float, done: Callable[[], None]) -> None:
        self.free -= 1
        start = self.sim.now
        self.busy += max(0.0, min(start + duration, self.sim.horizon) - min(start, self.sim.horizon))

        def finish() -> None:
            self.served += 1
            self.free += 1
            if self.queue:
                self._start(*self.queue.popleft())
            done()

        self.sim.at(start + duration, finish)


class _Sim:
    def __init__(self, p: Params) -> None:
        self.p = p
        self.now = 0.0
        self.horizon = p.horizon_sec
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        pools = 1 if p.shared_builds else p.hosts
        slots = p.workers_per_host * (p.hosts if p.shared_builds else 1)
        self.hosts = [_Server(self, slots) for _ in range(pools)]
        self.tracker = _Server(self, 1)
        self.db = _Server(self, 1)
        self.free_boards = p.boards
        self.board_waiters: deque[Callable[[], None]] = deque()  # granted requests waiting for a free board
        self.board_busy = 0.0
        self.max_board_queue = 0
        self.built = self.measured = self.committed = 0

    def at(self, when: float, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, action))

    def after(self, delay: float, action: Callable[[], None]) -> None:
        if delay > 0:
            self.at(self.now + delay, action)
        else:
            action()

    def run(self) -> None:
        for job in range(self.p.job_count()):
            self.at(0.0, lambda job=job: self._search(job))
        while self._events:
            when, _seq, action = heapq.heappop(self._events)
            if when > self.horizon:
                break
            self.now = when
            action()

    # -- one job's loop ----------------------------------------------------------
    def _host(self, job: int) -> _Server:
        return self.hosts[0] if self.p.shared_builds else self.hosts[job % self.p.hosts]

    def _search(self, job: int) -> None:
        self._host(job).submit(self.p.batch * self.p.search_sec, lambda: self._build(job))

    def _build(self, job: int) -> None:
        left = [self.p.batch]

        def one_built() -> None:
            self.built += 1
            left[0] -= 1
            if left[0] == 0:
                self._measure(job)

        for _ in range(self.p.batch):
            self._host(job).submit(self.p.build_sec, one_built)

    def _measure(self, job: int) -> None:
        pending = [self.p.batch]  # candidates not yet taken by a board
        settled = [0]

        def boards_known() -> None:  # the runner's tracker query answered: how many boards to ask for
            wanted = max(1, min(self.p.batch, self.free_boards))
            for _ in range(wanted):
                self.after(self.p.tracker_latency_sec, lambda: self.tracker.submit(self.p.tracker_request_sec, request_answered))

        def request_answered() -> None:
            if self.free_boards > 0:
                granted()
            else:  # the tracker keeps the request until a board is released
                self.board_waiters.append(granted)
                self.max_board_queue = max(self.max_board_queue, len(self.board_waiters))

        def granted() -> None:
            self.free_boards -= 1
            if pending[0] == 0:  # the batch was finished by other boards: the session ends at once
                self._release_board(self.now)
                return
            self._board_hold(self.now, self.p.session_sec, take_next)

        def take_next(started: float) -> None:
            if pending[0] == 0:
                self._release_board(started)
                return
            pending[0] -= 1
            self._board_hold(started, self.p.device_sec, lambda end: measured(end))

        def measured(end: float) -> None:
            self.measured += 1
            settled[0] += 1
            if settled[0] == self.p.batch:
                self._commit(job)
            take_next(end)

        self.after(self.p.tracker_latency_sec, lambda: self.tracker.submit(self.p.tracker_sec, boards_known))

    def _board_hold(self, start: float, duration: float, then: Callable[[float], None]) -> None:
        self.board_busy += max(0.0, min(start + duration, self.horizon) - min(start, self.horizon))
        self.at(start + duration, lambda: then(start + duration))

    def _release_board(self, _when: float) -> None:
        self.free_boards += 1
        if self.board_waiters:
            self.board_waiters.popleft()()

    def _commit(self, job: int) -> None:
        done = [0]

        def write() -> None:  # one after the other, as the measure callback commits them
            self.after(self.p.db_latency_sec, lambda: self.db.submit(self.p.db_sec, written))

        def written() -> None:  # the first write is the batch's commit_workload, then one per candidate
            done[0] += 1
            if done[0] > 1:
                self.committed += 1
            if done[0] == self.p.batch + 1:
                self._search(job)
            else:
                write()

        write()


def bounds(p: Params) -> dict[str, float]:
    """Candidates per minute each resource could sustain alone (the others free).

    Boards, hosts and database: upper bounds. Tracker: when every batch is spread over min(batch, boards)
    boards (a batch that finds fewer free boards asks the tracker less).
    """
    k = min(p.batch, p.boards)
    board_sec = p.device_sec  # session set-up left out: a strict upper bound
    return {
        "boards": p.boards * 60.0 / board_sec if board_sec > 0 else math.inf,
        "hosts": p.hosts * p.workers_per_host * 60.0 / (p.build_sec + p.search_sec) if p.build_sec + p.search_sec > 0 else math.inf,
        "tracker": p.batch * 60.0 / (p.tracker_sec + k * p.tracker_request_sec) if p.tracker_sec + k * p.tracker_request_sec > 0 else math.inf,
        "database": p.batch * 60.0 / ((p.batch + 1) * p.db_sec) if p.db_sec > 0 else math.inf,
    }


def simulate(p: Params) -> SimResult:
    sim = _Sim(p)
    sim.run()
    horizon = p.horizon_sec
    worker_slots = p.hosts * p.workers_per_host
    util = {
        "boards": sim.board_busy / (p.boards * horizon),
        "hosts": sum(h.busy for h in sim.hosts) / (worker_slots * horizon),
        "tracker": sim.tracker.busy / horizon,
        "database": sim.db.busy / horizon,
    }
    bottleneck = max(util, key=util.get)
    if util[bottleneck] < 0.8:
        bottleneck = f"jobs (none >= 80 %, top: {bottleneck})"
    return SimResult(
        params=p, committed=sim.committed, built=sim.built, measured=sim.measured,
        per_min=sim.committed / horizon * 60.0, util=util, bounds=bounds(p), bottleneck=bottleneck,
        tracker_requests=sim.tracker.served, db_writes=sim.db.served, max_board_queue=sim.max_board_queue,
    )


# --------------------------------------------------------------------------- calibration


@dataclass
class Calibration:
    machine: str = ""
    load_before: float = 0.0
    load_after: float = 0.0
    task: str = ""
    candidates: int = 0
    build_sec: float = 0.0  # per candidate, one WarmBuilder worker
    device_sec: float = 0.0  # upload + load + timing per candidate on the loopback board
    device_timing_sec: float = 0.0  # of which the timing calls
    measure_settings: str = ""
    tracker_rtt_sec: float = 0.0  # one client, median tracker_summary round trip
    tracker_sec: float = 0.0  # tracker process CPU seconds per tracker_summary (its service time)
    tracker_concurrent_sec: float = 0.0  # 4 clients: wall / requests (client side and load included)
    request_board_sec: float = 0.0  # median request_board (tracker request + RPC session)
    tracker_request_sec: float = 0.0  # tracker process CPU seconds per request_board and the server's return
    session_sec: float = 0.0  # request_board - tracker round trip
    db: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> {single_sec, concurrent_sec[, server_cpu_sec]}
    db_note: str = ""
    search_sec: float = SEARCH_SEC_FROM_RESULTS
    seconds: float = 0.0


def _candidates(count: int) -> tuple[Any, Any, list[Any], str]:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from _pipeline import BENCH_TARGET
    from edgetune.builder.intrinsics import load_tensor_intrinsics
    from edgetune.tasks import load_model, prepare_for_tuning

    target = tvm.target.Target(BENCH_TARGET)
    model = load_model("demo:resnet18@64")
    extracted = ms.relax_integration.extract_tasks(prepare_for_tuning(model.mod, target), target)
    convs = sorted((t for t in extracted if "conv2d" in t.task_name), key=lambda t: -t.weight)
    task = convs[0]
    load_tensor_intrinsics(target)
    ctx = ms.TuneContext(
        mod=task.dispatched[0], target=target, space_generator="post-order-apply",
        search_strategy="replay-trace", task_name=task.task_name, num_threads=1, rand_state=0,
    )
    ctx.pre_tuning(
        max_trials=count, num_trials_per_iter=count, design_spaces=ctx.generate_design_space(),
        database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel(),
    )
    found = list(ctx.generate_measure_candidates() or [])
    return target, ctx, found, f"demo:resnet18@64 {task.task_name}"


def _start_postgres() -> tuple[str, Callable[[], None]] | tuple[None, str]:
    """A throwaway PostgreSQL server as tests/conftest.py's postgres_url starts it: (url, stop) or (None, why)."""
    import shutil
    import socket
    import subprocess

    try:
        import psycopg  # noqa: F401
    except ImportError:
        return None, "psycopg not installed"
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb") if (p.parent / "pg_ctl").exists()]
    if not found:
        return None, "no PostgreSQL server binaries (initdb, pg_ctl)"
    bindir = max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    run_as: list[str] = []
    owner = None
    if os.geteuid() == 0:
        import pwd

        try:
            entry = pwd.getpwnam("postgres")
        except KeyError:
            return None, "running as root without a postgres user"
        run_as = [shutil.which("runuser") or "runuser", "-u", "postgres", "--"]
        owner = (entry.pw_uid, entry.pw_gid)
    base = Path(tempfile.mkdtemp(prefix="farm-pg-"))
    if owner:
        os.chown(base, *owner)
    data, log = base / "data", base / "server.log"

    def run(*cmd: object) -> subprocess.CompletedProcess:
        return subprocess.run([*run_as, *map(str, cmd)], capture_output=True, text=True, timeout=120)

    init = run(bindir / "initdb", "-D", data, "-U", "edgetune", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
    if init.returncode:
        return None, f"initdb failed: {init.stderr.strip()[:200]}"
    hba = data / "pg_hba.conf"
    hba.write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")
    if owner:
        os.chown(hba, *owner)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # unlike the tests' throwaway cluster, durability stays on (fsync, synchronous_commit): a shared history's
    # commits are what is timed
    options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={base}"
    start = run(bindir / "pg_ctl", "start", "-w", "-t", "60", "-D", data, "-l", log, "-o", options)
    if start.returncode:
        return None, f"PostgreSQL did not start: {start.stderr.strip()[:200]}"

    def stop() -> None:
        run(bindir / "pg_ctl", "stop", "-m", "fast", "-w", "-D", data)
        shutil.rmtree(base, ignore_errors=True)

    stop.data_dir = data  # type: ignore[attr-defined]

    created = subprocess.run([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "edgetune", "farm"],
                             capture_output=True, text=True, timeout=60)
    if created.returncode:
        stop()
        return None, f"createdb failed: {created.stderr.strip()[:200]}"
    return f"postgresql://edgetune@127.0.0.1:{port}/farm", stop


def _server_cpu_seconds(data_dir: Path) -> float:
    """User + system CPU seconds of a PostgreSQL cluster: the postmaster and its children (backends, WAL writer)."""
    tick = os.sysconf("SC_CLK_TCK")
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat.parent.name) == postmaster or int(fields[1]) == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / tick


def _time_history(url: str, ctx: Any, target: Any, found: list[Any], run_secs: list[list[float]], writes: int,
                  data_dir: Path | None = None) -> dict[str, float]:
    """Median commit_measurement with one writer; wall / writes with CONCURRENT_CLIENTS writers; server CPU per write."""
    from tvm.s_tir import meta_schedule as ms

    from edgetune.history import open_history

    def records(db: Any) -> list[Any]:
        workload = db.commit_workload(ctx.mod)
        return [ms.database.TuningRecord(c.sch.trace, workload, secs, target, c.args_info) for c, secs in zip(found, run_secs)]

    db = open_history(url, board_id="farm")
    recs = records(db)
    cpu = _server_cpu_seconds(data_dir) if data_dir else 0.0
    single = []
    for i in range(writes):  # a distinct board per write: a new row each time, as a farm's writes are
        started = time.perf_counter()
        db.commit_measurement(recs[i % len(recs)], board=f"10.0.0.{i // len(recs)}:9090")
        single.append(time.perf_counter() - started)
    server_cpu = (_server_cpu_seconds(data_dir) - cpu) / writes if data_dir else None
    db.close()
    handles = [open_history(url, board_id=f"farm{w}") for w in range(CONCURRENT_CLIENTS)]
    each = max(1, writes // CONCURRENT_CLIENTS)

    def writer(w: int) -> None:
        mine = records(handles[w])
        for i in range(each):
            handles[w].commit_measurement(mine[i % len(mine)], board=f"10.1.{w}.{i // len(mine)}:9090")

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(CONCURRENT_CLIENTS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    for h in handles:
        h.close()
    out = {"single_sec": statistics.median(single), "concurrent_sec": wall / (each * CONCURRENT_CLIENTS), "writes": writes}
    if server_cpu is not None:
        out["server_cpu_sec"] = server_cpu
    return out


def _group_cpu_seconds(pgid: int) -> float:
    """User + system CPU seconds of every live process in process group ``pgid`` (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state ppid pgrp ... utime(11) stime(12)
            total += int(fields[11]) + int(fields[12])
    return total / tick


def calibrate(quick: bool) -> Calibration:
    from contextlib import closing

    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from edgetune.board.local import LocalBoard
    from edgetune.board.rpc_tracker import request_board, tracker_summary
    from edgetune.builder.builder import WarmBuilder
    from edgetune.measure.runner import TrackerRunner
    from edgetune.profile import load_profile

    began = time.monotonic()
    cal = Calibration(machine=f"{platform.machine()}, {os.cpu_count()} CPUs", load_before=os.getloadavg()[0])
    count = 8 if quick else 16
    target, ctx, found, cal.task = _candidates(count)
    cal.candidates = len(found)
    print(f"calibration: {len(found)} candidates of {cal.task}", file=sys.stderr, flush=True)

    with closing(WarmBuilder(timeout_sec=120, max_workers=1)) as builder:
        builder.start()  # worker start-up outside the timed window, as in a long run
        started = time.perf_counter()
        built = builder.build([BuilderInput(c.sch.mod, target) for c in found])
        cal.build_sec = (time.perf_counter() - started) / len(found)
        ok = [(c, b) for c, b in zip(found, built) if b.error_msg is None]
        print(f"calibration: build {cal.build_sec:.3f} s/candidate ({len(ok)} built)", file=sys.stderr, flush=True)

        measure = load_profile("host").measure
        cal.measure_settings = f"host profile [measure]: evaluator {measure.evaluator}, number {measure.number}, repeat {measure.repeat}, min_repeat_ms {measure.min_repeat_ms}"
        with LocalBoard(key="farm-cal", num_threads=1, log_dir=tempfile.mkdtemp(prefix="farm-cal-")) as board:
            address = board.address
            runner = TrackerRunner(address, config=measure)
            try:
                outcome = [f.result() for f in runner.run([RunnerInput(b.artifact_path, "cpu", c.args_info) for c, b in ok])]
            finally:
                runner.close()
            stats = runner.stats
            cal.device_sec = (stats.upload_seconds + stats.device_seconds) / max(1, stats.measured)
            cal.device_timing_sec = stats.device_seconds / max(1, stats.measured)
            run_secs = [[float(x) for x in (o.run_secs or [1e9])] for o in outcome]
            print(f"calibration: device {cal.device_sec:.3f} s/candidate ({stats.measured} measured)", file=sys.stderr, flush=True)

            tracker_group = board._tracker.pid  # the tracker's process group (orphan guard + TVM tracker)
            rounds = 20 if quick else 50
            rtts = []
            cpu = _group_cpu_seconds(tracker_group)
            for _ in range(rounds):
                started = time.perf_counter()
                tracker_summary(address, timeout_sec=10.0)
                rtts.append(time.perf_counter() - started)
            cal.tracker_sec = (_group_cpu_seconds(tracker_group) - cpu) / rounds
            cal.tracker_rtt_sec = statistics.median(rtts)
            each = rounds

            def client() -> None:
                for _ in range(each):
                    tracker_summary(address, timeout_sec=10.0)

            threads = [threading.Thread(target=client) for _ in range(CONCURRENT_CLIENTS)]
            started = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            cal.tracker_concurrent_sec = (time.perf_counter() - started) / (each * CONCURRENT_CLIENTS)

            requests = []
            count = 5 if quick else 10
            cpu = _group_cpu_seconds(tracker_group)
            for _ in range(count):
                started = time.perf_counter()
                session = request_board(address, session_timeout_sec=30.0, wait_sec=30.0)
                requests.append(time.perf_counter() - started)
                del session
                time.sleep(0.5)  # the server goes back into the tracker's pool (tracker work counted, not timed)
            cal.tracker_request_sec = (_group_cpu_seconds(tracker_group) - cpu) / count
            cal.request_board_sec = statistics.median(requests)
            cal.session_sec = max(0.0, cal.request_board_sec - cal.tracker_rtt_sec)
            print(f"calibration: tracker rtt {cal.tracker_rtt_sec * 1e3:.2f} ms, CPU {cal.tracker_sec * 1e3:.2f} ms/query, "
                  f"{cal.tracker_request_sec * 1e3:.2f} ms/request_board; 4 clients {cal.tracker_concurrent_sec * 1e3:.2f} ms/query; "
                  f"request_board {cal.request_board_sec * 1e3:.1f} ms", file=sys.stderr, flush=True)

    writes = 40 if quick else 160
    ok_found = [c for c, _b in ok]
    with tempfile.TemporaryDirectory(prefix="farm-db-") as tmp:
        cal.db["sqlite"] = _time_history(str(Path(tmp) / "history.db"), ctx, target, ok_found, run_secs, writes)
    url, stop = _start_postgres()
    if url is None:
        cal.db_note = f"PostgreSQL not timed: {stop}"
    else:
        try:
            cal.db["postgresql"] = _time_history(url, ctx, target, ok_found, run_secs, writes, data_dir=stop.data_dir)
        finally:
            stop()
        cal.db_note = "PostgreSQL: a local server started as tests/conftest.py does, but with fsync and synchronous_commit on"
    print(f"calibration: history {json.dumps(cal.db)}", file=sys.stderr, flush=True)
    cal.load_after = os.getloadavg()[0]
    cal.seconds = time.monotonic() - began
    return cal


# --------------------------------------------------------------------------- report


SCENARIOS = {
    "loopback": "device time as measured on the loopback board",
    "board-bound": f"device time + {BOARD_BOUND_EXTRA_SEC:g} s per candidate (board_farm.py's cooldown_sec = 1)",
}


def _db_service(cal: Calibration, db: str) -> float:
    """Serialised time per write: PostgreSQL's server CPU (one core: conservative); SQLite's 4-writer figure (one writer at a time)."""
    figures = cal.db[db]
    return figures.get("server_cpu_sec") or figures["concurrent_sec"]


def params_for(cal: Calibration, scenario: str, boards: int, hosts: int, db: str, args: argparse.Namespace) -> Params:
    device = cal.device_sec + (BOARD_BOUND_EXTRA_SEC if scenario == "board-bound" else 0.0)
    return Params(
        boards=boards, hosts=hosts, workers_per_host=args.workers_per_host, batch=args.batch,
        build_sec=cal.build_sec, search_sec=args.search_sec if args.search_sec is not None else cal.search_sec,
        device_sec=device, session_sec=cal.session_sec, tracker_sec=cal.tracker_sec,
        tracker_request_sec=cal.tracker_request_sec, tracker_latency_sec=max(0.0, cal.tracker_rtt_sec - cal.tracker_sec),
        db_sec=_db_service(cal, db), db_latency_sec=max(0.0, cal.db[db]["single_sec"] - _db_service(cal, db)), shared_builds=args.shared_builds, horizon_sec=args.horizon,
    )


def run_grid(cal: Calibration, args: argparse.Namespace) -> list[SimResult]:
    db = "postgresql" if "postgresql" in cal.db else "sqlite"
    out = []
    for scenario in args.scenarios:
        for boards in args.boards:
            for hosts in args.hosts:
                result = simulate(params_for(cal, scenario, boards, hosts, db, args))
                result.scenario = scenario  # type: ignore[attr-defined]
                result.db = db  # type: ignore[attr-defined]
                out.append(result)
    return out


def _fmt_bound(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:,.0f}"


def report_text(cal: Calibration, results: list[SimResult], extra: list[SimResult], args: argparse.Namespace, command: str) -> str:
    db = getattr(results[0], "db", "sqlite")
    ms_ = lambda s: f"{s * 1e3:.2f} ms"  # noqa: E731
    lines = [
        "## Board farm beyond one host: 8-128 boards, 1-4 build hosts (issue 17, simulation)",
        "",
        f"Reproduce: `{command}` ({cal.machine}, calibration {cal.seconds:.0f} s, load average {cal.load_before:.1f} before, "
        f"{cal.load_after:.1f} after; the simulation itself takes seconds). Calibration saved as "
        "`benchmarks/farm_calibration.json` (by a run with `--write-results`); `--calibration FILE` re-runs the simulation on it.",
        "",
        "Calibration, measured by the script with the real components (see its docstring):",
        "",
        "| what | measured | how |",
        "|---|---|---|",
        f"| build, per candidate, one host worker | {cal.build_sec:.3f} s | `WarmBuilder(max_workers=1)`, {cal.candidates} replay-trace candidates of {cal.task}, target llvm num-cores 2 |",
        f"| search + cost model, per candidate | {args.search_sec if args.search_sec is not None else cal.search_sec:.3f} s | not measured here: RESULTS.md builder_runner_overhead (5.2 s / 32 candidates outside builder and runner) |",
        f"| board, per candidate | {cal.device_sec:.3f} s (timing {cal.device_timing_sec:.3f} s) | `TrackerRunner` on the loopback `LocalBoard` (x86, 1 thread), {cal.measure_settings}; upload + load + timing |",
        f"| tracker query round trip, one client | {ms_(cal.tracker_rtt_sec)} | median `tracker_summary` (a probe connection, then TVM's `connect_tracker` + `summary`) |",
        f"| tracker CPU per query (its service time) | {ms_(cal.tracker_sec)} | CPU seconds of the tracker's process group / queries |",
        f"| tracker query, {CONCURRENT_CLIENTS} clients at once | {ms_(cal.tracker_concurrent_sec)} per query | wall / queries: client threads (one GIL) and the loaded machine included, so not the tracker's capacity |",
        f"| `request_board` (tracker request + RPC session) | {ms_(cal.request_board_sec)} | median; session set-up = this - query round trip = {ms_(cal.session_sec)} |",
        f"| tracker CPU per board request | {ms_(cal.tracker_request_sec)} | CPU seconds of the tracker's process group per `request_board`, the server's return to the pool included |",
    ]
    for kind, d in cal.db.items():
        lines.append(
            f"| history write, {kind} | {ms_(d['single_sec'])} one writer; {ms_(d['concurrent_sec'])} per write with {CONCURRENT_CLIENTS} writers | "
            f"`commit_measurement`, {int(d['writes'])} writes |"
        )
        if "server_cpu_sec" in d:
            lines.append(f"| PostgreSQL server CPU per write | {ms_(d['server_cpu_sec'])} | CPU seconds of the postmaster and its children / writes (one writer) |")
    lines += [
        "",
        f"{cal.db_note}." if cal.db_note else "",
        "",
        f"Simulated: {args.horizon / 60:.0f} min of tuning, batch {args.batch} (host profile), {args.workers_per_host} build workers per host "
        f"(this machine's cores), J = max(2 x ceil(boards / {args.batch}), hosts x {args.workers_per_host}) concurrent tuning jobs spread over the hosts, history on {db} "
        f"(serialised per write: {'the server CPU per write, on one core' if db == 'postgresql' else f'the {CONCURRENT_CLIENTS}-writer figure'}; "
        f"the rest of a one-writer commit is a delay in the job), builds {'in one queue across hosts' if args.shared_builds else 'on the job' + chr(39) + 's own host'}. "
        "Utilisation = busy time / (resource count x simulated time); bound = candidates/min that resource alone would allow. "
        "Plot: `benchmarks/farm_simulation.png`.",
        "",
        "| scenario | boards | hosts | jobs | candidates / min | boards busy | host workers busy | tracker busy | database busy | bottleneck | bound: boards / hosts / tracker / db |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        b = r.bounds
        lines.append(
            f"| {r.scenario} | {r.params.boards} | {r.params.hosts} | {r.params.job_count()} | {r.per_min:,.0f} | {r.util['boards']:.0%} | {r.util['hosts']:.0%} "
            f"| {r.util['tracker']:.1%} | {r.util['database']:.1%} | {r.bottleneck} "
            f"| {_fmt_bound(b['boards'])} / {_fmt_bound(b['hosts'])} / {_fmt_bound(b['tracker'])} / {_fmt_bound(b['database'])} |"
        )
    if extra:
        lines += [
            "",
            "Beyond the grid, where the database and the tracker bind: 128 boards with 8-64 build hosts; and builds and "
            "search free (hosts never wait) with the loopback board's time, the history on each database, 128-2048 boards "
            f"({EXTRA_HORIZON_SEC / 60:g} simulated min):",
            "",
            "| case | boards | jobs | candidates / min | boards busy | host workers busy | tracker busy | database busy | bottleneck |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in extra:
            lines.append(
                f"| {r.case} | {r.params.boards} | {r.params.job_count()} | {r.per_min:,.0f} | {r.util['boards']:.0%} | {r.util['hosts']:.0%} "
                f"| {r.util['tracker']:.1%} | {r.util['database']:.1%} | {r.bottleneck} |"
            )
    return "\n".join(line for line in lines)


def extra_cases(cal: Calibration, args: argparse.Namespace) -> list[SimResult]:
    """Beyond the grid: where the tracker and the database bind once build hosts stop being the limit."""
    out = []
    for hosts in (8, 16, 32, 64):  # 128 boards, more build hosts than the grid
        r = simulate(params_for(cal, "board-bound", 128, hosts, "postgresql" if "postgresql" in cal.db else "sqlite", args))
        r.case = f"board-bound, {hosts} hosts, history {'postgresql' if 'postgresql' in cal.db else 'sqlite'}"  # type: ignore[attr-defined]
        out.append(r)
    for db in cal.db:
        for boards in (128, 512, 2048):
            p = params_for(cal, "loopback", boards, 1, db, args)
            p.build_sec = p.search_sec = 0.0
            p.horizon_sec = min(p.horizon_sec, EXTRA_HORIZON_SEC)  # tens of thousands of candidates a minute: events add up
            r = simulate(p)
            r.case = f"loopback, builds free, history {db}"  # type: ignore[attr-defined]
            out.append(r)
    return out


def plot(results: list[SimResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = list(dict.fromkeys(r.scenario for r in results))
    fig, axes = plt.subplots(1, len(scenarios), figsize=(6 * len(scenarios), 4.2), squeeze=False)
    for ax, scenario in zip(axes[0], scenarios):
        mine = [r for r in results if r.scenario == scenario]
        for boards in sorted({r.params.boards for r in mine}):
            rows = sorted((r for r in mine if r.params.boards == boards), key=lambda r: r.params.hosts)
            ax.plot([r.params.hosts for r in rows], [r.per_min for r in rows], marker="o", label=f"{boards} boards")
            for r in rows:
                ax.annotate(r.bottleneck.split(" ")[0][:5], (r.params.hosts, r.per_min), fontsize=7, textcoords="offset points", xytext=(3, 3))
        ax.set_title(f"{scenario}: {SCENARIOS[scenario]}", fontsize=8)
        ax.set_xlabel("build hosts")
        ax.set_ylabel("candidates / min (simulated)")
        ax.set_xticks(sorted({r.params.hosts for r in mine}))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("edgetune farm simulation: throughput and bottleneck (label) by boards and build hosts", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=Path, help="reuse saved calibration numbers (JSON written by an earlier run)")
    parser.add_argument("--quick", action="store_true", help="smaller calibration and a 10 min horizon")
    parser.add_argument("--boards", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--workers-per-host", type=int, default=2, help="build workers per host (default 2: this machine's cores)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--search-sec", type=float, default=None, help=f"host search seconds per candidate (default {SEARCH_SEC_FROM_RESULTS:.3f}, RESULTS.md)")
    parser.add_argument("--horizon", type=float, default=None, help="simulated seconds (default 1800; 600 with --quick)")
    parser.add_argument("--shared-builds", action="store_true", help="one build queue across hosts instead of per-host pools")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    if args.horizon is None:
        args.horizon = 600.0 if args.quick else 1800.0
    if args.calibration:
        data = json.loads(args.calibration.read_text())
        cal = Calibration(**data)
    else:
        sys.path.insert(0, str(HERE))
        cal = calibrate(args.quick)
        # the committed calibration is replaced only with --write-results
        saved = CALIBRATION_FILE if args.write_results else Path(tempfile.gettempdir()) / f"farm_calibration-{os.getpid()}.json"
        saved.write_text(json.dumps(asdict(cal), indent=2) + "\n")
        print(f"calibration saved to {saved} (reuse: --calibration {saved})", file=sys.stderr)
    results = run_grid(cal, args)
    extra = extra_cases(cal, args)
    command = "python benchmarks/farm_simulation.py" + (f" --calibration {args.calibration}" if args.calibration else "") + (" --quick" if args.quick else "") + (" --write-results" if args.write_results else "")
    text = report_text(cal, results, extra, args, command)
    print(text)
    if args.write_results:
        plot(results, PLOT_FILE)
        print(f"plot: {PLOT_FILE}", file=sys.stderr)
        from _results import write_section

        write_section(text, MARK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
