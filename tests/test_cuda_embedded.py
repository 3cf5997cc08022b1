"""CUDA through the embedded board: the host's GPU measures candidates when it has one.

Without an NVIDIA GPU (the CI machine has none) ``--profile cuda`` with no
tracker is one clear error, and the end-to-end run is skipped with the reason,
never failed for want of a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from edgetune.board.base import host_has_cuda_gpu
from test_cli_errors import assert_one_line_error


def test_cuda_profile_on_a_host_without_a_gpu_is_one_clear_error(tmp_path: Path) -> None:
    if host_has_cuda_gpu():
        pytest.skip("this host has a CUDA GPU: the embedded board measures on it (see the end-to-end test)")
    result = run_cli("tune", "--profile", "cuda", "--model", "demo:tiny-cnn", "--trials", "2",
                     "--out", str(tmp_path / "out"), timeout=300)
    assert_one_line_error(result, "profile 'cuda' measures on a CUDA GPU", "tvm.cuda(0).exist is False", "--tracker")
    assert result.returncode == 3
    assert not (tmp_path / "out" / "history.db").exists()


def test_cross_compiled_gpu_profiles_still_need_a_board(tmp_path: Path) -> None:
    result = run_cli("tune", "--profile", "rk3399-mali", "--model", "demo:tiny-cnn", "--trials", "2",
                     "--out", str(tmp_path / "out"), timeout=300)
    assert_one_line_error(result, "profile 'rk3399-mali'", "--tracker")


@pytest.mark.skipif(not host_has_cuda_gpu(), reason="no NVIDIA GPU on this host (tvm.cuda(0).exist is False)")
def test_tune_with_the_cuda_profile_on_the_embedded_board(tmp_path: Path) -> None:
    """The host's GPU as the board: tuned and untuned builds run on it and match the CPU reference."""
    import tvm

    arch = "sm_" + tvm.cuda(0).compute_version.replace(".", "")
    profile = tmp_path / "this-gpu.toml"
    profile.write_text(
        'name = "this-gpu"\n[target]\nkind = "cuda"\narch = "%s"\n[host_target]\nkind = "llvm"\n'
        '[rpc]\ndevice = "cuda"\n[device]\narch = "x86_64"\npeak_gflops = 10000.0\nnum_threads = 1\n' % arch
    )
    out = tmp_path / "out"
    result = run_cli("tune", "--profile", str(profile), "--model", "demo:tiny-cnn", "--trials", "16", "--out", str(out), timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trials"]["measured_on_device"] > 0
    end_to_end = summary["end_to_end"]
    assert end_to_end["outputs_match"] is True, end_to_end
    assert end_to_end["tuned_latency"]["mean_ms"] > 0 and end_to_end["untuned_latency"]["mean_ms"] > 0
