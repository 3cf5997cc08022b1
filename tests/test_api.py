"""The Python API: ``edgetune.tune`` and ``edgetune.deploy`` run what the CLI runs.

The tuning tests tune a reduced ResNet-18 written in torch (32x32 input),
exported with ``torch.export``, with a few trials on the session's loopback
board: once from Python (the ExportedProgram object), once through the CLI
(``--model FILE.pt2``, resuming from the first run's history). The example of
docs/python-api.md is run exactly as written.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import edgetune
from conftest import REPO, SESSION_KEY, run_cli
from edgetune.errors import DeployInputError, EdgetuneError, ModelError, OptionError, ProfileError
from edgetune.tuning import ProgressSink, TuneSummary
from provision_fixtures import Site, loopback_sshd  # noqa: F401
from torch_models import export_resnet18, require_torch, torch_reference

TRIALS = 20  # 15 convolution tasks + matmul, mean and reshape: each task's default schedule, then a few searched


class Recorder(ProgressSink):
    def __init__(self) -> None:
        self.phases: list[str] = []
        self.batches = 0

    def on_phase(self, progress) -> None:
        self.phases.append(progress.phase)

    def on_batch(self, progress, task) -> None:
        self.batches += 1


@pytest.fixture(scope="module")
def resnet(tmp_path_factory: pytest.TempPathFactory):
    require_torch()
    path = tmp_path_factory.mktemp("resnet") / "exported.pt2"
    module, program = export_resnet18(path)
    return path, module, program


@pytest.fixture(scope="module")
def api_run(resnet, loopback_board, tmp_path_factory: pytest.TempPathFactory):
    _path, _module, program = resnet
    out = tmp_path_factory.mktemp("api")
    recorder = Recorder()
    summary = edgetune.tune(
        program, "host", trials=TRIALS, tracker=f"{loopback_board.host}:{loopback_board.port}", key=SESSION_KEY,
        out=out, name="resnet18", progress=recorder,
    )
    return summary, out, recorder


@pytest.mark.integration
def test_tune_an_exported_program_from_python(api_run, resnet, loopback_board) -> None:
    from edgetune.artifact.compile import compare_outputs, run_on_board
    from edgetune.tasks import load_model

    summary, out, recorder = api_run
    assert isinstance(summary, TuneSummary)
    # the program was saved into the run directory and tuned from there: deploy can load it again
    saved = out / "resnet18.pt2"
    assert summary.model.source == str(saved) and summary.model.name == "resnet18"
    model = load_model(str(saved))
    assert model.sha256 == summary.model.sha256
    assert summary.profile == "host" and summary.board.key == SESSION_KEY
    names = [task.name for task in summary.tasks]
    # 18 kernels, 15 of them convolutions, plus the layout transforms a blocked conv_layout adds around them
    transforms = sum("layout_transform" in name for name in names)
    assert len(names) - transforms == 18 and sum("conv2d" in name for name in names) == 15, names
    assert summary.trials.budget == TRIALS and summary.trials.this_run >= TRIALS
    assert summary.trials.measured_on_device >= len(names)
    assert all(task.best_latency_us and task.best_latency_us > 0 for task in summary.tasks)
    # the summary returned is the one written, as `edgetune tune` writes it
    written = json.loads((out / "summary.json").read_text())
    assert written == json.loads(json.dumps(summary.to_dict(), default=str))
    assert json.loads((out / "summary.json").read_text())["model"]["source"] == str(saved)
    e2e = summary.end_to_end
    assert e2e.outputs_match and e2e.tuned_ms > 0 and e2e.untuned_ms > 0
    assert summary.artifact == out / "model.so" and summary.artifact.stat().st_size > 0
    # the report is written as by the CLI, with the per-task curves
    page = (out / "report.html").read_text()
    assert "Per-task best latency" in page and "Not drawn" not in page
    # progress went to the sink given, nothing to the terminal
    assert recorder.batches >= 1 and "tuning" in recorder.phases and recorder.phases[-1].startswith("compiling")

    # the delivered model.so computes what PyTorch computes
    feeds = model.random_inputs(seed=5)
    ran = run_on_board(loopback_board, "cpu", summary.artifact, [feeds["x"]], number=1, repeat=1)
    ok, worst = compare_outputs(torch_reference(resnet[1], [feeds["x"]]), ran.outputs, rtol=1e-4, atol=1e-5)
    assert ok, worst


@pytest.mark.integration
def test_the_cli_tunes_the_pt2_file_and_resumes_the_same_tasks(api_run, resnet, loopback_board, tmp_path) -> None:
    summary, api_out, _recorder = api_run
    out = tmp_path / "cli"
    pt2 = tmp_path / "resnet18.pt2"
    pt2.write_bytes((api_out / "resnet18.pt2").read_bytes())
    result = run_cli("tune", "--profile", "host", "--model", str(pt2), "--trials", str(TRIALS), "--db", str(api_out / "history.db"),
                     "--out", str(out), "--tracker", f"{loopback_board.host}:{loopback_board.port}", "--key", SESSION_KEY)
    assert result.returncode == 0, result.stderr[-3000:]
    cli = TuneSummary.load(out)
    assert [t.name for t in cli.tasks] == [t.name for t in summary.tasks]
    assert cli.model.sha256 == summary.model.sha256
    # same workloads as the Python run: its measurements are the history, nothing is measured again
    assert cli.trials.in_history_before >= TRIALS and cli.trials.this_run == 0
    assert cli.end_to_end.outputs_match and (out / "model.so").stat().st_size > 0
    assert "end to end on the device" in result.stdout


@pytest.mark.integration
def test_deploy_compiles_the_pt2_model_with_the_history(api_run, loopback_board, tmp_path) -> None:
    """What `edgetune deploy --model x.pt2 --db H` builds before it ships: the tuned model, as in the tune run."""
    from edgetune.artifact.compile import compare_outputs, run_on_board
    from edgetune.deployment.workflow import source_from_model
    from edgetune.tasks import load_model

    summary, out, _recorder = api_run
    source = source_from_model(summary.model.source, "host", str(out / "history.db"), tmp_path)
    assert (source.model_name, source.model_sha256, source.profile) == ("resnet18", summary.model.sha256, "host")
    model = load_model(source.model_source)
    feeds = model.random_inputs(seed=0)
    ran = run_on_board(loopback_board, "cpu", source.artifact, [feeds["x"]], number=1, repeat=1)
    ok, worst = compare_outputs(model.reference_outputs(feeds), ran.outputs)
    assert ok, worst


@pytest.mark.integration
def test_deploy_a_tune_summary_to_a_board(api_run, loopback_sshd, tmp_path, monkeypatch) -> None:
    summary, out, _recorder = api_run
    site = Site(tmp_path).trust(loopback_sshd).add("lo", loopback_sshd)
    for name, value in site.env.items():
        monkeypatch.setenv(name, value)
    lines: list[str] = []
    result = edgetune.deploy(summary, board="lo", verify=False, out=tmp_path / "manifests", log=lines.append)
    current = site.root / "remote-lo" / "deployments" / "resnet18" / "current"
    assert (current / "model.so").read_bytes() == summary.artifact.read_bytes()
    assert result.deployment.model == "resnet18" and not result.verified
    manifest = json.loads(result.local_manifest.read_text())
    assert manifest["model"] == {"name": "resnet18", "source": summary.model.source, "sha256": summary.model.sha256}
    assert result.local_manifest.is_relative_to(tmp_path / "manifests") and any("uploading" in line for line in lines)
    # the same checks as `edgetune deploy`, as exceptions
    with pytest.raises(DeployInputError, match="RUN_DIR or --model M, got neither"):
        edgetune.deploy(board="lo")
    with pytest.raises(DeployInputError, match="--repeat must be >= 1"):
        edgetune.deploy(out, board="lo", repeat=0)
    untuned = TuneSummary.from_dict({**summary.to_dict(), "end_to_end": None})
    with pytest.raises(DeployInputError, match="evaluate=False"):
        edgetune.deploy(untuned, board="lo")


def test_bad_arguments_fail_before_anything_starts(tmp_path: Path) -> None:
    """Each is the EdgetuneError the CLI maps to an exit code, raised before a board or a file is touched."""
    cases = [
        (dict(model="demo:tiny-cnn", trials=-1), OptionError, r"--trials must be >= 0, got -1 instead"),
        (dict(model="demo:tiny-cnn", warm_start="sometimes"), OptionError, r"warm_start must be one of off, same"),
        (dict(model="demo:tiny-cnn", sampler="best"), OptionError, r"sampler must be one of"),
        (dict(model="demo:tiny-cnn", scheduler="fifo"), OptionError, r"scheduler must be one of"),
        (dict(model="demo:tiny-cnn", profile="no-such-profile"), ProfileError, r"no-such-profile"),
        (dict(model="demo:tiny-cnn", overrides={"tuning": {"trials": "many"}}), ProfileError, r"trials"),
        (dict(model=42), ModelError, r"model must be an ONNX or \.pt2 file path, .* got int instead"),
        (dict(model="demo:tiny-cnn", progress="loud"), OptionError, r"progress must be True, False or a ProgressSink"),
        (dict(model="demo:nope"), ModelError, r"unknown demo model 'demo:nope'"),
        (dict(model=str(tmp_path / "x.pt2")), ModelError, r"model file .* not found"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message) as info:
            edgetune.tune(out=tmp_path / "out", **kwargs)
        assert isinstance(info.value, EdgetuneError) and info.value.exit_code == 2
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_torch_module_must_be_exported_first(tmp_path: Path) -> None:
    require_torch()
    import torch

    with pytest.raises(ModelError, match=r"got a torch.nn.Module \(Linear\) instead; pass torch.export.export"):
        edgetune.tune(torch.nn.Linear(2, 2), out=tmp_path)


def test_the_cli_and_the_api_build_the_same_options(tmp_path: Path) -> None:
    """One function makes a run's options for both: board-less defaults, flag overrides, the default output."""
    from edgetune.api import tune_options

    options = tune_options("nets/mobile.onnx", "host", trials=8, sampler="kmeans", evaluator="fixed",
                           overrides={"tuning": {"num_trials_per_iter": 4}})
    assert options.out_dir == Path("edgetune-out") / "mobile-host"
    assert options.profile.tuning.sampler == "kmeans" and options.profile.measure.evaluator == "fixed"
    assert options.profile.tuning.num_trials_per_iter == 4 and options.trials == 8
    with pytest.raises(ProfileError, match="tune needs --profile NAME or --board NAME"):
        tune_options("demo:tiny-cnn")


