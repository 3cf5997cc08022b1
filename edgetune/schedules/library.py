"""A schedule library: the best few tuned schedules per workload, for a CPU family, in one versioned file.

AutoTVM's TopHub, for MetaSchedule: a user starts from schedules others tuned
instead of from random ones. The file is compressed JSON lines, xz (LZMA) where its name ends in ``.xz``
(the shipped libraries), gzip otherwise; reading tells them apart by their magic bytes. Workloads repeat
one another's module text far beyond gzip's 32 KB window, so xz keeps the AVX-512 library in a seventh of
gzip's bytes (648 KB against 4.4 MB for 1,000 workloads), which is what lets the wheel ship more workloads under its 5 MB:

* a header: ``format`` (:data:`LIBRARY_FORMAT`), ``version``
  (:data:`LIBRARY_VERSION`), the TVM and edgetune versions that made it, the
  CPU family (:mod:`edgetune.common.cpu_family`), the budget per workload, the
  zoo it was built from and when;
* one ``workload`` line per workload: its structural hash, the module
  (``tvm.ir.save_json``), its operator signature and FLOPs, and the latency
  of its untuned default schedule where the history measured it;
* one ``schedule`` line per kept trace (the best ``top_k`` of each workload):
  the trace, the mean latency and GFLOPS as measured, the target and board
  that measured it, and how many records the workload had (the budget it got).
  The untuned default is one of them where it was among the fastest: on some
  data-movement kernels (a channel shuffle's concat, reshape, transpose and
  split) no schedule the search found beats the unscheduled code.

Traces are stored, never compiled code: a tune measures a library schedule
on its own board before relying on it (:mod:`edgetune.schedules.use`).
Loading checks the format, version and TVM version and every line: a file
that fails is a one-line :class:`~edgetune.errors.LibraryError`.
"""

from __future__ import annotations

import functools
import gzip
import json
import lzma
import os
import re
import time
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import LibraryError

LIBRARY_FORMAT = "edgetune-schedules"
LIBRARY_VERSION = 1
#: how many of each workload's fastest distinct traces a library keeps
DEFAULT_TOP_K = 3


@dataclass
class LibrarySchedule:
    """One tuned trace of a workload, with what it measured where."""

    trace_json: Any  # the trace as ``Trace.as_json()`` (:func:`edgetune.history.trace_codec.trace_as_json`)
    latency_us: float
    gflops: float | None
    target_json: str  # the target it was measured on
    board: str  # the board id (tracker key) that measured it
    records: int  # how many records the workload had when exported (its tuning budget so far)

    @functools.cached_property
    def mcpu(self) -> str:
        """The CPU model it was measured on (its target's ``mcpu``; "" where the target names none)."""
        try:
            target = json.loads(self.target_json)
        except (TypeError, ValueError):
            return ""
        return str(target.get("mcpu") or "") if isinstance(target, dict) else ""


def target_cpu(target: Any) -> str:
    """A TVM target's CPU model (``mcpu``), "" where it names none."""
    attrs = getattr(target, "attrs", None)
    return str(attrs.get("mcpu", "") or "") if attrs is not None else ""


def own_cpu_first(schedules: Iterable[LibrarySchedule], mcpu: str) -> list[LibrarySchedule]:
    """``schedules`` measured on the CPU model ``mcpu`` first, then the family's others; each group fastest first.

    A family shares vector instructions, not the best tiles: on an Intel Xeon (Sapphire Rapids class), the
    schedules Zen 4 builds kept for Keras MobileNet's pointwise convolutions ran up to 2x their record, and 8
    trials of search found ones 1.5-3x faster than them. Across CPU models the records do not compare either
    (a faster CPU records faster times).
    """
    return sorted(schedules, key=lambda sch: (bool(mcpu) and sch.mcpu != mcpu, sch.latency_us))


