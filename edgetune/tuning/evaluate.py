"""After tuning: compile the model with the best records, run tuned and untuned builds on the device, compare."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ..common.run_dir import RunDir
from ..board.rpc_tracker import TrackerAddress
from ..artifact.compile import compare_outputs, compile_model, export_model, run_on_board
from ..errors import TargetError
from ..profile import DeviceProfile
from ..tasks import LoadedModel
from .summary import EndToEnd

if TYPE_CHECKING:
    from tvm.target import Target
    
    from .components import TuningHistory

ARTIFACT_NAME = RunDir.ARTIFACT
UNTUNED_ARTIFACT_NAME = RunDir.UNTUNED_ARTIFACT
#: where the tuned build goes when it measured slower than the untuned one and ``model.so`` is the untuned build
SLOWER_TUNED_ARTIFACT_NAME = RunDir.SLOWER_TUNED_ARTIFACT


def evaluate_end_to_end(
    model: LoadedModel, profile: DeviceProfile, target: Target, history: TuningHistory, address: TrackerAddress, out_dir: Path
) -> EndToEnd:
    """Build ``model.so`` (tuned) and ``model-untuned.so``, time both on the device, check their outputs agree.

    Never worse than no tuning: when the tuned build measures slower than the
    untuned one twice in a row, ``model.so`` is the untuned build (``delivered``
    says so) and the tuned one is kept beside it.
    """
    # model.mod is prepared from the run's recipe (tasks.recipe.prepare_model): both builds read it, neither the profile
    tuned_path = export_model(
        compile_model(model.mod, target, history, prepack_weights=model.recipe.prepack_weights), out_dir / ARTIFACT_NAME, profile
    )
    untuned_path = export_model(compile_model(model.mod, target), out_dir / UNTUNED_ARTIFACT_NAME, profile)
    inputs = [model.random_inputs(seed=0)[spec.name] for spec in model.inputs]
    timing = dict(number=profile.measure.number, repeat=max(profile.measure.repeat, 3), min_repeat_ms=profile.measure.min_repeat_ms)
    untuned = run_on_board(address, profile.rpc.device, untuned_path, inputs, **timing)
    tuned = run_on_board(address, profile.rpc.device, tuned_path, inputs, **timing)
    match, max_diff = compare_outputs(untuned.outputs, tuned.outputs)
    if not match:
        raise TargetError(
            f"tuned build's outputs differ from the untuned build's on the device (max abs diff {max_diff:.3g}); "
            f"the artifact is kept at {tuned_path} for inspection"
        )
    delivered = "tuned"
    if tuned.latency.median_ms > untuned.latency.median_ms:
        # measure both again, tuned first this time: deliver the untuned build only if it wins twice
        tuned = run_on_board(address, profile.rpc.device, tuned_path, inputs, **timing)
        untuned = run_on_board(address, profile.rpc.device, untuned_path, inputs, **timing)
        if tuned.latency.median_ms > untuned.latency.median_ms:
            shutil.copyfile(tuned_path, out_dir / SLOWER_TUNED_ARTIFACT_NAME)
            shutil.copyfile(untuned_path, tuned_path)
            delivered = "untuned"
    return EndToEnd(
        delivered=delivered,
        artifact=str(tuned_path),
        untuned_artifact=str(untuned_path),
        untuned_latency=untuned.latency.to_dict(),
        tuned_latency=tuned.latency.to_dict(),
        speedup=untuned.latency.median_ms / tuned.latency.median_ms if tuned.latency.median_ms else math.nan,
        outputs_match=match,
        max_abs_diff=max_diff,
    )
