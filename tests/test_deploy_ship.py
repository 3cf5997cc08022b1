"""``edgetune deploy`` against a real sshd on loopback: versioned upload, atomic switch, rollback.

The loopback "board" shares this machine's filesystem, so the tests look at
the deployment directory directly. These run with ``--no-verify`` (no RPC
server needed); tests/test_deploy_board.py covers verification and run.py.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from edgetune.errors import DeployError
from provision_fixtures import Site, assert_one_error, loopback_sshd  # noqa: F401

pytestmark = pytest.mark.integration

MODEL = "demo:tiny-cnn"


def make_run_dir(path: Path, profile: str = "host", model_spec: str = MODEL, history: Any = None) -> Path:
    """What `edgetune tune` leaves behind: model.so and summary.json (untuned build, same layout).

    With ``history`` (anything with ``for_target``), model.so is built as a tuned model is: through
    edgetune's pipeline, concats built in place on CPUs.
    """
    import tvm

    from edgetune.artifact.compile import compile_model, export_model
    from edgetune.profile import load_profile
    from edgetune.tasks import load_model

    prof = load_profile(profile)
    model = load_model(model_spec)
    target = prof.tvm_target()
    export_model(compile_model(model.mod, target, history), path / "model.so", prof)
    summary = {
        "tvm_version": tvm.__version__,
        "model": {"source": model.source, "name": model.name, "sha256": model.sha256},
        "profile": prof.name,
        "target": target.export(),
        "history": None,
        "end_to_end": {"tuned_latency": {"median_ms": 1.0}, "untuned_latency": {"median_ms": 2.0}},
    }
    (path / "summary.json").write_text(json.dumps(summary, default=str))
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("run"))


@pytest.fixture()
def site(loopback_sshd, tmp_path: Path) -> Site:
    return Site(tmp_path).trust(loopback_sshd).add("lo", loopback_sshd)


def _model_dir(site: Site) -> Path:
    return site.root / "remote-lo" / "deployments" / "tiny-cnn"


def _versions(site: Site) -> list[str]:
    return sorted(p.name for p in _model_dir(site).iterdir() if p.name not in ("current", "previous"))


def test_deploy_twice_then_rollback_and_forward(site: Site, run_dir: Path) -> None:
    first = site.cli("deploy", "--board", "lo", "--no-verify", str(run_dir), "--out", str(site.root / "local"))
    assert first.returncode == 0, first.stdout + first.stderr
    model_dir = _model_dir(site)
    v1 = os.readlink(model_dir / "current")
    assert not (model_dir / "previous").exists()
    sha = hashlib.sha256((run_dir / "model.so").read_bytes()).hexdigest()
    assert v1.endswith(sha[:12])
    deployed = model_dir / "current"
    assert hashlib.sha256((deployed / "model.so").read_bytes()).hexdigest() == sha
    assert (deployed / "run.py").read_text().startswith("#!/usr/bin/env python3")
    from edgetune.profile import load_profile

    assert json.loads((deployed / "runtime.json").read_text()) == {"threads": load_profile("host").device.num_threads}
    manifest = json.loads((deployed / "manifest.json").read_text())
    assert manifest["artifact"]["sha256"] == sha and manifest["profile"] == "host" and manifest["version"] == v1
    assert manifest["tuned_latency_at_tune_time"] == {"median_ms": 1.0} and manifest["verification"] is None
    local = site.root / "local" / "lo" / v1 / "manifest.json"
    assert json.loads(local.read_text()) == manifest
    assert "NOT verified" in first.stdout

    second = site.cli("deploy", "--board", "lo", "--no-verify", str(run_dir), "--out", str(site.root / "local"))
    assert second.returncode == 0, second.stdout + second.stderr
    v2 = os.readlink(model_dir / "current")
    assert v2 != v1 and os.readlink(model_dir / "previous") == v1
    assert _versions(site) == sorted([v1, v2])  # the previous version is kept, no staging left
    assert not [p for p in model_dir.iterdir() if p.name.startswith(".")]

    back = site.cli("deploy", "--board", "lo", "--rollback", "tiny-cnn")
    assert back.returncode == 0, back.stdout + back.stderr
    assert os.readlink(model_dir / "current") == v1 and os.readlink(model_dir / "previous") == v2
    assert f"current -> {v1}" in back.stdout
    forward = site.cli("deploy", "--board", "lo", "--rollback", "tiny-cnn")
    assert forward.returncode == 0 and os.readlink(model_dir / "current") == v2


def test_interrupted_upload_leaves_current_alone(site: Site, run_dir: Path, loopback_sshd) -> None:
    """An SFTP transfer aborted after its first chunk: no partial version, `current` unchanged."""
    from edgetune.deployment.ship import activate, deployments_root, new_version, upload
    from edgetune.provision.inventory import load_inventory
    from edgetune.provision.ssh import BoardConnection

    assert site.cli("deploy", "--board", "lo", "--no-verify", str(run_dir)).returncode == 0
    model_dir = _model_dir(site)
    good = os.readlink(model_dir / "current")
    entry = load_inventory(site.inventory).get("lo")
    seen: list[int] = []

    def abort(done: int, total: int) -> None:
        seen.append(done)
        if done < total:
            raise ConnectionResetError("link dropped")

    big = os.urandom(3 << 20)  # several SFTP chunks
    with BoardConnection(entry) as connection:
        root = deployments_root(connection, entry)
        version = new_version(hashlib.sha256(big).hexdigest())
        with pytest.raises(DeployError, match=r"upload to .* failed \(link dropped\); `current` was not changed"):
            upload(connection, f"{root}/tiny-cnn", version, {"model.so": big}, progress=abort)
            activate(connection, f"{root}/tiny-cnn", version)  # never reached
    assert seen and seen[-1] < len(big)
    assert os.readlink(model_dir / "current") == good
    assert (model_dir / "current" / "model.so").read_bytes() == (run_dir / "model.so").read_bytes()
    assert _versions(site) == [good]
    assert not [p for p in model_dir.iterdir() if p.name.startswith(".")]


def test_errors_are_one_line(site: Site, run_dir: Path, tmp_path: Path, loopback_sshd) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_error(site.cli("deploy", "--board", "lo", str(empty)), 2, "RUN_DIR must be the output of `edgetune tune`",
                     "edgetune tune --model")
    assert_one_error(site.cli("deploy", "--board", "lo", "--rollback", "tiny-cnn"), 3, "must exist to roll back",
                     "edgetune deploy --board lo")
    assert site.cli("deploy", "--board", "lo", "--no-verify", str(run_dir)).returncode == 0
    assert_one_error(site.cli("deploy", "--board", "lo", "--rollback", "tiny-cnn"), 3, "needs a previous version")
    assert_one_error(site.cli("deploy", "--board", "lo"), 2, "RUN_DIR or --model M, got neither")
    assert_one_error(site.cli("deploy", "--board", "lo", "--db", "h.db", str(run_dir)), 2, "must come with --model")
    assert_one_error(site.cli("deploy", "--board", "lo", "--conv-layout", "NHWC", str(run_dir)), 2, "must come with --model")
    assert_one_error(site.cli("deploy", "--board", "lo", "--repeat", "0", str(run_dir)), 2, "--repeat must be >= 1")
    assert_one_error(site.cli("deploy", "--board", "nosuch", str(run_dir)), 2, "nosuch")
    (tmp_path / "arm").mkdir()
    other = Site(tmp_path / "arm").trust(loopback_sshd).add("armboard", loopback_sshd, profile="rk3399")
    assert_one_error(other.cli("deploy", "--board", "armboard", "--no-verify", str(run_dir)), 2,
                     "must be built for board armboard's profile rk3399, got one built for host instead")



def test_model_mode_compiles_for_the_boards_profile(site: Site, tmp_path: Path) -> None:
    """``--model`` without RUN_DIR: compiled for the board's profile, deployed, manifest says so."""
    result = site.cli("deploy", "--board", "lo", "--no-verify", "--model", MODEL, "--out", str(tmp_path / "local"))
    assert result.returncode == 0, result.stdout + result.stderr
    current = _model_dir(site) / "current"
    manifest = json.loads((current / "manifest.json").read_text())
    assert manifest["model"]["source"] == MODEL and manifest["profile"] == "host" and manifest["history"] is None
    assert manifest["recipe"]["conv_layout"] == "auto" and manifest["recipe"]["passes"]  # without a history: the profile's
    assert hashlib.sha256((current / "model.so").read_bytes()).hexdigest() == manifest["artifact"]["sha256"]
    assert (tmp_path / "local" / "lo" / os.readlink(current) / "manifest.json").is_file()
    assert_one_error(site.cli("deploy", "--board", "lo", "--no-verify", "--model", MODEL, "--profile", "rk3399"), 2,
                     "must be built for board lo's profile host, got one built for rk3399 instead")


@pytest.mark.parametrize("conv_layout, expected", [(None, "conv2d_NCHWc"), ("NHWC", 'data_layout="NHWC"')])
def test_model_mode_compiles_in_the_layout_the_history_was_tuned_in(tmp_path: Path, monkeypatch, conv_layout, expected):
    """`deploy --model M --db H --conv-layout L`: the graph is prepared in L (as `tune --conv-layout L` tuned it),
    or the history's records would match none of its workloads; without it, the profile's layout."""
    from edgetune.artifact import compile as artifact_compile
    from edgetune.deployment.workflow import source_from_model

    compiled = []
    real = artifact_compile.compile_model

    def spy(mod, target, history=None, prepack_weights=False):
        compiled.append(mod.script())
        return real(mod, target, history, prepack_weights)

    monkeypatch.setattr(artifact_compile, "compile_model", spy)
    source = source_from_model("demo:tiny-cnn", "host", None, tmp_path, conv_layout=conv_layout)
    assert source.artifact.stat().st_size > 0
    (script,) = compiled
    assert expected in script

