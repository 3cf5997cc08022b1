"""The device profile data model and its strict validation.

A profile is plain data (one TOML file) that every later stage reads: the TVM
target, how to cross-compile, how to reach and measure the board, and the tuning
defaults. Validation is strict and eager so that a typo fails at load time with
a one-line message, not hours later inside a tuning run.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    import tvm

from edgetune.common.choices import (  # noqa: F401 - re-exported: the schema's vocabulary
    BASELINES,
    CANDIDATE_LINKS,
    CONV_LAYOUTS,
    COST_MODELS,
    EARLY_STOPS,
    EVALUATORS,
    EXPLORATIONS,
    GRAPH_OPTIMIZATIONS,
    RPC_DEVICES,
    SAMPLERS,
    SEARCH_STRATEGIES,
    STOP_RULES,
    TASK_SCHEDULERS,
    TRANSFERS,
    WINOGRAD_MODES,
)

#: The RPC device each target kind runs on; kinds not listed need an explicit ``rpc.device``.
DEVICE_FOR_KIND = {
    "llvm": "cpu",
    "c": "cpu",
    "cuda": "cuda",
    "opencl": "opencl",
    "vulkan": "vulkan",
    "metal": "metal",
}
#: Target kinds whose code runs on the CPU itself (no separate host target).
CPU_KINDS = ("llvm", "c")

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


# --------------------------------------------------------------------------- value checks


class _Mismatch(Exception):
    """A value does not fit its key; ``hint`` (if any) is appended to the message."""

    def __init__(self, hint: str = "") -> None:
        super().__init__(hint)
        self.hint = hint


@dataclass(frozen=True)
class _Spec:
    """One key: what it must be (for messages), how to check/convert it, its default.

    ``choices`` and ``type`` are what a CLI flag for the key accepts.
    """

    expected: str
    convert: Callable[[Any], Any]
    default: Any = None
    choices: tuple[str, ...] = ()
    type: type | None = None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _integer(minimum: int | None = None, default: Any = None) -> _Spec:
    def convert(value: Any) -> int:
        if not _is_int(value) or (minimum is not None and value < minimum):
            raise _Mismatch
        return value

    expected = "an integer" if minimum is None else f"an integer >= {minimum}"
    return _Spec(expected, convert, default, type=int)


def _number(*, above: float | None = None, at_least: float | None = None, default: Any = None) -> _Spec:
    """A finite float; ints are accepted (TOML writes ``60`` as readily as ``60.0``)."""

    def convert(value: Any) -> float:
        if not (_is_int(value) or isinstance(value, float)) or not math.isfinite(value):
            raise _Mismatch
        if (above is not None and value <= above) or (at_least is not None and value < at_least):
            raise _Mismatch
        return float(value)

    bound = f" > {above:g}" if above is not None else f" >= {at_least:g}" if at_least is not None else ""
    return _Spec(f"a number{bound}", convert, default, type=float)


def _string(choices: tuple[str, ...] = (), default: Any = None, booleans: tuple[str, str] | None = None) -> _Spec:
    """A string among ``choices``; with ``booleans`` (the choices a ``true`` and a ``false`` mean), a key that was a
    boolean before it had more values reads old profiles as it did."""

    def convert(value: Any) -> str:
        if booleans is not None and isinstance(value, bool):
            return booleans[0] if value else booleans[1]
        if not isinstance(value, str):
            raise _Mismatch
        if choices and value not in choices:
            close = difflib.get_close_matches(value, choices, n=1)
            raise _Mismatch(f" (did you mean '{close[0]}'?)" if close else "")
        return value

    expected = "one of " + ", ".join(f"'{c}'" for c in choices) if choices else "a string"
    return _Spec(expected, convert, default, choices=choices, type=str)


def _name_list(choices: tuple[str, ...], none: str, default: Any = None) -> _Spec:
    """Comma-separated names from ``choices`` (no repeats), or ``none`` alone: kept as the canonical string."""

    def convert(value: Any) -> str:
        if not isinstance(value, str):
            raise _Mismatch
        names = [name.strip() for name in value.split(",")]
        if names == [none]:
            return none
        unknown = [name for name in names if name not in choices]
        if unknown or len(set(names)) != len(names):
            close = difflib.get_close_matches(unknown[0], choices, n=1) if unknown else []
            raise _Mismatch(f" (did you mean '{close[0]}'?)" if close else "")
        return ",".join(names)

    expected = f"'{none}' or a comma-separated list of " + ", ".join(f"'{c}'" for c in choices)
    return _Spec(expected, convert, default, type=str)


def _nonempty_string(default: Any = None) -> _Spec:
    def convert(value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise _Mismatch
        return value

    return _Spec("a non-empty string", convert, default, type=str)


def _boolean(default: Any = None) -> _Spec:
    def convert(value: Any) -> bool:
        if not isinstance(value, bool):
            raise _Mismatch
        return value

    return _Spec("a boolean (true or false)", convert, default, type=bool)


def _string_list(default: tuple[str, ...] = ()) -> _Spec:
    def convert(value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _Mismatch
        return tuple(value)

    return _Spec("a list of strings", convert, default)


def _cpu_list(default: tuple[int, ...] = ()) -> _Spec:
    def convert(value: Any) -> tuple[int, ...]:
        if not isinstance(value, list) or not all(_is_int(v) and v >= 0 for v in value):
            raise _Mismatch
        if len(set(value)) != len(value):
            raise _Mismatch
        return tuple(value)

    return _Spec("a list of distinct integers >= 0", convert, default)


def _name(value: Any) -> str:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise _Mismatch
    return value


_NAME_SPEC = _Spec("a non-empty string of letters, digits, '.', '_' or '-'", _name)
_DESCRIPTION_SPEC = _string(default="")

#: Keys whose default depends on other keys; filled in by :func:`parse_profile`.
_DERIVED = object()

#: A group of CLI flags: the measurement-reducing switches share one heading in ``edgetune tune --help``.
FEWER_TRIALS = "fewer on-device trials"


def declare(
    check: _Spec,
    default: Any = dataclasses.MISSING,
    *,
    derived: bool = False,
    flag: str = "",
    metavar: str | None = None,
    group: str = "",
) -> Any:
    """Declare one profile key, once: its check, its default and (with ``flag``, the help) its CLI flag and API keyword.

    ``derived``: the default follows from other keys (:meth:`_Parser.derive_defaults`); ``default`` is
    then only the dataclass's. The table of checks (:data:`SECTIONS`), the CLI flags of ``edgetune tune``
    and the keyword arguments of ``edgetune.tune()`` are all read from these declarations.
    """
    metadata = {"check": check, "derived": derived, "flag": flag, "metavar": metavar, "group": group}
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class BuildSettings:
    """How candidates are compiled on the host."""

    cross_compiler: str = declare(_string(), "")
    cross_compiler_flags: tuple[str, ...] = declare(_string_list(), ())
    timeout_sec: float = declare(_number(above=0), 60.0)
    workers: int = declare(_integer(0), 0)
    #: "driver": a candidate links through the compiler; "direct": with the compiler's own ld, its link line less its
    #: libraries (about 30 ms less CPU per build, but no host time per trial measured saved end to end, RESULTS
    #: host_time_link)
    candidate_link: str = declare(_string(CANDIDATE_LINKS), "driver")


@dataclass(frozen=True)
class RPCSettings:
    """How the board is reached through the RPC tracker."""

    key: str = declare(_nonempty_string(), derived=True)  # the profile's name
    device: str = declare(_string(RPC_DEVICES), derived=True)  # from the target's kind
    session_timeout_sec: float = declare(_number(above=0), 120.0)


@dataclass(frozen=True)
class MeasureSettings:
    """How each built candidate is timed on the board."""

    number: int = declare(_integer(1), 10)
    repeat: int = declare(_integer(1), 3)
    min_repeat_ms: int = declare(_integer(0), 50)
    cooldown_sec: float = declare(_number(at_least=0), 0.0)
    # on by default (CPU devices only): a kernel inside a model finds its weights cold, so a candidate timed on warm
    # caches can win alone and lose in the model (benchmarks/RESULTS.md, vs_onnxruntime_flush: whole model / tuned
    # kernels went from 1.11-1.98 to 0.99-1.05, the delivered models 0.63-1.05x as slow)
    enable_cpu_cache_flush: bool = declare(_boolean(), True)
    timeout_sec: float = declare(_number(above=0), 30.0)
    # boards one batch is spread over when several RPC servers share the key (0: all free ones)
    max_boards: int = declare(_integer(0), 0)
    # "adaptive": micro-batches of single runs until the throughput CV is low
    # (AdaTune); "fixed": number x repeat with min_repeat_ms, as stock MetaSchedule
    evaluator: str = declare(
        _string(EVALUATORS), "adaptive", group=FEWER_TRIALS,
        flag="time candidates until their throughput CV is low (adaptive) or a fixed number of runs",
    )
    micro_batch: int = declare(_integer(1), 50)
    max_runs: int = declare(_integer(1), 500)
    cv_threshold: float = declare(_number(above=0), 0.03)
    min_runs: int = declare(_integer(0), 0)
    micro_batch_ms: float = declare(_number(at_least=0), 25.0)
    # device time one candidate may take (at least stock's: 4 x run time); 0: no budget
    budget_ms: float = declare(_number(at_least=0), 100.0)
    # "ci": stop once the mean's 95 % CI is within ci_threshold; "cv": the paper's CV rule;
    # "auto": CI for kernels too long for a full micro-batch, CV for the rest
    stop_rule: str = declare(_string(STOP_RULES), "auto")
    ci_threshold: float = declare(_number(above=0), 0.03)
    # provisioned boards (edgetune tune --board): a board above this SoC temperature, or under the
    # performance governor below min_freq_ratio of its top clock, is throttling; batches wait (at
    # most cool_wait_sec) until it cools
    max_temp_c: float = declare(_number(above=0), 80.0)
    min_freq_ratio: float = declare(_number(at_least=0), 0.8)
    cool_wait_sec: float = declare(_number(at_least=0), 120.0)


@dataclass(frozen=True)
class TuningSettings:
    """Default search budget and MetaSchedule components for ``edgetune tune``."""

    trials: int = declare(_integer(1), 256)
    num_trials_per_iter: int = declare(_integer(1), 16)
    max_trials_per_task: int = declare(_integer(0), 0)
    cost_model: str = declare(
        _string(COST_MODELS), "rf", group=FEWER_TRIALS,
        flag="xgb (AutoTVM), rf (random forest + expected improvement), meta (MetaTune, needs edgetune[meta]) or random",
    )
    # MetaTune model file of cost_model = "meta" (edgetune costmodel pretrain); "": the bundled one
    cost_model_file: str = declare(_string(), "")
    # cost_model = "meta": a task's measurements at which the random forest weighs as much as MetaTune; 0: MetaTune alone
    meta_handoff_samples: int = declare(_integer(0), 0)
    search_strategy: str = declare(_string(SEARCH_STRATEGIES), "evolutionary")
    population_size: int = declare(_integer(0), 0)
    # the evolutionary search's population and iterations per round (edgetune/search/effort.py): "returns" sizes them
    # per task class from the predicted improvement each bought; "fixed": population_size and MetaSchedule's 4 iterations
    search_effort: str = declare(
        _string(("returns", "fixed")), "returns",
        flag="size each round's evolutionary search (population, iterations) per task class from what its earlier "
        "rounds returned (returns, the default) or keep population_size and MetaSchedule's 4 iterations (fixed)",
    )
    search_min_return: float = declare(_number(at_least=0), 0.02)
    task_scheduler: str = declare(_string(TASK_SCHEDULERS), "gradient")
    seed: int = declare(_integer(), 0)
    # measurement reduction (see edgetune/search/strategy.py)
    sampler: str = declare(
        _string(SAMPLERS), "kmeans", group=FEWER_TRIALS, flag="measure one candidate per K-means cluster of each batch",
    )
    kmeans_distance_ratio: float = declare(_number(above=0), 0.3)
    early_stop: str = declare(
        _string(EARLY_STOPS), "adaptive", group=FEWER_TRIALS, flag="end a task when its batches stop improving",
    )
    early_stop_initial: int = declare(_integer(0), 0)
    early_stop_increment: float = declare(_number(at_least=0), 1.0)
    early_stop_decrement: float = declare(_number(at_least=0), 1.0)
    early_stop_flops_ratio: float = declare(_number(at_least=0), 0.05)
    early_stop_min_step: int = declare(_integer(0), 0)
    early_stop_max_step: int = declare(_integer(0), 0)
    early_stop_patience: int = declare(_integer(0), 0)
    exploration: str = declare(
        _string(EXPLORATIONS), "contextual", group=FEWER_TRIALS,
        flag="random share of each batch from the forest's uncertainty (contextual) or a fixed 5%%",
    )
    transfer: str = declare(
        _string(TRANSFERS), "similar", group=FEWER_TRIALS,
        flag="half of each task's first batch replayed from the best schedules of the same operator at other shapes "
        "in the history (similar), or none (off)",
    )
    # "auto": the layout measured best for the target's CPU family (edgetune/tasks/graph.py CONV_LAYOUT_BY_FAMILY)
    conv_layout: str = declare(
        _string(CONV_LAYOUTS), "auto",
        flag="the layout convolutions are tuned and built in: auto (default: the one measured best for the target's "
        "CPU family, NCHWc on x86-64 with AVX-512, as imported elsewhere), as-is, NHWC, NCHWc (channels blocked by the "
        "vector lanes) or NCHW4c / NCHW8c / NCHW16c (a fixed block)",
    )
    # ONNX Runtime-class graph preparation before task extraction (edgetune/tasks/graph.py); "none": as imported
    graph_optimization: str = declare(
        _string(GRAPH_OPTIMIZATIONS), "full",
        flag="full (default): fold batch norms into their convolution or dense layer, fold constants and compute "
        "exp/erf/tanh/softmax/sigmoid/GELU with vectorizable polynomials before the model's kernels are extracted, "
        "as ONNX Runtime prepares a graph; none: tune the graph as imported",
    )
    # the fast-math graph pass (edgetune/tasks/graph.py) at graph_optimization "full"; off: libm's exact functions
    fast_math: bool = declare(
        _boolean(), True,
        flag="at graph optimization full, compute float32 exp/erf/tanh/softmax/sigmoid/SiLU/GELU with TVM's vectorizable "
        "polynomials (default); --no-fast-math keeps libm's exact functions",
    )
    # a quantized model's convolutions and dense layers in int8 with int32 accumulation (edgetune/tasks/integer.py)
    integer: bool = declare(
        _boolean(), True,
        flag="compute a quantized model's (full-integer .tflite, ONNX QDQ) convolutions and dense layers as int8 x int8 "
        "-> int32 kernels with the requantization fused (default); off: in float32 between its dequantize and quantize "
        "ops, as TVM's frontend imports it",
    )
    # grouped convolutions (groups > 1, not depthwise) blocked where their groups are whole (half) blocks
    # (edgetune/tasks/blocking.py); off: each stays NCHW between layout transforms, as before the blocked form existed
    block_grouped: bool = declare(
        _boolean(), True,
        flag="in a blocked convolution layout, run grouped convolutions (RegNet, ResNeXt) blocked where each group is "
        "whole blocks of the vector lanes or of half of them (default); --no-block-grouped keeps them in NCHW",
    )
    # depthwise convolutions (blocked float, int8) searched with their vector lanes whole and innermost
    # (edgetune/search/depthwise_space.py); off: MetaSchedule's MultiLevelTiling, which splits the lanes like any axis
    depthwise_tiling: bool = declare(
        _boolean(), True,
        flag="on a CPU, search depthwise convolutions (blocked float ones, int8 ones) in tiles that keep their channel "
        "lanes one vector, innermost (default); --no-depthwise-tiling searches them with MetaSchedule's "
        "MultiLevelTiling",
    )
    # blocked float32 3x3 stride-1 convolutions as Winograd F(4x4, 3x3) (edgetune/tasks/winograd.py): a quarter of the
    # multiplies, between an input and an output transform; off: the direct convolution (conv2d_NCHWc). "auto": the
    # shapes whose Winograd schedules in the schedule library beat its direct ones (resolved into the run's recipe)
    winograd: str = declare(
        _string(WINOGRAD_MODES, booleans=("on", "off")), "auto",
        flag="in a blocked convolution layout, compute 3x3 stride-1 float32 convolutions in the Winograd form F(4x4, "
        "3x3), a quarter of the multiplies, their weights transformed once on the host: auto (default) where the "
        "schedule library holds a Winograd schedule of the shape that beat its direct one, on wherever it applies "
        "(each shape the library lacks starts from untuned code), off nowhere",
    )
    # where tasks start: "auto" (the schedule library shipped for the target's CPU family), "off", or a library file
    schedules: str = declare(
        _nonempty_string(), "auto", metavar="auto|off|FILE",
        flag="start each task from a schedule library: auto (default: the one shipped for the target's CPU family, "
        "if any), off, or a library file (`edgetune schedules export`); a task whose workload is in it measures the "
        "library's schedule first, other shapes seed the first batches",
    )
    # how many of the library's best schedules such a task measures first (each one trial)
    library_schedules: int = declare(
        _integer(1), 1, metavar="N",
        flag="trials a task whose workload is in the schedule library spends on the library's best schedules "
        "before its search (default 1; the library keeps up to 3 per workload)",
    )
    # after the tune, the same model in the runtime a user would otherwise run, timed beside the delivered one
    baseline: str = declare(
        _name_list(tuple(b for b in BASELINES if b != "none"), "none"), "none",
        flag="after tuning, time the same model file in these runtimes beside the delivered one on the board (this "
        "machine for the embedded board, a provisioned --board over SSH), same threads and input, each alone in "
        "blocks after a pause with the runtime's default options: onnxruntime (an ONNX model), litert (a .tflite "
        "model), both comma-separated, or none (default)",
    )
    # MetaSchedule's RewriteLayout on CPU targets: a schedule may keep a constant weight in the layout its loops read,
    # rewritten once at build time (edgetune/artifact/compile.py); changes the tasks' workloads, not the model's outputs
    prepack_weights: bool = declare(
        _boolean(), False,
        flag="let each dense/convolution schedule store its constant weights in the layout its loops read, rewritten "
        "once when the model is built (CPU targets; MetaSchedule's RewriteLayout, TVM's cpu_weight_prepack)",
    )
    # the winner's curse (edgetune/tuning/confirm.py): after the search, each task's fastest schedules within
    # confirm_margin of its best are timed again side by side, and the model is built from those times
    confirm_best: int = declare(
        _integer(0), 0, metavar="N",
        flag="after the search, time each task's fastest N schedules (those within tuning.confirm_margin, 15%% by "
        "default, of its best) again side by side and deliver the fastest of them as re-measured, since the fastest "
        "of many noisy measurements measured luckier than it runs; at most N measurements per task beside the trials, "
        "on runs of at least 4N trials per task (default 0: off; on this project's noisy host 3 did not deliver "
        "faster models, benchmarks/RESULTS.md vs_onnxruntime_retime)",
    )
    confirm_margin: float = declare(_number(at_least=0), 0.15)
    # no task ends at an inherited schedule its operator class beats by far (edgetune/tuning/lagging.py): a task that
    # started from the library and runs under lagging_ratio of its class's GFLOPS while it is at least lagging_share
    # of the model gets lagging_trials of the search budget kept for it (0: off)
    lagging_ratio: float = declare(_number(at_least=0), 0.5)
    lagging_share: float = declare(_number(at_least=0), 0.05)
    lagging_trials: int = declare(_integer(0), 8)
    # a schedule of a task's exact workload from the library that measures over library_recheck times its record (at
    # the board's pace over the model's library schedules) is measured once more, and the newer time kept (0: off)
    library_recheck: float = declare(_number(at_least=0), 1.5)
    minor_task_share: float = declare(_number(at_least=0), 0.01)
    minor_task_trials: int = declare(_integer(1), 2)
    # measure each task's untuned code (its default schedule) as one trial before the search, so the
    # tuned model is never slower than the untuned one (see edgetune/tuning/baseline.py); false: skip it
    default_schedule: bool = declare(_boolean(), True)


@dataclass(frozen=True)
class DeviceSettings:
    """Facts about the board that TVM's target does not carry."""

    arch: str = declare(_nonempty_string(), derived=True)  # from the target's triple, else this machine
    peak_gflops: float | None = declare(_number(above=0), None)
    num_threads: int = declare(_integer(1), 1, derived=True)  # the target's num-cores
    core_affinity: tuple[int, ...] = declare(_cpu_list(), ())


