"""``edgetune deploy`` with verification on provisioned boards: RPC check, board benchmark, run.py.

The loopback board (x86_64, profile ``host``) is provisioned once for the
module; the arm64 test deploys a cross-compiled aarch64 artifact to the
emulated board and runs the shipped run.py there (slow: qemu-user).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import EmptyHistory
from provision_fixtures import Site, arm64_sshd, assert_one_error, loopback_sshd  # noqa: F401
from test_deploy_ship import make_run_dir

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def site(loopback_sshd, tmp_path_factory: pytest.TempPathFactory) -> Site:
    # direct mode: on loopback a tunnel's -R forward would collide with the host tracker's own port;
    # the tracker listens on 127.0.0.2 (the 127/8 loopback) so the board dials it as over a LAN
    site = Site(tmp_path_factory.mktemp("site-deploy"), tracker_host="127.0.0.2", advertise="127.0.0.2")
    site.trust(loopback_sshd).add("lo", loopback_sshd, mode="direct")
    result = site.cli("provision", "lo", "--baseline", "onnxruntime")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[lo] baseline: ONNX Runtime " in result.stdout, result.stdout
    yield site
    site.teardown()


def test_deploy_verifies_benchmarks_and_run_py_works_alone(site: Site, tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path / "run")
    result = site.cli("deploy", "--board", "lo", str(run_dir), "--repeat", "7", "--warmup", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "RPC verification ok on lo" in result.stdout and "benchmark on the board: mean" in result.stdout
    current = site.root / "remote-lo" / "deployments" / "tiny-cnn" / "current"
    manifest = json.loads((current / "manifest.json").read_text())
    bench, check = manifest["benchmark"], manifest["verification"]
    assert bench["repeats"] == 7 and bench["warmup"] == 2
    assert 0 < bench["p50_ms"] <= bench["p90_ms"] and bench["mean_ms"] > 0 and bench["cv"] >= 0
    # the runtime alone is tens of MiB; a plausible RSS, not a placeholder
    assert 20 * 1024 < bench["peak_rss_kib"] < 4 * 1024 * 1024
    assert check["rpc_max_abs_diff"] < 1e-4 and bench["run_py_max_abs_diff"] < 1e-4
    # on the profile's threads, as tuned (TVM alone would take half an x86 board's CPUs)
    from edgetune.profile import load_profile

    assert bench["threads"] == load_profile("host").device.num_threads
    local = run_dir / "deployments" / "lo" / os.readlink(current) / "manifest.json"
    assert json.loads(local.read_text()) == manifest

    # run.py without the host's edgetune: only the board venv's TVM runtime
    from edgetune.tasks import load_model

    model = load_model("demo:tiny-cnn")
    feeds = model.random_inputs(seed=11)
    np.save(tmp_path / "x.npy", feeds[model.inputs[0].name])
    python = site.root / "remote-lo" / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(python), str(current / "run.py"), "--input", str(tmp_path / "x.npy"),
                           "--output", str(tmp_path / "y.npy")], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    got = np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(got, model.reference_outputs(feeds)[0], rtol=1e-3, atol=1e-4)
    # the user's TVM_NUM_THREADS wins over the tuned threads
    done = subprocess.run([str(python), str(current / "run.py"), "--input", str(tmp_path / "x.npy"), "--bench",
                           "--repeat", "1", "--warmup", "0"], capture_output=True, text=True,
                          env={**env, "TVM_NUM_THREADS": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["threads"] == 1


def test_wrong_outputs_fail_loudly_and_do_not_switch(site: Site, tmp_path: Path) -> None:
    """An artifact that computes something else (same input signature) is refused."""
    import tvm
    from tvm import relax

    from edgetune.artifact.compile import export_model
    from edgetune.profile import load_profile
    good = make_run_dir(tmp_path / "good")
    assert site.cli("deploy", "--board", "lo", "--no-verify", str(good)).returncode == 0
    current = site.root / "remote-lo" / "deployments" / "tiny-cnn" / "current"
    before = os.readlink(current)

    # the same network with one weight tensor doubled: same inputs and output shape, other numbers
    from onnx import numpy_helper
    from tvm.relax.frontend.onnx import from_onnx

    from edgetune.tasks.demo import build_demo

    onnx_model = build_demo("tiny-cnn")
    weight = onnx_model.graph.initializer[0]
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 2, weight.name))
    profile = load_profile("host")
    with tvm.transform.PassContext(opt_level=3):
        wrong = relax.build(from_onnx(onnx_model, keep_params_in_input=False), target=profile.tvm_target())
    bad = make_run_dir(tmp_path / "bad")
    export_model(wrong, bad / "model.so", profile)
    result = site.cli("deploy", "--board", "lo", str(bad))
    assert_one_error(result, 5, "outputs through RPC must match the host reference within rtol 0.001",
                     "`current` was not changed")
    assert os.readlink(current) == before


def test_deploy_times_the_baselines_on_the_board(site: Site, tmp_path: Path) -> None:
    """Issue 29: `deploy --baseline` times ONNX Runtime in the board's venv beside model.so; a runtime it lacks is one line."""
    run_dir = make_run_dir(tmp_path / "run")
    result = site.cli("deploy", "--board", "lo", str(run_dir), "--repeat", "3", "--baseline", "onnxruntime,litert")
    assert result.returncode == 0, result.stdout + result.stderr
    current = site.root / "remote-lo" / "deployments" / "tiny-cnn" / "current"
    onnx, litert = json.loads((current / "manifest.json").read_text())["baselines"]
    assert onnx["runtime"] == "onnxruntime" and onnx["error"] is None and onnx["version"], onnx
    assert onnx["baseline_ms"] > 0 and onnx["tuned_ms"] > 0 and onnx["outputs_match"] is True and onnx["max_rel_diff"] < 1e-4
    assert onnx["protocol"].endswith("; on board lo") and "spinning default" in onnx["protocol"]
    assert f"ONNX Runtime {onnx['baseline_ms']:.3f} ms on this board: " in result.stdout
    assert litert["error"] == "runs a .tflite file; this model was given as an ONNX file"
    assert f"baseline LiteRT: {litert['error']}" in result.stdout.splitlines()
    scratch = site.root / "remote-lo" / "baseline-runs"  # under the board's remote_dir: one directory per timing
    assert scratch.is_dir() and not list(scratch.iterdir())  # made for the runs, then removed

    # a .tflite model: LiteRT is its baseline, but provision did not install it on this board
    from tflite_models import write_model

    tflite_run = make_run_dir(tmp_path / "tflite-run", model_spec=str(write_model(tmp_path / "net.tflite")))
    result = site.cli("deploy", "--board", "lo", str(tflite_run), "--repeat", "3", "--baseline", "litert")
    assert result.returncode == 0, result.stdout + result.stderr  # deployed all the same
    [missing] = json.loads(next((tflite_run / "deployments" / "lo").glob("*/manifest.json")).read_text())["baselines"]
    assert missing["error"] == "not installed on board lo; install it with: edgetune provision lo --baseline litert"
    assert f"baseline LiteRT: {missing['error']}" in result.stdout.splitlines()


