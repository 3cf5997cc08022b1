"""Bad input: one clear line on stderr, non-zero exit, no traceback, nothing written to the history."""

from __future__ import annotations

from pathlib import Path

from conftest import SESSION_KEY, require_tool, run_cli
from edgetune.board.rpc_tracker import TrackerAddress, free_port


def assert_one_line_error(result, *needles: str) -> str:
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("edgetune: error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def tune(tmp_path: Path, *args: str) -> tuple[object, Path]:
    db = tmp_path / "history.db"
    result = run_cli("tune", "--out", str(tmp_path / "out"), "--db", str(db), "--trials", "4", *args, timeout=300)
    return result, db


def test_missing_onnx_file(tmp_path):
    result, db = tune(tmp_path, "--profile", "host", "--model", str(tmp_path / "nope.onnx"))
    assert_one_line_error(result, "nope.onnx", "not found")
    assert result.returncode == 2
    assert not db.exists()


def test_invalid_onnx_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not protobuf at all \x00\xff" * 10)
    result, db = tune(tmp_path, "--profile", "host", "--model", str(bad))
    assert_one_line_error(result, "bad.onnx", "not a valid ONNX model")
    assert not db.exists()


def test_unknown_profile_suggests_closest(tmp_path):
    result, db = tune(tmp_path, "--profile", "rk3398", "--model", "demo:tiny-cnn")
    assert_one_line_error(result, "unknown profile 'rk3398'", "rk3399")
    assert not db.exists()


def test_malformed_toml(tmp_path):
    profile = tmp_path / "broken.toml"
    profile.write_text('name = "broken"\n[target\nkind = "llvm"\n')
    result, db = tune(tmp_path, "--profile", str(profile), "--model", "demo:tiny-cnn")
    assert_one_line_error(result, "broken.toml", "malformed TOML")
    assert not db.exists()


def test_unknown_key_in_profile(tmp_path):
    profile = tmp_path / "typo.toml"
    profile.write_text('name = "typo"\n[target]\nkind = "llvm"\n[measure]\nnumbr = 3\n')
    result, db = tune(tmp_path, "--profile", str(profile), "--model", "demo:tiny-cnn")
    assert_one_line_error(result, "typo.toml", "measure.numbr", "did you mean 'measure.number'")
    assert not db.exists()


def test_target_the_installed_tvm_cannot_build(tmp_path):
    profile = tmp_path / "gpu.toml"
    profile.write_text('name = "gpu"\n[target]\nkind = "vulkan"\n[host_target]\nkind = "llvm"\n[rpc]\ndevice = "vulkan"\n')
    result, db = tune(tmp_path, "--profile", str(profile), "--model", "demo:tiny-cnn")
    assert_one_line_error(result, "vulkan")
    assert not db.exists()


def test_tracker_unreachable(tmp_path):
    port = free_port()
    result, db = tune(tmp_path, "--profile", "host", "--model", "demo:tiny-cnn", "--tracker", f"127.0.0.1:{port}")
    line = assert_one_line_error(result, f"127.0.0.1:{port}", "query_rpc_tracker")
    assert result.returncode == 3, line
    assert not db.exists()


def test_key_with_no_device_prints_query_command(tmp_path, loopback_board: TrackerAddress):
    result, db = tune(
        tmp_path,
        "--profile", "host", "--model", "demo:tiny-cnn",
        "--tracker", f"{loopback_board.host}:{loopback_board.port}", "--key", "no-such-board",
    )
    line = assert_one_line_error(result, "'no-such-board'", "query_rpc_tracker", str(loopback_board.port))
    assert SESSION_KEY in line  # tells which keys do have devices
    assert not db.exists()


def test_cross_profile_without_tracker_is_refused(tmp_path):
    require_tool("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu")
    result, db = tune(tmp_path, "--profile", "rk3399", "--model", "demo:tiny-cnn")
    assert_one_line_error(result, "rk3399", "--tracker")
    assert not db.exists()


def test_bad_tracker_syntax(tmp_path):
    result, db = tune(tmp_path, "--profile", "host", "--model", "demo:tiny-cnn", "--tracker", "localhost")
    assert_one_line_error(result, "HOST:PORT", "'localhost'")
    assert not db.exists()


def test_negative_trials(tmp_path):
    result, _db = tune(tmp_path, "--profile", "host", "--model", "demo:tiny-cnn", "--trials", "-3")
    assert_one_line_error(result, "--trials", "-3")


def test_help_teaches():
    result = run_cli("tune", "--help")
    assert result.returncode == 0
    for needle in ("--profile", "--tracker", "resume", "demo:resnet18", "examples:"):
        assert needle in result.stdout


def test_help_and_bad_options_answer_without_importing_tvm():
    """``--help`` and an option error come back at once: TVM (seconds to import) is imported only for real work."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from edgetune.cli import main\n"
        "for argv in (['tune', '--profile', 'nosuch', '--model', 'demo:tiny-cnn'], ['tune', '--profile', 'host', '--trials', '-1', '--model', 'demo:tiny-cnn'],"
        " ['--help'], ['db', '--help'], ['schedules', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('tvm imported' if 'tvm' in sys.modules else 'no tvm')\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip().splitlines()[-1] == "no tvm", result.stdout[-2000:] + result.stderr[-2000:]
    assert "unknown profile 'nosuch'" in result.stderr and "--trials must be >= 0, got -1 instead" in result.stderr