@dataclass
class LibraryWorkload:
    shash: str  # tvm_ffi.structural_hash of the module (without prepacking marks: comparable_workload), as a string
    mod_json: str
    signature: list[str]  # operator signature: block names (edgetune.tasks.signature)
    flops: float
    schedules: list[LibrarySchedule] = field(default_factory=list)
    #: the untuned default schedule's latency (us) where it was measured; None: not known (libraries made before
    #: edgetune kept it), so a tune cannot tell whether the library's schedule beats the untuned code
    default_latency_us: float | None = None

    _mod: Any = field(default=None, init=False, repr=False, compare=False)
    _shapes: list[tuple[int, ...]] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def mod(self) -> Any:
        if self._mod is None:
            from ..common.tvm_json import load_tvm_json

            self._mod = load_tvm_json(self.mod_json)
        return self._mod

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """Its arguments' shapes (:func:`~edgetune.search.transfer.buffer_shapes`), for the nearest shape to another."""
        if self._shapes is None:
            from ..search.transfer import buffer_shapes

            self._shapes = buffer_shapes(self.mod)
        return self._shapes

    def schedules_for(self, target: Any) -> list[LibrarySchedule]:
        """Its schedules in the order a tune on ``target`` tries them (:func:`own_cpu_first`), each trace once."""
        seen: set[str] = set()
        ordered = []
        for schedule in own_cpu_first(self.schedules, target_cpu(target)):
            key = json.dumps(schedule.trace_json, sort_keys=True)
            if key not in seen:
                seen.add(key)
                ordered.append(schedule)
        return ordered

    def trace(self, schedule: LibrarySchedule) -> Any:
        """``schedule``'s trace, rebuilt by replaying its JSON on this workload (how MetaSchedule's databases read one)."""
        from tvm.s_tir import Schedule, Trace

        sch = Schedule(self.mod, debug_mask="none")
        Trace.apply_json_to_schedule(schedule.trace_json, sch)
        return sch.trace