def test_a_provisioned_board_times_the_tunes_baseline_over_ssh(site: Site, tmp_path: Path, monkeypatch) -> None:
    """What `tune --board lo --baseline onnxruntime` asks of the board after tuning: the same timing, in its venv."""
    from edgetune.common.run_dir import RunDir
    from edgetune.profile import load_profile
    from edgetune.provision.board import ProvisionedBoard, choose_board, resolve_board
    from edgetune.tasks import load_model

    run_dir = make_run_dir(tmp_path / "run")
    model = load_model("demo:tiny-cnn")
    for key, value in site.env.items():  # the inventory and state this site's CLI calls see
        monkeypatch.setenv(key, value)
    choice = choose_board("lo", str(site.inventory))  # as `tune --board lo` resolves it
    board = resolve_board(choice, load_profile("host"), choice.key, RunDir(tmp_path / "tune"), lambda _m: None)
    assert isinstance(board, ProvisionedBoard)
    with board:
        result = board.time_baseline("onnxruntime", run_dir / "model.so", model.bytes_for("onnx"),
                                     model.random_inputs(seed=0), 1, given_as="onnx")
    assert result.error is None and result.outputs_match and result.protocol.endswith("; on board lo"), result
    assert result.baseline_ms > 0 and result.tuned_ms > 0 and "1 threads" in result.protocol


