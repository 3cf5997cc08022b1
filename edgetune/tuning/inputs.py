"""The run's inputs: options, the settings every stage reads, the checked profile and model, the board.

Bad input fails here, before a board, a history or a worker is started.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from tvm.target import Target

from ..board.base import Board
from ..common.interrupts import StopSignal
from ..common.run_dir import RunDir
from ..errors import EdgetuneError
from ..profile import DeviceProfile
from ..provision.board import BoardChoice, choose_board, resolve_board
from ..schedules.use import LibraryChoice
from ..tasks import LoadedModel, load_model
from ..tasks.recipe import prepare_model, recipe_from_settings
from .components import Components
from .progress import ProgressSink
from .settings import check_combined_settings


@dataclass
class TuneOptions:
    """Everything ``edgetune tune`` needs; CLI flags override the profile."""

    profile: DeviceProfile
    model: str | None
    out_dir: Path
    tracker: str | None = None  # "host:port"; None starts the loopback board
    key: str | None = None  # defaults to the profile's rpc.key
    db: str | None = None  # defaults to the run directory's history.db
    trials: int | None = None  # defaults to the profile's tuning.trials
    evaluate: bool = True  # compile and measure end to end after tuning
    # "off", "same", "auto" or "similar": cost model trained on history first (see costmodel/warmstart.py)
    warm_start: str = "same"
    suggested: bool = False  # each task gets its type's early-stop and sampling settings from the history
    scheduler: str | None = None  # task scheduler; defaults to the profile's tuning.task_scheduler
    board: Board | None = None  # where to measure; defaults to the tracker, or the embedded board
    board_name: str | None = None  # a provisioned board of the inventory (--board): looked after over SSH
    inventory: str | None = None  # the inventory file of board_name (default: $EDGETUNE_INVENTORY)
    where: BoardChoice | None = None  # the above, resolved once (api.tune_options); None: resolved by the run
    task_names: Sequence[str] | None = None  # tune only these of the model's tasks (all by default)


@dataclass(frozen=True)
class RunSettings:
    """What every stage of one run reads: its options and profile, where progress goes, the components passed in.

    Made by :class:`~edgetune.tuning.pipeline.TuningPipeline` when a stage starts, from its
    current options (a zoo build sets the trials and task names between construction and run).
    """

    options: TuneOptions
    profile: DeviceProfile
    sink: ProgressSink
    components: Components
    trials: int  # --trials, else the profile's tuning.trials
    key: str  # the board id: --key, else the profile's rpc.key
    stop: StopSignal  # set by Ctrl-C, SIGTERM or a board gone: finish the batch, then stop
    library: Callable[[Target], LibraryChoice]  # the schedule library (tuning.schedules), loaded once per run

    @property
    def scheduler_name(self) -> str:
        return self.options.scheduler or self.profile.tuning.task_scheduler


def check_inputs(run: RunSettings) -> tuple[Target, LoadedModel | None]:
    """Profile, settings and model first: bad input fails before anything is started."""
    if run.trials < 0:
        raise EdgetuneError(f"--trials must be >= 0, got {run.trials} instead")
    if run.components.tasks is not None and run.options.evaluate:
        raise EdgetuneError("tasks passed in have no model to evaluate: set evaluate=False")
    profile = run.profile
    profile.check_buildable()
    check_combined_settings(profile)
    target = profile.tvm_target()
    model = load_model(run.options.model) if run.components.tasks is None else None
    # the run's recipe, decided here once: every build of this run's records prepares the model from it
    if model is None:
        return target, None
    # tuning.winograd = "auto" chooses from the run's library (loaded once per run: the tasks read it again)
    library = run.library(target).library if profile.tuning.winograd == "auto" else None
    return target, prepare_model(model, recipe_from_settings(profile.tuning, target, library=library), target)


def make_board(run: RunSettings, out_dir: Path, notify: Callable[[str], None]) -> Board:
    """The board given, else the one ``options.where`` names (resolved here when the caller did not)."""
    options = run.options
    board = options.board
    if board is None:
        where = options.where or (
            choose_board(options.board_name, options.inventory, options.tracker, options.key) if options.board_name
            else BoardChoice(tracker=options.tracker, key=options.key)  # as given: TVM_TRACKER_* is tune_options' job
        )
        board = resolve_board(where, run.profile, run.key, RunDir(out_dir), notify)
    board.check_profile(run.profile)
    return board