_SECTION_CLASSES = {
    "build": BuildSettings,
    "rpc": RPCSettings,
    "measure": MeasureSettings,
    "tuning": TuningSettings,
    "device": DeviceSettings,
}


def _declared_checks(settings: type) -> dict[str, _Spec]:
    """A settings class's keys, each check with its default (:data:`_DERIVED` where other keys decide it)."""
    checks = {}
    for declared in dataclasses.fields(settings):
        check, default = declared.metadata["check"], declared.default
        if declared.metadata["derived"]:
            default = _DERIVED
        elif default is dataclasses.MISSING:
            default = None
        checks[declared.name] = dataclasses.replace(check, default=default)
    return checks


#: Every table of a profile except [target]/[host_target], key -> spec (with default), read from the declarations.
SECTIONS: dict[str, dict[str, _Spec]] = {section: _declared_checks(cls) for section, cls in _SECTION_CLASSES.items()}


@dataclass(frozen=True)
class ProfileFlag:
    """A profile key that ``edgetune tune`` takes as a flag and ``edgetune.tune()`` as a keyword argument."""

    name: str  # the keyword argument; the flag is --name-with-dashes
    section: str
    key: str
    help: str
    choices: tuple[str, ...]
    type: type | None
    metavar: str | None
    group: str

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.key}"


