"""TVM's tracker variables (TVM_TRACKER_HOST/PORT/KEY) as defaults of `edgetune tune --tracker/--key`.

Parse-level: the helpers, the help text, and the CLI's one-line errors, which
come before anything is loaded or started. Two tests go as far as the tracker
check (a closed port, a key without devices) to show the variables are used.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from conftest import SESSION_KEY, run_cli
from edgetune.board.rpc_tracker import TrackerAddress, free_port, tracker_defaults, tracker_from_env
from edgetune.cli import _build_parser
from edgetune.errors import BoardError
from test_cli_errors import assert_one_line_error


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"TVM_TRACKER_KEY": "rk3399"}, None),  # a key alone is no tracker
        ({"TVM_TRACKER_HOST": "10.0.0.7", "TVM_TRACKER_PORT": "9191"}, "10.0.0.7:9191"),
        ({"TVM_TRACKER_HOST": "lab-tracker"}, "lab-tracker:9190"),  # TVM's default port
        ({"TVM_TRACKER_PORT": "9300"}, "127.0.0.1:9300"),  # as tvm.exec.query_rpc_tracker
        ({"TVM_TRACKER_HOST": " lab ", "TVM_TRACKER_PORT": " 9191 "}, "lab:9191"),
        ({"TVM_TRACKER_HOST": "", "TVM_TRACKER_PORT": ""}, None),  # set but empty: unset
        ({"TVM_TRACKER_HOST": "::1", "TVM_TRACKER_PORT": "9190"}, "::1:9190"),
    ],
)
def test_tracker_from_env(env: dict[str, str], expected: str | None) -> None:
    assert tracker_from_env(env) == expected
    if expected:  # what --tracker accepts
        host, port = expected.rsplit(":", 1)
        assert TrackerAddress.parse(expected, "k") == TrackerAddress(host, int(port), "k")


@pytest.mark.parametrize("port", ["http", "0", "65536", "-1", "9190.5", "91 90"])
def test_bad_port_is_one_line_error(port: str) -> None:
    with pytest.raises(BoardError) as info:
        tracker_from_env({"TVM_TRACKER_HOST": "lab", "TVM_TRACKER_PORT": port})
    assert str(info.value) == f"TVM_TRACKER_PORT must be a port number (1-65535), got {port.strip()!r} instead"


def test_host_with_port_is_refused() -> None:
    with pytest.raises(BoardError, match="TVM_TRACKER_HOST must be a host name or address, got 'lab:9190'.*TVM_TRACKER_PORT"):
        tracker_from_env({"TVM_TRACKER_HOST": "lab:9190"})


ENV = {"TVM_TRACKER_HOST": "lab", "TVM_TRACKER_PORT": "9191", "TVM_TRACKER_KEY": "rk3399"}


@pytest.mark.parametrize(
    ("tracker", "key", "env", "expected"),
    [
        (None, None, ENV, ("lab:9191", "rk3399")),  # both from the environment
        ("other:9000", None, ENV, ("other:9000", "rk3399")),  # the flag wins; the key still defaults
        (None, "mine", ENV, ("lab:9191", "mine")),
        ("other:9000", "mine", ENV, ("other:9000", "mine")),  # both flags win
        ("other:9000", "mine", {**ENV, "TVM_TRACKER_PORT": "bad"}, ("other:9000", "mine")),  # not read at all
        ("other:9000", None, {}, ("other:9000", None)),  # the profile's rpc.key later
        (None, None, {}, (None, None)),  # the embedded loopback board
        # no tracker: the loopback board keeps the profile's key, never a board's name
        (None, None, {"TVM_TRACKER_KEY": "rk3399"}, (None, None)),
    ],
)
def test_tracker_defaults(tracker, key, env, expected) -> None:
    assert tracker_defaults(tracker, key, env) == expected


def tune_parser() -> argparse.ArgumentParser:
    parser = _build_parser()
    sub = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return sub.choices["tune"]


def test_flags_parse_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables are applied when the command runs, so --board's tracker and key come first."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    args = _build_parser().parse_args(["tune", "--profile", "host", "--model", "demo:tiny-cnn"])
    assert (args.tracker, args.key) == (None, None)
    args = _build_parser().parse_args(["tune", "-p", "host", "-m", "x.onnx", "--tracker", "a:1", "--key", "k"])
    assert (args.tracker, args.key) == ("a:1", "k")


def test_help_names_the_variables() -> None:
    text = " ".join(tune_parser().format_help().split())
    for needle in ("$TVM_TRACKER_HOST:$TVM_TRACKER_PORT", "$TVM_TRACKER_KEY", "TVM_TRACKER_HOST, TVM_TRACKER_PORT"):
        assert needle in text, needle


def tune(tmp_path: Path, env: dict[str, str], *args: str):
    db = tmp_path / "history.db"
    result = run_cli(
        "tune", "--profile", "host", "--model", "demo:tiny-cnn", "--out", str(tmp_path / "out"), "--db", str(db),
        "--trials", "4", *args, env=env, timeout=300,
    )
    return result, db


def test_cli_bad_port(tmp_path: Path) -> None:
    result, db = tune(tmp_path, {"TVM_TRACKER_HOST": "127.0.0.1", "TVM_TRACKER_PORT": "http"})
    assert_one_line_error(result, "TVM_TRACKER_PORT", "'http'")
    assert result.returncode == 3
    assert not db.exists()


def test_cli_bad_port_ignored_with_flag(tmp_path: Path) -> None:
    port = free_port()
    result, db = tune(tmp_path, {"TVM_TRACKER_PORT": "http"}, "--tracker", f"127.0.0.1:{port}")
    assert_one_line_error(result, f"127.0.0.1:{port}", "query_rpc_tracker")  # the flag's tracker, not a port error
    assert not db.exists()


def test_cli_uses_env_tracker_and_key(tmp_path: Path, loopback_board: TrackerAddress) -> None:
    env = {"TVM_TRACKER_HOST": loopback_board.host, "TVM_TRACKER_PORT": str(loopback_board.port), "TVM_TRACKER_KEY": "no-such-board"}
    result, db = tune(tmp_path, env)
    line = assert_one_line_error(result, "'no-such-board'", str(loopback_board.port))
    assert SESSION_KEY in line  # the session's tracker answered: it was the one the variables named
    assert not db.exists()