@dataclass
class ScheduleLibrary:
    """A loaded library: its header and its workloads."""

    header: dict[str, Any]
    workloads: list[LibraryWorkload]
    path: str = ""
    _traces: dict[tuple[int, int], Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def timing(self) -> str:
        """How its schedules were timed (``flushed`` or ``warm``); libraries that do not say were timed warm."""
        return str(self.header.get("timing") or "warm")

    @property
    def family(self) -> str:
        return str(self.header.get("family", {}).get("name", "?"))

    def nearest_workloads(self, mod: Any, signature: Any) -> list[LibraryWorkload]:
        """Its workloads of operator ``signature``, the nearest shape to ``mod``'s first (``mod``'s own among them)."""
        from ..search.transfer import buffer_shapes, shape_distance

        own = buffer_shapes(mod)
        same = [w for w in self.workloads if tuple(w.signature) == tuple(signature) and w.schedules]
        ranked = sorted((shape_distance(own, w.shapes), i) for i, w in enumerate(same))
        return [same[i] for _distance, i in ranked]

    def anchor_workloads(self, mod: Any, signature: Any, limit: int | None = None) -> list[LibraryWorkload]:
        """Its workloads of the same operator as ``signature`` with another epilogue, the nearest shape first.

        The operator is :func:`~edgetune.tasks.signature.anchor_signature` (a convolution, its padding included);
        shapes are compared on the input, the weight and the output (a bias or a residual input may be absent).
        """
        from ..search.transfer import buffer_shapes, shape_distance
        from ..tasks.signature import anchor_signature

        anchor, own = anchor_signature(signature), buffer_shapes(mod)
        if len(own) < 2:
            return []
        same = [w for w in self.workloads
                if tuple(w.signature) != tuple(signature) and anchor_signature(w.signature) == anchor
                and w.schedules and len(w.shapes) >= 2]
        ranked = sorted((shape_distance([*own[:2], own[-1]], [*w.shapes[:2], w.shapes[-1]]), i) for i, w in enumerate(same))
        return [same[i] for distance, i in ranked[:limit] if distance != float("inf")]

    def find(self, mod: Any) -> LibraryWorkload | None:
        """The library's entry for exactly this workload (structural hash, then structural equality).

        Whether the workload's weights may be prepacked (``tuning.prepack_weights``) does not matter: a
        schedule tuned either way replays on the other, its weight layout rewritten or not by the postprocessors.
        """
        import tvm_ffi

        from ..tasks.models import comparable_workload

        mod = comparable_workload(mod)
        shash = str(tvm_ffi.structural_hash(mod))
        for workload in self.workloads:
            if workload.shash == shash and tvm_ffi.structural_equal(comparable_workload(workload.mod), mod):
                return workload
        return None

    def tuning_records(
        self, target: Any, signature: Any = None, workloads: list[LibraryWorkload] | None = None,
        per_workload: int | None = None,
    ) -> list[Any]:
        """The schedules as MetaSchedule ``TuningRecord``s on ``target`` (for transfer to similar shapes).

        ``signature``: only workloads of that operator signature (replaying every trace costs time);
        ``workloads``: only these; ``per_workload``: each one's fastest few only, those measured on ``target``'s
        CPU model first (:func:`own_cpu_first`). A trace that no longer replays on its own workload is left out.
        """
        import tvm.s_tir.meta_schedule as ms

        from ..search.default_schedule import is_default_json

        out = []
        for workload in self.workloads if workloads is None else workloads:
            if signature is not None and tuple(workload.signature) != tuple(signature):
                continue
            entry = ms.database.Workload(workload.mod)
            # the default: nothing to transfer
            tuned = [s for s in workload.schedules_for(target) if not is_default_json(s.trace_json)]
            for schedule in tuned[:per_workload]:
                key = (id(workload), id(schedule))
                if key not in self._traces:
                    try:
                        self._traces[key] = workload.trace(schedule)
                    except Exception:  # noqa: BLE001 - TVM raises its own errors for a trace that does not replay
                        self._traces[key] = None
                if self._traces[key] is not None:
                    out.append(ms.database.TuningRecord(self._traces[key], entry, [schedule.latency_us * 1e-6], target, None))
        return out

    def _mcpus(self, joiner: str = ", ") -> str:
        """The CPU models its builds made code for (merged builds from several hosts of the family may differ)."""
        cpus = [str((part.get("target") or {}).get("mcpu") or "") for part in parts_of(self.header)]
        known = sorted({cpu for cpu in cpus if cpu}) or [str(self.header.get("family", {}).get("mcpu") or "?")]
        return joiner.join(known)

    def describe(self) -> list[str]:
        """What ``edgetune schedules info`` prints: where the numbers came from, and what the library covers."""
        h = self.header
        family = h.get("family", {})
        n_schedules = sum(len(w.schedules) for w in self.workloads)
        boards = _boards_in_brief({s.board for w in self.workloads for s in w.schedules})
        by_op: dict[str, int] = defaultdict(int)
        for workload in self.workloads:
            by_op[_operator(workload.signature)] += 1
        lines = [
            f"{self.path or 'library'}: {LIBRARY_FORMAT} version {h.get('version')}, "
            f"made by edgetune {h.get('edgetune_version')} with TVM {h.get('tvm_version')} on {h.get('created_at')}",
            f"family: {family.get('name')} ({family.get('arch')}; features {', '.join(family.get('features', [])) or 'none'}; "
            f"code for mcpu {self._mcpus()}, measured on {h.get('measured_on') or self._mcpus(' and ') + ' as the parts say'}, "
            f"{h.get('cores', '?')} cores, boards {', '.join(boards) or '?'})",
            f"workloads: {len(self.workloads)}, schedules: {n_schedules} (best {h.get('top_k')} per workload"
            + (" and CPU model" if len({s.mcpu for w in self.workloads for s in w.schedules}) > 1 else "")
            + f", timed {self.timing})",
            (f"budget: {h['budget_per_workload']} trials per workload, "
             + ("measured" if h.get("budget_counts") == "measured" else "the candidates the search proposed")
             if h.get("budget_per_workload") else
             "budget: per build, below" if h.get("parts") else "budget: not recorded")
            + f" (records per workload: {_spread([s.records for w in self.workloads for s in w.schedules[:1]])})",
            _defaults_line(self.workloads),
            "operators: " + ", ".join(f"{op} {n}" for op, n in sorted(by_op.items(), key=lambda kv: -kv[1])),
        ]
        if h.get("zoo"):
            layout = f" (convolutions in {h['conv_layout']})" if h.get("conv_layout") else ""
            lines.append("zoo: " + ", ".join(h["zoo"]) + layout)
        if h.get("source"):
            lines.append(f"exported from: {h['source']}")
        if h.get("parts"):
            lines.append(f"merged from {len(h['parts'])} builds:")
            for number, part in enumerate(h["parts"], start=1):
                budget = (f"{part['budget_per_workload']} trials per workload, "
                          + ("measured" if part.get("budget_counts") == "measured" else "the candidates the search proposed")
                          if part.get("budget_per_workload") else "budget not recorded")
                layout = f" in {part['conv_layout']}" if part.get("conv_layout") else ""
                lines.append(f"  [{number}] {part.get('created_at')}: {budget}; zoo{layout}: "
                             f"{', '.join(part.get('zoo') or []) or '-'}; from {part.get('source') or '?'}")
        return lines


def _defaults_line(workloads: list[LibraryWorkload]) -> str:
    """How the untuned defaults did: a tune trusts the library's word on them (:mod:`edgetune.schedules.use`)."""
    from ..search.default_schedule import is_default_json

    known = sum(1 for w in workloads if w.default_latency_us is not None)
    if not known:
        return "untuned defaults: not recorded (a tune measures a memory-bound task's own beside the library's schedule)"
    fastest = sum(1 for w in workloads if w.schedules and is_default_json(w.schedules[0].trace_json))
    return (f"untuned defaults: measured for {known} of {len(workloads)} workloads; the fastest schedule of {fastest} "
            "(kept in the library, delivered as is)")


def _operator(signature: list[str]) -> str:
    """The operator a workload's block names say, for ``info``: a reduction Relax named after its input variable
    (``lv180_red``, a mean's sum) is counted as ``red``, whichever variable it came from."""
    from ..tasks.winograd import WINOGRAD_FUNC

    if WINOGRAD_FUNC in signature:  # its first blocks are the input transform's (input_tile, data_pack)
        return WINOGRAD_FUNC
    main = [name for name in signature if not name.startswith(("T_", "compute", "pad_temp", "data_pad", "PadInput"))]
    return re.sub(r"^lv\d+_", "", (main or signature or ["?"])[0])


def _spread(values: list[int]) -> str:
    if not values:
        return "-"
    values = sorted(values)
    return f"min {values[0]}, median {values[len(values) // 2]}, max {values[-1]}"


# --------------------------------------------------------------------------- writing


def write_library(
    path: str | os.PathLike[str], header: dict[str, Any], workloads: Iterable[LibraryWorkload]
) -> Path:
    """Write a library file atomically (a temporary file renamed over ``path``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    workloads = list(workloads)
    full_header = {"format": LIBRARY_FORMAT, "version": LIBRARY_VERSION, **header, "workloads": len(workloads)}
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with _open_for_writing(path, staging) as out:
        out.write(json.dumps(full_header, sort_keys=True) + "\n")
        for index, workload in enumerate(workloads):
            out.write(json.dumps({
                "type": "workload", "id": index, "shash": workload.shash, "mod_json": workload.mod_json,
                "signature": workload.signature, "flops": workload.flops,
                "default_latency_us": workload.default_latency_us,
            }, sort_keys=True) + "\n")
            for schedule in workload.schedules:
                # the dataclass's fields only: its cached ``mcpu`` (in ``__dict__`` once read) is derived, not stored
                fields = {name: getattr(schedule, name) for name in LibrarySchedule.__dataclass_fields__}
                out.write(json.dumps({"type": "schedule", "workload": index, **fields}, sort_keys=True) + "\n")
    os.replace(staging, path)
    return path


def load_library(path: str | os.PathLike[str]) -> ScheduleLibrary:
    """Read and check a library; anything wrong with the file is one :class:`LibraryError` line."""
    import tvm

    path = Path(path)
    if not path.is_file():
        raise LibraryError(f"schedule library '{path}' not found")
    try:
        lines = list(_read_lines(path))
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error, lzma.LZMAError, UnicodeDecodeError) as err:
        raise LibraryError(f"'{path}' is not a readable schedule library: {err}") from None
    if not lines:
        raise LibraryError(f"'{path}' is not a schedule library: it is empty")
    header = lines[0][1]
    if not isinstance(header, dict) or header.get("format") != LIBRARY_FORMAT:
        raise LibraryError(f"'{path}' is not a schedule library (no '{LIBRARY_FORMAT}' header line)")
    if header.get("version") != LIBRARY_VERSION:
        raise LibraryError(
            f"'{path}' is schedule library format version {header.get('version')}, this edgetune reads "
            f"version {LIBRARY_VERSION}: export the library again with this edgetune"
        )
    if header.get("tvm_version") != tvm.__version__:
        raise LibraryError(
            f"'{path}' was made with TVM {header.get('tvm_version')}, this is TVM {tvm.__version__}: its traces "
            "may not replay; build or export it again with this TVM"
        )
    workloads: dict[int, LibraryWorkload] = {}
    for number, obj in lines[1:]:
        try:
            if obj["type"] == "workload":
                default = obj.get("default_latency_us")  # absent from libraries made before edgetune kept it
                workloads[int(obj["id"])] = LibraryWorkload(
                    str(obj["shash"]), str(obj["mod_json"]), list(obj["signature"]), float(obj["flops"]),
                    default_latency_us=None if default is None else float(default),
                )
            elif obj["type"] == "schedule":
                workloads[int(obj["workload"])].schedules.append(LibrarySchedule(
                    trace_json=obj["trace_json"], latency_us=float(obj["latency_us"]),
                    gflops=None if obj["gflops"] is None else float(obj["gflops"]),
                    target_json=str(obj["target_json"]), board=str(obj["board"]), records=int(obj["records"]),
                ))
            else:
                raise ValueError(f"unknown line type {obj['type']!r}")
        except (KeyError, ValueError, TypeError) as err:
            raise LibraryError(f"'{path}' line {number} is damaged: {type(err).__name__}: {err}") from None
    if len(workloads) != header.get("workloads"):
        raise LibraryError(
            f"'{path}' is damaged: its header counts {header.get('workloads')} workloads, the file holds {len(workloads)}"
        )
    return ScheduleLibrary(header, list(workloads.values()), str(path))


#: the first bytes of an xz file (a gzip file's are ``1f 8b``)
_XZ_MAGIC = b"\xfd7zXZ\x00"
#: LZMA preset for written libraries: 9 kept the AVX-512 library (1,000 workloads) at 648 KB in 11 s of writing (9 |
#: extreme: 502 KB in 27 s; 6: 770 KB in 10 s); reading it takes 0.3 s either way. Preset 9 compresses with about
#: 700 MB of memory and reads with 65 MB (liblzma's figures): a host's, not a board's, work
XZ_PRESET = 9


def _open_for_writing(path: Path, staging: Path) -> Any:
    """``staging`` opened for text, compressed as ``path``'s name says: xz for ``.xz``, gzip otherwise."""
    if path.name.endswith(".xz"):
        return lzma.open(staging, "wt", encoding="utf-8", preset=XZ_PRESET)
    return gzip.open(staging, "wt", encoding="utf-8", compresslevel=9)


def _open_for_reading(path: Path) -> Any:
    """``path`` opened for text, xz or gzip as its first bytes say (whatever its name)."""
    with open(path, "rb") as raw:
        magic = raw.read(len(_XZ_MAGIC))
    if magic == _XZ_MAGIC:
        return lzma.open(path, "rt", encoding="utf-8")
    return gzip.open(path, "rt", encoding="utf-8")


def _read_lines(path: Path) -> Iterator[tuple[int, Any]]:
    with _open_for_reading(path) as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except ValueError as err:
                raise LibraryError(f"'{path}' line {number} is not JSON: {err}") from None


# --------------------------------------------------------------------------- merging

#: header keys that say how one build made its part of a library (kept per part by :func:`merge_libraries`)
_PART_KEYS = ("created_at", "edgetune_version", "budget_per_workload", "budget_counts", "conv_layout", "zoo",
              "source", "measured_on", "target")


def _without_cpu(target: Any) -> Any:
    """A library's target less its CPU model: what two libraries of one family must share to merge."""
    return {key: value for key, value in target.items() if key != "mcpu"} if isinstance(target, dict) else target


def parts_of(header: dict[str, Any]) -> list[dict[str, Any]]:
    """The builds a library holds: its ``parts`` when merged, else the header's own build."""
    parts = header.get("parts")
    if parts:  # parts merged before they kept their target were built for the library's own
        return [{**part, "target": part.get("target") or header.get("target")} for part in parts]
    return [{key: header.get(key) for key in _PART_KEYS}]


def merge_libraries(
    libraries: list[ScheduleLibrary], path: str | os.PathLike[str], *, top_k: int | None = None
) -> ScheduleLibrary:
    """One library from several of the same family, timing and TVM: each workload's ``top_k`` fastest schedules
    per CPU model that measured it.

    For a zoo built in steps (more models later, on another host of the family: another CPU model of it merges, each
    part keeping its target and where it was measured) or by a team on a farm. Each CPU model keeps its own best
    few: a faster CPU records faster times, and its schedules would otherwise push out those another CPU model of
    the family runs best (a tune tries its own CPU model's first, :func:`own_cpu_first`).
    The header keeps each build's budget, zoo and layout as a ``part``, so ``info`` says where each number came
    from; the budget of the whole is stated only where every part had the same.
    """
    if len(libraries) < 2:
        raise LibraryError(f"merging takes at least two libraries, got {len(libraries)} instead")
    if top_k is not None and top_k < 1:
        raise LibraryError(f"top_k must be >= 1, got {top_k} instead")
    first = libraries[0]
    for other in libraries[1:]:
        for what, mine, theirs in (
            ("family", first.family, other.family),
            ("timing", first.timing, other.timing),
            # the CPU model (mcpu) may differ: the family's vector instructions are what a schedule relies on, a
            # tune measures a library's schedules on its own board first, and each part says where it was measured
            ("target", _without_cpu(first.header.get("target")), _without_cpu(other.header.get("target"))),
        ):
            if mine != theirs:
                raise LibraryError(
                    f"cannot merge '{other.path}' into '{first.path}': its {what} must be {mine!r}, got {theirs!r} instead"
                )
    top_k = top_k or max(int(lib.header.get("top_k") or DEFAULT_TOP_K) for lib in libraries)
    merged: dict[str, LibraryWorkload] = {}
    for library in libraries:
        for workload in library.workloads:
            entry = merged.get(workload.shash)
            if entry is None:
                entry = merged[workload.shash] = LibraryWorkload(
                    workload.shash, workload.mod_json, list(workload.signature), workload.flops
                )
            entry.schedules.extend(workload.schedules)
            if workload.default_latency_us is not None:
                known = entry.default_latency_us
                entry.default_latency_us = min(workload.default_latency_us, known if known is not None else float("inf"))
    for entry in merged.values():
        seen: set[str] = set()
        per_cpu: dict[str, int] = defaultdict(int)
        kept = []
        for schedule in sorted(entry.schedules, key=lambda sch: sch.latency_us):
            key = schedule.mcpu + " " + json.dumps(schedule.trace_json, sort_keys=True)  # a trace once per CPU model
            if key not in seen and per_cpu[schedule.mcpu] < top_k:
                seen.add(key)
                per_cpu[schedule.mcpu] += 1
                kept.append(schedule)
        entry.schedules = kept
    parts = [part for library in libraries for part in parts_of(library.header)]

    def common(key: str) -> Any:
        values = {json.dumps(part.get(key), sort_keys=True) for part in parts}
        return json.loads(values.pop()) if len(values) == 1 else None

    zoo, conv_layout = _merged_zoo(parts)
    header = {
        **{key: value for key, value in first.header.items() if key not in ("format", "version", "workloads")},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "top_k": top_k,
        "budget_per_workload": common("budget_per_workload"),
        "budget_counts": common("budget_counts"),
        "conv_layout": conv_layout,
        "measured_on": common("measured_on"),
        "zoo": zoo,
        "source": "merged: " + ", ".join(lib.path for lib in libraries),
        "parts": parts,
    }
    workloads = list(merged.values())
    write_library(path, header, workloads)
    return ScheduleLibrary({**header, "format": LIBRARY_FORMAT, "version": LIBRARY_VERSION}, workloads, str(path))


def _boards_in_brief(boards: set[str]) -> list[str]:
    """Board names for ``info``, a loopback RPC server's per-run ports counted ("local@127.0.0.1 (38 ports)")."""
    by_host: dict[str, int] = defaultdict(int)
    named: list[str] = []
    for board in sorted(boards):
        host, sep, port = board.rpartition(":")
        if sep and port.isdigit() and host.endswith("@127.0.0.1"):
            by_host[host] += 1
        else:
            named.append(board)
    return named + [host if count == 1 else f"{host} ({count} ports)" for host, count in sorted(by_host.items())]


def _merged_zoo(parts: list[dict[str, Any]]) -> tuple[list[str], str | None]:
    """The zoo of merged builds in one notation, and their common layout (None when they differ).

    A build names its layout in ``conv_layout``; libraries of the first format wrote it into each zoo entry
    ("demo:resnet18@224 in NCHW16c", and nothing for a model without convolutions). Joined as they were,
    ``info`` listed the two notations side by side. An entry that names no layout fits any.
    """
    entries: list[tuple[str, str | None]] = []
    for part in parts:
        for entry in part.get("zoo") or []:
            spec, sep, layout = entry.partition(" in ")
            if sep and not part.get("conv_layout") and " " not in spec:
                entries.append((spec, layout))
            else:
                entries.append((entry, part.get("conv_layout")))
    layouts = {layout for _, layout in entries if layout}
    if len(layouts) <= 1:
        return _latest_per_model(spec for spec, _ in entries), next(iter(layouts), None)
    return _latest_per_model(f"{spec} in {layout}" if layout else spec for spec, layout in entries), None


def _latest_per_model(entries: Iterable[str]) -> list[str]:
    """Each entry once, where it was first listed; a model built part-way ("demo:m@128 (1 of its 72 tasks at the
    budget)") and built on by a later build is listed once, as the later build says it. Other notes ("its
    fast-math graph", "built at 64 trials per workload") name another build of the model and stay."""
    listed: dict[str, str] = {}
    for entry in entries:
        spec = entry.split(" (")[0]
        part_way = f"{spec} (part-way)"
        if part_way in listed and (entry == spec or _is_part_way(entry)):
            listed[part_way] = entry
        else:
            listed.setdefault(part_way if _is_part_way(entry) else entry, entry)
    return list(listed.values())


def _is_part_way(entry: str) -> bool:
    """A zoo entry of a build stopped part-way: "(3 of its 9 tasks at the budget)", "(...: 14 of its 85 tasks reached 16)"."""
    return " (" in entry and ("tasks at the budget" in entry or "tasks reached" in entry)


# --------------------------------------------------------------------------- into a history


def import_library(history: Any, library: ScheduleLibrary) -> tuple[int, int]:
    """Add every schedule of ``library`` to ``history`` as a record of the target and board that measured it.

    For a team's shared history (``edgetune schedules import``): its tunes on
    that target then find the library's schedules as their own records (warm
    start, transfer, the exact workload's best). ``history`` must be opened with
    the library's :attr:`~ScheduleLibrary.timing`, which its records then carry.
    Returns (added, already there).
    """
    if getattr(history, "timing", None) != library.timing:
        raise LibraryError(
            f"the history handle must be opened with timing={library.timing!r} (the library's), "
            f"got {getattr(history, 'timing', None)!r} instead"
        )
    import tvm
    import tvm.s_tir.meta_schedule as ms

    added = skipped = 0
    for workload in library.workloads:
        entry = history.commit_workload(workload.mod)
        args_info = ms.arg_info.ArgInfo.from_entry_func(workload.mod, remove_preproc=True)
        for schedule in workload.schedules:
            target = tvm.target.Target(json.loads(schedule.target_json))
            trace = workload.trace(schedule)
            if history.has_candidate(workload.mod, target, trace):
                skipped += 1
                continue
            record = ms.database.TuningRecord(trace, entry, [schedule.latency_us * 1e-6], target, args_info)
            history.commit_measurement(record, board=schedule.board)
            added += 1
    return added, skipped
