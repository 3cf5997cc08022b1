"""Uploaded modules are removed from the board whether or not running them raised."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import tvm

from edgetune.board.rpc_tracker import request_session
from edgetune.common.rpc import remote_module, unique_remote_name

pytestmark = pytest.mark.integration


def build_kernel(tmp_path: Path) -> Path:
    from tvm import te

    a = te.placeholder((16,), name="a")
    b = te.compute((16,), lambda i: a[i] * 2.0, name="b")
    lib = tvm.compile(te.create_prim_func([a, b]), target={"kind": "llvm"})
    path = tmp_path / "k.so"
    lib.export_library(str(path))
    return path


def on_board(session, name: str) -> bool:
    """Whether the server's working directory holds ``name`` (the server has no listdir: try to download it)."""
    try:
        return len(session.download(name)) > 0
    except Exception:  # noqa: BLE001 - TVM raises its own error for a missing file
        return False


def test_upload_is_removed_when_running_it_raises(tmp_path: Path, loopback_board) -> None:
    artifact = build_kernel(tmp_path)
    session = request_session(loopback_board, session_timeout_sec=60, wait_sec=60)
    try:
        name = unique_remote_name("edgetune-test")
        with remote_module(session, artifact, name) as module:
            assert on_board(session, name)
            module["main"]  # loaded and callable
        assert not on_board(session, name)
        with pytest.raises(RuntimeError, match="boom"):
            with remote_module(session, artifact, name):
                assert on_board(session, name)
                raise RuntimeError("boom")
        assert not on_board(session, name)
    finally:
        del session
        gc.collect()
