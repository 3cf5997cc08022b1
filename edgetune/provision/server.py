"""The TVM RPC server on the board: detached, pinned, registered under the profile's key.

Started with ``setsid nohup`` so it outlives the SSH session, with its pid in
``REMOTE/server.pid`` and its output in ``REMOTE/server.log``. ``setsid`` makes
the server the leader of its own process group, so stopping it signals the
whole group (TVM forks ``popen_worker`` children that a plain kill leaves
behind). ``systemd --user`` units are not used: many board images run without
a user manager, and a pid file works everywhere.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any, Callable

from .detect import BoardFacts
from .inventory import BoardEntry
from .runtime import venv_python
from .ssh import BoardConnection

MARKER = "tvm.exec.rpc_server"


@dataclass(frozen=True)
class ServerConfig:
    """Everything that, when changed, requires restarting the board's server."""

    key: str
    tracker: str
    host: str
    port: int
    custom_addr: str
    cores: tuple[int, ...]
    threads: int
    tvm: str

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True, default=list)


def server_config(entry: BoardEntry, profile: Any, facts: BoardFacts, tracker_host: str, tracker_port: int,
                  tvm_version: str) -> ServerConfig:
    cores = tuple(c for c in profile.device.core_affinity if not facts.cores or c < facts.cores)
    if entry.mode == "tunnel":
        # through the tunnel: the tracker is on the board's loopback, and the
        # host reaches the server on its own loopback at the same port
        tracker, host, custom = f"127.0.0.1:{tracker_port}", "127.0.0.1", "127.0.0.1"
    else:
        tracker, host, custom = f"{tracker_host}:{tracker_port}", "0.0.0.0", entry.host
    return ServerConfig(entry.rpc_key(profile), tracker, host, entry.rpc_port, custom, cores,
                        profile.device.num_threads, tvm_version)


def server_pid(connection: BoardConnection, base: str) -> int:
    """Pid of the board's running server, 0 when none runs."""
    script = (
        f"pid=$(cat {base}/server.pid 2>/dev/null) && [ -n \"$pid\" ] && kill -0 \"$pid\" 2>/dev/null "
        f"&& tr '\\0' ' ' < /proc/$pid/cmdline | grep -q {MARKER} && echo $pid"
    )
    result = connection.run(script, timeout_sec=30)
    out = result.stdout.strip()
    return int(out) if out.isdigit() else 0


def running_config(connection: BoardConnection, base: str) -> str:
    return connection.run(f"cat {base}/server.json 2>/dev/null", timeout_sec=30).stdout.strip()


def stop_server(connection: BoardConnection, base: str) -> bool:
    """Stop the board's server (whole process group); whether one was running."""
    pid = server_pid(connection, base)
    if pid:
        connection.run(
            # a killed server may stay a zombie until init reaps it: its empty cmdline ends the wait
            f"kill -TERM -{pid} 2>/dev/null || kill -TERM {pid}; i=0; "
            f"while tr '\\0' ' ' < /proc/{pid}/cmdline 2>/dev/null | grep -q {MARKER} && [ $i -lt 50 ]; "
            f"do sleep 0.1; i=$((i+1)); done; "
            f"kill -KILL -{pid} 2>/dev/null; true",
            timeout_sec=30,
        )
    connection.run(f"rm -f {base}/server.pid {base}/server.json", timeout_sec=30)
    return bool(pid)


def set_governor(connection: BoardConnection, governor: str, cores: tuple[int, ...], facts: BoardFacts,
                 log: Callable[[str], None]) -> None:
    """Set the CPU frequency governor where permitted; warn otherwise (never fatal)."""
    cpus = cores or tuple(range(facts.cores))
    files = " ".join(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor" for c in cpus)
    result = connection.run(
        f"ok=1; for f in {files}; do echo {shlex.quote(governor)} > $f 2>/dev/null || ok=0; done; [ $ok = 1 ]",
        timeout_sec=30,
    )
    if not result.ok:
        log(f"WARNING: could not set the {governor!r} CPU governor (no cpufreq or no permission); "
            f"as root on the board: echo {governor} | tee {files}")


def start_server(connection: BoardConnection, base: str, config: ServerConfig, facts: BoardFacts,
                 log: Callable[[str], None]) -> tuple[int, bool]:
    """Start the server unless one runs with this exact config; return (pid, started)."""
    pid = server_pid(connection, base)
    if pid and running_config(connection, base) == config.to_json():
        return pid, False
    if pid:
        log(f"restarting the RPC server (pid {pid}): its settings changed")
        stop_server(connection, base)
    pin = ""
    if config.cores:
        if facts.taskset:
            pin = f"taskset -c {','.join(map(str, config.cores))} "
        else:
            log("WARNING: taskset not found on the board; the server is not pinned to the profile's cores")
    args = [
        venv_python(base), "-m", MARKER, "--tracker", config.tracker, "--key", config.key,
        "--host", config.host, "--port", str(config.port), "--port-end", str(config.port + 1),
        "--custom-addr", config.custom_addr,
    ]
    script = (
        f"cd {base} && printf '%s' {shlex.quote(config.to_json())} > server.json && "
        f"TVM_NUM_THREADS={config.threads} setsid nohup {pin}{shlex.join(args)} "
        f"</dev/null >server.log 2>&1 & echo $! > {base}/server.pid; cat {base}/server.pid"
    )
    result = connection.run(script, timeout_sec=60, check=True)
    pid = int(result.stdout.strip().splitlines()[-1])
    where = f"cores {','.join(map(str, config.cores))}" if config.cores else "all cores"
    log(f"started the RPC server on the board (pid {pid}, key {config.key!r}, {where}, log {base}/server.log)")
    return pid, True


def server_log_tail(connection: BoardConnection, base: str, lines: int = 5) -> str:
    result = connection.run(f"tail -n {lines} {base}/server.log 2>/dev/null", timeout_sec=30)
    return " | ".join(line.strip() for line in result.stdout.splitlines() if line.strip())
