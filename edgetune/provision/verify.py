"""Prove a provisioned board works: registered in the tracker, and real code runs there.

The round trip builds a tiny kernel for the profile's target on the host
(cross-compiled for a board), uploads it through the tracker, runs it on the
board and compares with numpy - the same path every tuning measurement takes.
"""

from __future__ import annotations

import gc
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..common.rpc import remote_module, unique_remote_name
from ..board.rpc_tracker import TrackerAddress, device_counts, request_session, tracker_summary
from ..builder.builder import shared_library_linker
from ..errors import ProvisionError


@dataclass(frozen=True)
class RoundTrip:
    """Outcome of running the verification kernel on the board."""

    max_error: float
    seconds: float


def wait_registered(
    address: TrackerAddress, timeout_sec: float, hint: Callable[[], str], alive: Callable[[], bool] | None = None
) -> int:
    """Wait until ``address.key`` has a server at the tracker; ``hint`` explains a failure.

    ``alive`` (checked every few seconds) turns a server that died at start
    (a broken runtime, a port in use) into an immediate error instead of a timeout.
    """
    deadline = time.monotonic() + timeout_sec
    next_check = time.monotonic() + 3.0
    while True:
        registered, _free = device_counts(tracker_summary(address, timeout_sec=10), address.key)
        if registered:
            return registered
        if alive is not None and time.monotonic() > next_check:
            next_check = time.monotonic() + 5.0
            if not alive():
                raise ProvisionError(
                    f"the board's RPC server for key {address.key!r} exited before registering; {hint()}"
                )
        if time.monotonic() > deadline:
            raise ProvisionError(
                f"the board's RPC server did not register under key {address.key!r} at the tracker "
                f"{address.host}:{address.port} within {timeout_sec:g} s; {hint()}"
            )
        time.sleep(1.0)


def _kernel(target: Any) -> Any:
    """``C = A * 2 + B`` on 1024 floats, built for ``target`` (its host part for GPU targets)."""
    import tvm
    from tvm import te

    n = 1024
    a = te.placeholder((n,), name="A", dtype="float32")
    b = te.placeholder((n,), name="B", dtype="float32")
    c = te.compute((n,), lambda i: a[i] * 2.0 + b[i], name="C")
    func = te.create_prim_func([a, b, c])
    cpu_target = target if target.kind.name in ("llvm", "c") else target.host
    return tvm.compile(tvm.IRModule({"main": func}), target=cpu_target)


def round_trip(address: TrackerAddress, profile: Any, wait_sec: float = 120.0) -> RoundTrip:
    """Build, upload, run and check the kernel on the board under ``address.key``."""
    import tvm

    started = time.monotonic()
    module = _kernel(profile.tvm_target())
    with tempfile.TemporaryDirectory(prefix="edgetune-verify-") as tmp:
        path = os.path.join(tmp, "verify.so")
        module.export_library(
            path, fcompile=shared_library_linker(profile.build.cross_compiler, tuple(profile.build.cross_compiler_flags))
        )
        session = request_session(address, session_timeout_sec=max(60.0, wait_sec), wait_sec=wait_sec)
        try:
            with remote_module(session, path, unique_remote_name("edgetune-verify")) as remote:
                device = session.cpu(0)
                rng = np.random.default_rng(0)
                a, b = (rng.standard_normal(1024).astype("float32") for _ in range(2))
                args = [tvm.runtime.tensor(x, device=device) for x in (a, b, np.zeros(1024, "float32"))]
                remote["main"](*args)
                got = args[2].numpy()
                del args, device
        finally:
            del session
            gc.collect()
    error = float(np.max(np.abs(got - (a * 2.0 + b))))
    if not np.allclose(got, a * 2.0 + b, rtol=1e-5, atol=1e-5):
        raise ProvisionError(
            f"the verification kernel ran on the board under key {address.key!r} but gave wrong results "
            f"(max error {error:g}); the profile's target ({profile.name}) may not match the board's CPU"
        )
    return RoundTrip(error, time.monotonic() - started)