def _readme_example() -> str:
    """The example of docs/python-api.md (the README's Python API section until the README became a front door)."""
    text = (REPO / "docs" / "python-api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/python-api.md has one example"
    return blocks[0]


@pytest.mark.integration
def test_readme_python_api_example_runs_as_written(tmp_path: Path) -> None:
    require_torch()
    result = subprocess.run([sys.executable, "-c", _readme_example()], cwd=tmp_path, capture_output=True, text=True,
                            timeout=900, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr[-3000:]
    # quiet by default: the example's own prints only, no progress display
    assert "overall:" not in result.stderr and "edgetune:" not in result.stderr, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(r"untuned \d+\.\d{3} ms, tuned \d+\.\d{3} ms", lines[0]), lines
    assert lines[1] == "edgetune-out/smallnet-host/model.so"
    out = tmp_path / "edgetune-out" / "smallnet-host"
    assert (out / "model.so").is_file() and (out / "smallnet.pt2").is_file()
    summary = TuneSummary.load(out)
    assert summary.end_to_end.outputs_match and summary.board.label == "loopback board (embedded)"
    assert np.isfinite(summary.end_to_end.speedup)


def test_edgetune_deploy_is_a_plain_function_that_stays_one() -> None:
    """The package behind it is edgetune.deployment: importing it does not replace edgetune.deploy."""
    import inspect

    import edgetune.deployment.workflow  # noqa: F401 - binds edgetune.deployment, never edgetune.deploy
    from edgetune.api import deploy

    assert inspect.isfunction(edgetune.deploy) and edgetune.deploy is deploy
    assert "board" in inspect.signature(edgetune.deploy).parameters
