"""A tune that starts from a schedule library: which library, and which of its schedules each task gets.

``tuning.schedules`` (``--schedules``) is ``auto`` (the library shipped in
the package for the target's CPU family, if any), ``off``, or a library file.
A library of another family, another TVM or a damaged file is said in one
line and not used: the tune goes on without it.

For a task whose exact workload is in the library, the library's best
schedule (its best ``tuning.library_schedules``) is replayed on the task and
measured on the board as the task's first candidate (one trial each, stored
in the history like any other). The task's untuned default is not measured
then where the library says how the default did: it is one of the library's
schedules where it was among the fastest (no search beat the unscheduled code
of a channel shuffle's concat, reshape, transpose and split). Libraries made
before edgetune kept that do not say: a memory-bound task from one of those
measures its default too (:func:`default_unknown`). Other shapes of the same operator join the history's records
as transfer seeds of the first batches (``tuning.transfer = "similar"``); a
compute-bound task the library lacks measures the library's schedule of the
nearest shape, adapted to it, as its first trial (in place of its untuned
default under two trials per task: :func:`transferred_library_candidates`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import LibraryError
from ..common.cpu_family import family_of
from .library import ScheduleLibrary, load_library

#: ``tuning.schedules`` values besides a file path
SCHEDULES_MODES = ("auto", "off")
#: the package data directory (edgetune/schedules/data/) holding the shipped libraries, one file per CPU family
SHIPPED_PACKAGE = "edgetune.schedules.data"
SHIPPED_SUFFIX = ".schedules.xz"  # xz: a seventh of gzip's bytes (edgetune.schedules.library)
#: workloads of the same operator with another epilogue tried for a task the library has no workload of its own
#: operator for (each replays its trace on its own workload first; a few are built unlike this task's space)
ANCHOR_WORKLOADS_TRIED = 4


@dataclass
class LibraryChoice:
    """The library a run uses (or None) and the one line that says why."""

    setting: str
    library: ScheduleLibrary | None = None
    message: str = ""
    family: str = ""
    exact: dict[str, float] = field(default_factory=dict)  # task name -> the library's latency (us) where it measured it
    #: task name -> the latency (us) of the library's schedule of another shape, adapted to the task and measured
    transferred: dict[str, float] = field(default_factory=dict)
    #: tasks whose library schedule ran far below their operator class, searched first
    #: (:class:`~edgetune.tuning.lagging.LaggingTask` as dicts)
    searched_first: list[dict[str, Any]] = field(default_factory=list)
    #: exact library schedules that measured far slower than their record, measured again
    #: (:class:`~edgetune.tuning.library_phase.RecheckedTask` as dicts)
    rechecked: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        lib = self.library
        return {
            "setting": self.setting,
            "used": lib is not None,
            "library": lib.path if lib else None,
            "library_family": lib.family if lib else None,
            "target_family": self.family,
            "message": self.message,
            "searched_first": list(self.searched_first),
            "rechecked": list(self.rechecked),
        }


def shipped_libraries() -> list[Path]:
    """The libraries shipped in the package."""
    folder = resources.files("edgetune.schedules") / "data"  # a data directory (no __init__.py), as costmodel's
    if not folder.is_dir():
        return []
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(SHIPPED_SUFFIX))


def choose_library(setting: str, target: Any) -> LibraryChoice:
    """The library ``setting`` names for ``target``, or None with the reason; never raises for a bad file."""
    family = family_of(target).name
    choice = LibraryChoice(setting, family=family)
    if setting == "off":
        return choice
    if setting == "auto":
        shipped = shipped_libraries()
        for path in shipped:
            if path.name == f"{family}{SHIPPED_SUFFIX}":
                return _load_checked(choice, path)
        names = ", ".join(p.name.removesuffix(SHIPPED_SUFFIX) for p in shipped) or "none"
        choice.message = f"schedule library: none shipped for this CPU family ({family}; shipped: {names}); tuning from scratch"
        return choice
    return _load_checked(choice, Path(setting).expanduser())


def recipe_library(tuning: Any, target: Any) -> ScheduleLibrary | None:
    """The library a run's recipe chooses from (:func:`~edgetune.tasks.recipe.recipe_from_settings`): the one
    ``tuning.schedules`` names where ``tuning.winograd`` is ``auto``, else None (nothing to read it for)."""
    if getattr(tuning, "winograd", "off") != "auto":
        return None
    return choose_library(tuning.schedules, target).library


def _load_checked(choice: LibraryChoice, path: Path) -> LibraryChoice:
    try:
        library = load_library(path)
    except LibraryError as err:
        choice.message = f"schedule library not used: {err}"
        return choice
    if library.family != choice.family:
        choice.message = (
            f"schedule library not used: '{path}' is for {library.family}, this target is {choice.family} "
            "(its schedules were tuned for other vector instructions)"
        )
        return choice
    choice.library = library
    choice.message = f"schedule library: {path} ({library.family}, {len(library.workloads)} workloads)"
    return choice


def library_candidates(context: Any, library: ScheduleLibrary, count: int = 1) -> list[Any]:
    """Up to ``count`` of the library's best schedules for ``context``'s exact workload, replayed on it, the best first
    (:meth:`~edgetune.schedules.library.LibraryWorkload.schedules_for`: its own CPU model's first).

    Empty when the workload is absent or none of its schedules replays on this task.
    """
    from ..search.default_schedule import replayed_candidate

    entry = library.find(context.mod)
    if entry is None or not entry.schedules:
        return []
    replayed: list[Any] = []
    # the best first, those measured on this target's CPU model before the family's others; the next if one does
    # not replay
    for schedule in entry.schedules_for(context.target):
        if len(replayed) == count:
            break
        try:
            trace = entry.trace(schedule)
        except Exception:  # noqa: BLE001 - a trace TVM cannot read back
            continue
        candidate = replayed_candidate(context, trace)
        if candidate is not None:
            replayed.append(candidate)
    return replayed


def transferred_library_candidates(
    context: Any, library: ScheduleLibrary, target: Any, count: int = 1, *, memory_bound: bool = False,
) -> list[Any]:
    """For a compute-bound task the library lacks: its schedules of the same operator at the nearest shapes, adapted.

    Up to ``count`` candidates, the nearest shape first (:func:`~edgetune.search.transfer.best_similar_records`);
    where no schedule of the same operator and epilogue transfers, the decisions of the same operator with
    another epilogue (:func:`~edgetune.search.transfer.transfer_decisions`).
    They are measured as the task's first trials; under two trials per task in place of its untuned default
    (:func:`~edgetune.tuning.plan.plan_first_measurements`): a one-trial tune would otherwise spend
    it on the untuned loops of a convolution and deliver them. A task of the exact workload gets none, and a
    memory-bound one only with ``memory_bound`` (the caller then measures its untuned default beside it: a
    channel shuffle ran 5x faster unscheduled, while DenseNet's concatenations with their batch norms ran their
    untuned loops, one thread and no vectors, at 1 GFLOPS, 21 of the model's 47 ms).
    """
    from tvm import tirx

    from ..search.transfer import transferred_candidates
    from ..tasks.inventory import classify
    from ..tasks.signature import operator_signature

    if count <= 0 or library.find(context.mod) is not None:
        return []
    funcs = [f for _g, f in context.mod.functions_items() if isinstance(f, tirx.PrimFunc)]
    if not funcs or (classify(funcs[0]) != "contraction" and not memory_bound):
        return []
    found: list[Any] = []
    signature = operator_signature(context.mod)
    # nearest shape first, one workload at a time: replaying every trace of the operator cost a tune seconds;
    # then the same operator with another epilogue (hard-swish where the library has ReLU, no bias), its
    # decisions carried into this workload's design space, the nearest few shapes only
    nearest = library.nearest_workloads(context.mod, signature)
    anchors = library.anchor_workloads(context.mod, signature, limit=ANCHOR_WORKLOADS_TRIED)
    for workload, per_workload in [*((w, 1) for w in nearest), *((w, None) for w in anchors)]:
        # another epilogue carries decisions only into a space built like the trace: an anchor's schedules are tried
        # in order until one is (a library can hold one operator's schedules from two spaces: MultiLevelTiling's,
        # and the depthwise space's, built after it)
        records = library.tuning_records(target, workloads=[workload], per_workload=per_workload)
        found += transferred_candidates(context, records, count - len(found))
        if len(found) >= count:
            break
    return found


def default_unknown(context: Any, library: ScheduleLibrary) -> bool:
    """Whether a task measured from ``library`` must measure its untuned default too.

    True for a memory-bound task (a data-movement, elementwise or reduction
    kernel) whose library entry does not say how its default did: a library
    made before edgetune kept defaults. There the untuned code can beat every
    tuned schedule (a channel shuffle ran 5x faster unscheduled); a convolution's
    unscheduled loops never came near its tuned schedules, so compute-bound
    tasks trust the library.
    """
    from tvm import tirx

    from ..tasks.inventory import classify

    entry = library.find(context.mod)
    if entry is None or entry.default_latency_us is not None:
        return False
    funcs = [f for _g, f in context.mod.functions_items() if isinstance(f, tirx.PrimFunc)]
    return bool(funcs) and classify(funcs[0]) != "contraction"
