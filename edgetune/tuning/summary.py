"""The run summary: a typed object that ``edgetune tune`` returns and writes as ``summary.json``.

The CLI's report, ``edgetune deploy`` and the benchmarks read it through
:class:`TuneSummary` (``TuneSummary.load(path)`` for a run directory), so a
field is named once. ``to_dict()`` gives the JSON layout, which is stable.
``sessions.jsonl`` keeps every session's summary of a resumed run (summary.json
holds the last); ``edgetune report`` reads both.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..common.run_dir import RunDir

#: a JSON object as ``summary.json`` holds it
Json = dict[str, Any]
_Record = TypeVar("_Record")

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule.cost_model import CostModel

SUMMARY_NAME = RunDir.SUMMARY
#: one line per ``edgetune tune`` session in the run directory: that session's summary (summary.json keeps the last)
SESSIONS_NAME = RunDir.SESSIONS


@dataclass
class ModelInfo:
    source: str
    name: str
    sha256: str


@dataclass
class BoardInfo:
    label: str
    tracker: str  # host:port
    key: str


@dataclass
class TrialCounts:
    budget: int
    in_history_before: int
    this_run: int
    served_from_history: int
    measured_on_device: int
    failed: int
    build_timeouts: int
    default_schedules: int = 0  # of this run's trials: tasks' untuned code, measured before the search (tuning.baseline)
    # of this run's trials: the schedule library's schedules (of the exact workload or, adapted, another shape), measured first
    library_schedules: int = 0
    # of served_from_history: candidates another process sharing the history measured (or was measuring) meanwhile
    waited_for_others: int = 0
    # beside this run's trials: measurements that timed each task's fastest schedules again (tuning/confirm.py)
    retimed: int = 0


@dataclass
class Seconds:
    tuning_wall: float
    device: float
    upload: float
    build: float
    session: float = 0.0  # tracker requests and RPC session set-up of the runner


@dataclass
class HostTime:
    """Where the tuning wall clock went on the host, besides the board (seconds; ``benchmarks/host_time.py``).

    The host's time is the tuning wall clock less the board's (``wall - board``: issue 55's figure). Of it, as the
    tuning thread spent it: ``search``: making batches, less the cost model's predictions in it; ``features``: the
    cost model's feature rows (``feature_hits`` of ``feature_hits + feature_misses`` rows served by the cache);
    ``cost_model``: its fits and predictions less features (None for a cost model that does not keep time);
    ``build``: the tuning thread inside the builder; ``other``: the rest (waiting for builds the search did not
    hide, the task scheduler, callbacks, the history, default and library schedules' overhead), never below 0.
    ``ahead``: of ``search`` with its predictions (so of search, features and cost model together; it can exceed
    ``search`` alone), what was searched while the board measured the task's last batch
    (search/lookahead.py), or, on a board that shares the host's CPU, while its batch built: host time the board or
    the builds hid, so not counted again in ``other``. ``build_beside``: how long the runner waited for builds
    left to run beside the search, in its own thread: it overlaps the search, so it is shown, not added.
    ``wall``: None in summaries written before it was kept (their host time is the sum of the parts).
    """

    search: float
    features: float | None
    cost_model: float | None
    build: float
    board: float
    other: float
    measured_trials: int
    feature_hits: int = 0
    feature_misses: int = 0
    ahead: float = 0.0
    build_beside: float = 0.0
    wall: float | None = None

    @property
    def host_seconds(self) -> float:
        if self.wall is not None:
            return max(0.0, self.wall - self.board)
        return self.search + (self.features or 0.0) + (self.cost_model or 0.0) + self.build + self.other

    @property
    def per_trial(self) -> float | None:
        """Host seconds per measured trial (the issue's figure: wall clock less board time, per trial)."""
        return self.host_seconds / self.measured_trials if self.measured_trials else None

    def line(self) -> str:
        if not self.per_trial:
            return "host time: no trial measured"
        parts = [("search", self.search), ("features", self.features), ("cost model", self.cost_model),
                 ("build", self.build), ("other", self.other)]
        shown = ", ".join(f"{name} {value / self.measured_trials:.3f}" for name, value in parts if value is not None)
        if self.ahead:
            # ahead includes the search's predictions, which ``search`` has not: it is a share of search, features
            # and cost model together (so it can exceed ``search`` alone)
            shown += (f"; of search, features and cost model, done ahead while the board measured or the batch built "
                      f"{self.ahead / self.measured_trials:.3f}")
        if self.build_beside:
            shown += f"; builds the runner waited for beside the search {self.build_beside / self.measured_trials:.3f}"
        return (f"host time {self.per_trial:.3f} s per measured trial ({shown}); board {self.board / self.measured_trials:.3f} s"
                + (f"; feature rows {self.feature_hits} of {self.feature_hits + self.feature_misses} from the cache"
                   if self.feature_hits + self.feature_misses else ""))


def host_time(wall: float, search: float, cost_model: CostModel, build: float, board: float, measured: int,
              ahead: float = 0.0, build_beside: float = 0.0) -> HostTime:
    """The host's share of ``wall`` by component; ``cost_model`` is read for the times it keeps (the random forest).

    ``build``: the tuning thread's time in the builder. ``ahead``: seconds of ``search`` made while the board
    measured (they overlap ``board``), or, on a board that shares the host's CPU, while the batch built.
    ``build_beside``: the runner's wait for builds in its own thread; it overlaps the search and is not added
    (adding it counted the same seconds twice, once as search and once as build).
    """
    from ..costmodel.surrogate import RandomForestModel

    keeps_time = isinstance(cost_model, RandomForestModel)
    seconds = cost_model.seconds_ if keeps_time else None
    features = cost_model.features if keeps_time else None
    feature_sec = features.seconds if features is not None else None
    model_sec = None
    if seconds is not None:
        model_sec = max(0.0, seconds["predict"] + seconds["update"] - (feature_sec or 0.0))
        search = max(0.0, search - seconds["predict"])  # predictions are made inside the search
    used = search + (feature_sec or 0.0) + (model_sec or 0.0) + build + board
    return HostTime(
        search=search, features=feature_sec, cost_model=model_sec, build=build, board=board,
        other=max(0.0, wall - used + ahead), measured_trials=measured, ahead=ahead, build_beside=build_beside, wall=wall,
        feature_hits=features.hits if features is not None else 0,
        feature_misses=features.misses if features is not None else 0,
    )


@dataclass
class SearchInfo:
    strategy: str
    population_size: int | None
    num_trials_per_iter: int
    cost_model: str
    task_scheduler: str
    scheduler_awaits_measurements: bool | None  # True on a board that shares the host's CPU (see measure.awaiting)
    scheduler_decision_seconds: float | None = None  # edgetune's schedulers: time spent choosing tasks (None: stock)
    # per task class, the evolutionary search's population and iterations as sized by their returns (search/effort.py;
    # None: fixed, tuning.search_effort = "fixed" or a cost model without the forest's scores)
    effort: dict[str, Any] | None = None


@dataclass
class TaskResult:
    index: int
    name: str
    weight: float
    flops: float
    trials_before: int
    trials_this_run: int
    failed_this_run: int
    best_latency_us: float | None
    best_gflops: float | None
    default_latency_us: float | None = None  # the untuned code of this task, measured as the first candidate
    kept_default: bool = False  # no tuned candidate beat the untuned code: the delivered model keeps it
    # at most this many measured this run: a minor task (tuning.minor_task_share), or what
    # tuning.max_trials_per_task left of its budget after the records the history held
    trial_cap: int | None = None
    workload_hash: str = ""  # structural hash of the task's module, as the history stores it (its workload shash)
    # the schedule library's schedule of this exact workload, as measured on this board (None: the task did not start from it)
    library_latency_us: float | None = None
    # its fastest schedules timed again before the model was built: candidates, before_us, after_us, pick_changed
    retimed: Json | None = None
    # the library's schedule of another shape of this operator, adapted and measured on this board in place of
    # the untuned default (None: the task's exact workload was in the library, or none transferred)
    transferred_latency_us: float | None = None


@dataclass
class EndToEnd:
    artifact: str = ""
    untuned_artifact: str = ""
    untuned_latency: Json | None = None  # median_ms, mean_ms, ... as measured on the device
    tuned_latency: Json | None = None
    speedup: float = math.nan
    outputs_match: bool | None = None
    max_abs_diff: float | None = None
    delivered: str = "tuned"  # "untuned" when the tuned build measured slower and model.so is the untuned build
    # sum over tasks of weight x best latency, as tuning measured them: the tuned build's time inside its kernels
    tuned_kernels_ms: float | None = None
    # tuning.baseline: the runtime a user would otherwise run, timed beside model.so (board.baseline.BaselineResult)
    baselines: list[Json] = field(default_factory=list)

    @property
    def outside_kernels_share(self) -> float | None:
        """The share of the tuned build's latency spent outside its tuned kernels (dispatch, allocation, launches)."""
        if not self.tuned_kernels_ms or not self.tuned_latency:
            return None
        return 1.0 - self.tuned_kernels_ms / self.tuned_ms

    @property
    def tuned_ms(self) -> float:
        return float(self.tuned_latency["median_ms"])

    @property
    def untuned_ms(self) -> float:
        return float(self.untuned_latency["median_ms"])


@dataclass
class TuneSummary:
    """What one ``edgetune tune`` run did and delivered.

    Every field has a default so that summaries of older runs (or partial ones
    written by hand) load; ``edgetune tune`` always fills them all.
    """

    edgetune_version: str = ""
    tvm_version: str = ""
    date: str = ""
    model: ModelInfo | None = None
    profile: str = ""
    target: Json | None = None  # the TVM target, exported
    board: BoardInfo | None = None
    history: str | None = None
    trials: TrialCounts | None = None
    seconds: Seconds | None = None
    search: SearchInfo | None = None
    measurement: Json = field(default_factory=dict)
    measurement_reduction: Json | None = None
    warm_start: Json = field(default_factory=dict)
    suggested: Json | None = None
    interrupted: bool = False
    tasks: list[TaskResult] = field(default_factory=list)
    curve: list[Json] = field(default_factory=list)  # one point per batch, see progress.CurvePoint
    end_to_end: EndToEnd | None = None
    # how the graph was prepared (tasks.graph.GraphReport) and its kernels by class (tasks.inventory), under "kernels"
    graph: Json | None = None
    # how the graph was prepared, which every build of the run's records repeats (tasks.recipe.Recipe.to_dict)
    recipe: Json | None = None
    # the schedule library this run started from (schedules.use.LibraryChoice.to_dict); None for older summaries
    schedules: Json | None = None
    # where the host's time went (HostTime as a dict); None for older summaries
    host_time: Json | None = None
    # the dot-product instruction int8 kernels were tensorized with (common.int8_isa); "" for older summaries
    int8_instruction: str = ""

    def host_time_lines(self) -> list[str]:
        """Host seconds per measured trial by component (empty for older summaries)."""
        if not self.host_time:
            return []
        return [HostTime(**self.host_time).line()]

    def graph_lines(self) -> list[str]:
        """How the graph was prepared and what kernels it left, one line each (empty for older summaries)."""
        if not self.graph:
            return []
        int8 = [f"int8 instruction: {self.int8_instruction}"] if self.int8_instruction else []
        from ..tasks.blocking import UnblockedConv
        from ..tasks.graph import GraphPass, GraphReport
        from ..tasks.integer import FloatOp
        from ..tasks.inventory import Kernel, KernelInventory

        graph = self.graph
        passes = [GraphPass(**p) for p in graph.get("passes", [])]
        unblocked = [
            UnblockedConv(tuple(c["data_shape"]), tuple(c["weight_shape"]), int(c["groups"]), c["reason"])
            for c in graph.get("unblocked_convolutions", [])
        ]
        in_float = [FloatOp(tuple(op["ops"]), tuple(op["shape"]), op["reason"]) for op in graph.get("quantized_ops_in_float", [])]
        lines = [GraphReport(graph["optimization"], graph["conv_layout"], passes, unblocked, in_float).describe()]
        if graph.get("kernels"):
            lines.append(KernelInventory([Kernel(**k) for k in graph["kernels"]["kernels"]]).describe())
        return lines + int8

    def kernel_classes(self) -> dict[str, str]:
        """Task name -> its kernel class ("compute" / "memory: elementwise", ...), from the graph's inventory."""
        kernels = (self.graph or {}).get("kernels") or {}
        return {
            k["name"]: "compute" if k["klass"] == "compute" else f"memory: {k['kind']}" for k in kernels.get("kernels", [])
        }

    def library_lines(self) -> list[str]:
        """Which schedule library the run used and how its schedules compare with the final bests."""
        lib = self.schedules or {}
        lines = [lib["message"]] if lib.get("message") else []
        started = [t for t in self.tasks if t.library_latency_us is not None]
        if started:
            ratios = sorted(t.best_latency_us / t.library_latency_us for t in started if t.best_latency_us)
            median = ratios[len(ratios) // 2] if ratios else float("nan")
            lines.append(
                f"{len(started)} of {len(self.tasks)} tasks started from the library's schedule of their exact workload; "
                f"final best / library schedule on this board: median {median:.2f}, "
                f"{sum(r < 0.995 for r in ratios)} improved on it by tuning"
            )
        moved = [t for t in self.tasks if t.transferred_latency_us is not None]
        if moved:
            ratios = sorted(t.best_latency_us / t.transferred_latency_us for t in moved if t.best_latency_us)
            median = ratios[len(ratios) // 2] if ratios else float("nan")
            lines.append(
                f"{len(moved)} of {len(self.tasks)} tasks started from the library's schedule of another shape of their "
                f"operator, adapted; final best / that schedule: median {median:.2f}, {sum(r < 0.995 for r in ratios)} improved on it"
            )
        if lib.get("rechecked"):
            from .library_phase import describe_rechecked

            lines.append(describe_rechecked(lib["rechecked"]))
        if lib.get("searched_first"):
            from .lagging import describe_lagging

            lines.append(describe_lagging(lib["searched_first"]))
        return lines

    def retimed_lines(self) -> list[str]:
        """How timing each task's fastest schedules again moved the picks and the kernel time (tuning.confirm_best)."""
        retimed = [t for t in self.tasks if t.retimed]
        if not retimed:
            return []
        before = sum(t.weight * t.retimed["before_us"] for t in retimed) / 1e3
        after = sum(t.weight * t.retimed["after_us"] for t in retimed) / 1e3
        changed = [t.name for t in retimed if t.retimed["pick_changed"]]
        return [
            f"timed the fastest schedules of {len(retimed)} tasks again ({sum(t.retimed['candidates'] for t in retimed)} "
            f"measurements): their kernels {before:.3f} -> {after:.3f} ms as re-measured; "
            + (f"another schedule delivered for {len(changed)}: {', '.join(changed)}" if changed else "every pick stood")
        ]

    def kernels_ms(self) -> float | None:
        """Sum over tasks of weight x best latency in ms; None unless every task has a measured best."""
        if not self.tasks or any(t.best_latency_us is None for t in self.tasks):
            return None
        return sum(t.weight * t.best_latency_us for t in self.tasks) / 1e3

    @property
    def tasks_kept_default(self) -> list[str]:
        """Tasks whose delivered code is the untuned default, because no tuned candidate beat it."""
        return [task.name for task in self.tasks if task.kept_default]

    @property
    def artifact(self) -> Path | None:
        """The delivered ``model.so``; None when the run did not compile the model."""
        return Path(self.end_to_end.artifact) if self.end_to_end else None

    def to_dict(self) -> Json:
        out = dataclasses.asdict(self)
        if out["end_to_end"] is None:
            del out["end_to_end"]
        return out

    def write(self, out_dir: Path) -> Path:
        """Write ``summary.json`` atomically (a reader never sees half a file)."""
        path = Path(out_dir) / SUMMARY_NAME
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        os.replace(tmp, path)
        return path

    @classmethod
    def from_dict(cls, data: Json) -> "TuneSummary":
        """Inverse of :meth:`to_dict`; unknown keys (a newer edgetune) are ignored."""
        sections = {
            "model": ModelInfo, "board": BoardInfo, "trials": TrialCounts, "seconds": Seconds, "search": SearchInfo,
        }
        kwargs: Json = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            if f.name in sections:
                value = _build(sections[f.name], value)
            elif f.name == "tasks":
                value = [_build(TaskResult, item) for item in value]
            elif f.name == "end_to_end" and value is not None:
                value = _build(EndToEnd, value)
            kwargs[f.name] = value
        return cls(**kwargs)

    @classmethod
    def load(cls, path: Path) -> "TuneSummary":
        """Read a ``summary.json`` (or the one in a run directory)."""
        path = Path(path)
        if path.is_dir():
            path = path / SUMMARY_NAME
        return cls.from_dict(json.loads(path.read_text()))


def append_session(out_dir: Path, summary: TuneSummary) -> Path:
    """Keep this session's summary in ``sessions.jsonl``: a resumed run's earlier sessions stay readable."""
    path = Path(out_dir) / SESSIONS_NAME
    with open(path, "a") as handle:
        handle.write(json.dumps(summary.to_dict(), default=str) + "\n")
    return path


def load_sessions(run_dir: Path) -> list[TuneSummary]:
    """Every session's summary from ``sessions.jsonl``, oldest first; an unreadable line is skipped."""
    path = Path(run_dir) / SESSIONS_NAME
    if not path.exists():
        return []
    sessions = []
    for line in path.read_text().splitlines():
        try:
            sessions.append(TuneSummary.from_dict(json.loads(line)))
        except (ValueError, TypeError, AttributeError):
            continue  # a line cut short by a crash, or written by hand
    return sessions


def _build(kind: type[_Record], data: Json) -> _Record:
    names = {f.name for f in dataclasses.fields(kind)}
    return kind(**{key: value for key, value in data.items() if key in names})