def _declared_flags() -> dict[str, ProfileFlag]:
    flags = {}
    for section, cls in _SECTION_CLASSES.items():
        for declared in dataclasses.fields(cls):
            meta = declared.metadata
            if meta["flag"]:
                check = meta["check"]
                flags[declared.name] = ProfileFlag(
                    declared.name, section, declared.name, meta["flag"], check.choices, check.type, meta["metavar"],
                    meta["group"],
                )
    return flags


#: Per-run overrides of profile keys (flag of ``edgetune tune``, keyword of ``edgetune.tune()``), by argument name.
PROFILE_FLAGS: dict[str, ProfileFlag] = _declared_flags()
TOP_LEVEL_KEYS = ("name", "description", "target", "host_target", *SECTIONS)
#: Every valid dotted key of the fixed tables, for suggestions and docs.
ALL_KEYS = tuple(f"{section}.{key}" for section, specs in SECTIONS.items() for key in specs)


# --------------------------------------------------------------------------- the profile


@dataclass(frozen=True)
class DeviceProfile:
    """One validated device profile; build it with :func:`parse_profile` or the loader."""

    name: str
    description: str
    source: Path | None
    target: dict[str, Any]
    host_target: dict[str, Any] | None
    build: BuildSettings
    rpc: RPCSettings
    measure: MeasureSettings
    tuning: TuningSettings
    device: DeviceSettings
    #: the data as written, so overrides re-derive defaults (``rpc.key`` follows ``name``...)
    _raw: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    #: what was resolved on this machine when loading: ``{"target.mcpu": "native -> znver4", ...}``
    resolved: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def origin(self) -> str:
        """Where the profile came from, as error messages name it."""
        return str(self.source) if self.source is not None else f"profile '{self.name}'"

    @property
    def is_cross_compiled(self) -> bool:
        """True when candidates are linked with ``build.cross_compiler`` rather than the host's."""
        return bool(self.build.cross_compiler)

    def tvm_target(self) -> tvm.target.Target:
        """The ``tvm.target.Target`` (with host); raises ``TargetError`` if TVM rejects it."""
        from edgetune.profile import tvm_support

        return tvm_support.build_target(self)

    def int8_instruction(self) -> str:
        """The dot-product instruction int8 kernels use on this profile's target (``avx512-vnni``, ``sdot``... ``none``).

        Read from the target's CPU features (``mcpu``/``mattr``; ``mcpu = "native"`` is this host's CPU by now);
        a target TVM rejects has none.
        """
        from edgetune.common.int8_isa import NONE, int8_instruction
        from edgetune.errors import EdgetuneError

        try:
            return int8_instruction(self.tvm_target())
        except EdgetuneError:
            return NONE

    def check_buildable(self) -> None:
        """Raise ``TargetError`` unless this machine can compile candidates for the profile."""
        from edgetune.profile import tvm_support

        tvm_support.check_buildable(self)

    def with_overrides(self, **sections: Any) -> DeviceProfile:
        """A copy with tables merged key by key (``tuning={"trials": 8}``), validated like a file."""
        merged = copy.deepcopy(dict(self._raw if self._raw is not None else self.to_dict()))
        for key, value in sections.items():
            value = copy.deepcopy(dict(value) if isinstance(value, Mapping) else value)
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key].update(value)
            else:
                merged[key] = value
        from edgetune.profile.parser import parse_profile  # the parser builds profiles: imported when used

        return parse_profile(merged, origin=f"{self.origin} (overrides)", source=self.source)

    def to_dict(self) -> dict[str, Any]:
        """The profile as TOML-shaped data with every default spelled out."""
        data: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "target": copy.deepcopy(self.target),
        }
        if self.host_target is not None:
            data["host_target"] = copy.deepcopy(self.host_target)
        for section in SECTIONS:
            values = dataclasses.asdict(getattr(self, section))
            data[section] = {
                key: list(value) if isinstance(value, tuple) else value
                for key, value in values.items()
                if value is not None  # TOML has no null: an unset optional key is omitted
            }
        return data

    def describe(self) -> str:
        """A multi-line human summary (``edgetune profiles show``)."""
        b, r, m, t, d = self.build, self.rpc, self.measure, self.tuning, self.device
        compiler = b.cross_compiler or "native host compiler"
        if b.cross_compiler_flags:
            compiler += " " + " ".join(b.cross_compiler_flags)
        pinning = f"pinned to CPUs {', '.join(map(str, d.core_affinity))}" if d.core_affinity else "not pinned"
        peak = f"{d.peak_gflops:g} GFLOPS peak" if d.peak_gflops is not None else "peak GFLOPS unknown"
        cap = f"at most {t.max_trials_per_task} per task" if t.max_trials_per_task else "no per-task cap"
        rows = [
            ("source", str(self.source) if self.source is not None else "(in memory)"),
            ("target", json.dumps(self.target)),
            ("host target", json.dumps(self.host_target) if self.host_target is not None else "-"),
            ("build", f"{compiler}; timeout {b.timeout_sec:g} s; workers: {b.workers or 'one per host CPU'}"),
            ("rpc", f"key '{r.key}', device {r.device}, session timeout {r.session_timeout_sec:g} s"),
            (
                "measure",
                f"number {m.number}, repeat {m.repeat}, min_repeat_ms {m.min_repeat_ms}, "
                f"cooldown {m.cooldown_sec:g} s, cache flush {'on' if m.enable_cpu_cache_flush else 'off'}, "
                f"timeout {m.timeout_sec:g} s",
            ),
            (
                "tuning",
                f"{t.trials} trials, {t.num_trials_per_iter} per batch, {cap}; cost model {t.cost_model}, "
                f"{t.search_strategy} search, {t.task_scheduler} scheduler, seed {t.seed}",
            ),
            ("device", f"{d.arch}, {d.num_threads} thread{'s' if d.num_threads != 1 else ''} {pinning}, {peak}"),
            ("int8", f"{self.int8_instruction()} (the dot-product instruction of int8 kernels)"),
        ]
        if self.resolved:
            rows.append(("resolved", "; ".join(f"{key}: {how}" for key, how in self.resolved.items())))
        header = f"{self.name}: {self.description}" if self.description else self.name
        return "\n".join([header, *(f"  {label + ':':<13}{text}" for label, text in rows)])