def test_arm64_board_runs_the_cross_compiled_deployment(arm64_sshd, tmp_path: Path) -> None:
    from conftest import require_tool

    require_tool("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu")
    # rk3399-like rpi4 profile pinned to one core with one thread (this machine has 2 cores), as in test_provision_arm64
    profile = tmp_path / "emu-rpi4.toml"
    rpi4 = (Path(__file__).resolve().parent.parent / "device_profiles" / "rpi4.toml").read_text()
    profile.write_text(rpi4.replace('name = "rpi4"', 'name = "emu-rpi4"')
                       .replace("num_threads = 4", "num_threads = 1\ncore_affinity = [1]"))
    (tmp_path / "site-arm").mkdir()
    site = Site(tmp_path / "site-arm").trust(arm64_sshd).add("arm", arm64_sshd, profile=str(profile))
    try:
        provisioned = site.cli("provision", "arm", "--baseline", "litert", timeout=1800)
        assert provisioned.returncode == 0, provisioned.stdout + provisioned.stderr
        assert "[arm] baseline: LiteRT " in provisioned.stdout  # the aarch64 wheels, unpacked on the board
        run_dir = make_run_dir(tmp_path / "run", profile=str(profile))
        header = (run_dir / "model.so").read_bytes()[:20]
        assert int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64
        result = site.cli("deploy", "--board", "arm", str(run_dir), "--repeat", "3", "--warmup", "1", timeout=1800)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "RPC verification ok on arm" in result.stdout
        manifest = json.loads(next((run_dir / "deployments" / "arm").glob("*/manifest.json")).read_text())
        assert manifest["benchmark"]["repeats"] == 3 and manifest["benchmark"]["run_py_max_abs_diff"] < 1e-3
        # a baseline's mechanics on an aarch64 board: a .tflite model beside LiteRT with its XNNPACK kernels
        # (emulated: its timings mean nothing and are not reported)
        from tflite_models import write_model

        tflite_run = make_run_dir(tmp_path / "tflite-run", profile=str(profile),
                                  model_spec=str(write_model(tmp_path / "net.tflite")))
        result = site.cli("deploy", "--board", "arm", str(tflite_run), "--no-verify", "--baseline", "litert", timeout=1800)
        assert result.returncode == 0, result.stdout + result.stderr
        [litert] = json.loads(next((tflite_run / "deployments" / "arm").glob("*/manifest.json")).read_text())["baselines"]
        assert litert["error"] is None and litert["outputs_match"] is True and litert["max_rel_diff"] < 1e-4, litert
        assert litert["protocol"].endswith("; on board arm") and litert["baseline_ms"] > 0
        assert manifest["profile"] == "emu-rpi4" and manifest["artifact"]["sha256"]
        # a model built as a tuned one is, its fire modules' concats built in place (views at byte offsets into
        # one buffer), computes on the aarch64 runtime what the host computes
        concat_run = make_run_dir(tmp_path / "concat-run", profile=str(profile), model_spec="demo:squeezenet1.1@32",
                                  history=EmptyHistory())
        result = site.cli("deploy", "--board", "arm", str(concat_run), "--repeat", "1", "--warmup", "1", timeout=1800)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "RPC verification ok on arm" in result.stdout
        _int8_models_match_numpy_on_the_board(site, tmp_path)
        # run.py by hand on the board, over SSH, through the `current` link
        from edgetune.provision.inventory import load_inventory
        from edgetune.provision.ssh import BoardConnection
        from edgetune.tasks import load_model

        with BoardConnection(load_inventory(site.inventory).get("arm")) as board:
            done = board.run("cd ~/.edgetune/deployments/tiny-cnn/current && ~/.edgetune/venv/bin/python run.py "
                             "--input input_0.npy --output /tmp/edgetune-deploy-y.npy", timeout_sec=600)
            assert done.ok, done.stderr
            board.sftp().get("/tmp/edgetune-deploy-y.npy", str(tmp_path / "y.npy"))
        model = load_model("demo:tiny-cnn")
        reference = model.reference_outputs(model.random_inputs(seed=0))[0]
        got = np.load(tmp_path / "y.npy")
        np.testing.assert_allclose(got, reference, rtol=1e-3, atol=1e-3)
    finally:
        site.teardown()


def _int8_models_match_numpy_on_the_board(site: Site, tmp_path: Path) -> None:
    """Issue 54, point 3: the hand-built int8 model (tests/int8_models.py), its int8 kernels tensorized with ``sdot``
    for the rpi5 profile (``+dotprod``) and with plain NEON for the rpi4 one, cross-compiled here, runs on the
    emulated board through its RPC server and computes numpy's integer arithmetic exactly. Emulated: never timed."""
    from edgetune.artifact.compile import export_model, run_on_board
    from edgetune.board.rpc_tracker import TrackerAddress
    from edgetune.common.int8_isa import int8_instruction
    from edgetune.profile import load_profile
    from edgetune.provision.inventory import load_inventory
    from int8_models import INPUT_SHAPE, make_layers, reference
    from test_int8_intrin import scheduled_build

    inventory = load_inventory(site.inventory)
    entry = inventory.get("arm")
    address = TrackerAddress("127.0.0.1", inventory.tracker.port, entry.rpc_key(load_profile(entry.profile)))
    rng = np.random.default_rng(54)
    inputs = [rng.integers(-128, 128, INPUT_SHAPE).astype("int8") for _ in range(2)]
    for name, instruction in (("rpi5", "sdot"), ("rpi4", "neon")):
        profile = load_profile(name)
        assert int8_instruction(profile.tvm_target()) == instruction
        executable, tasks, asm = scheduled_build(profile.tvm_target().export())
        assert len(tasks) == 3 and ("sdot" in asm) == (instruction == "sdot"), (name, tasks)
        artifact = export_model(executable, tmp_path / f"int8-{name}.so", profile)
        assert int.from_bytes(artifact.read_bytes()[18:20], "little") == 183  # EM_AARCH64
        for x in inputs:
            [out] = run_on_board(address, "cpu", artifact, [x], number=1, repeat=1).outputs
            expected = reference(x, make_layers(), -3)
            assert out.dtype == np.int8 and len(np.unique(expected)) > 10  # not saturated: equality says something
            np.testing.assert_array_equal(out, expected, err_msg=f"{name} ({instruction}) on the emulated board")
