"""Schedule libraries (issue 27): the file round trip, family checks, and tunes that start from a library."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm.s_tir.meta_schedule as ms

from conftest import SESSION_KEY, run_cli
from edgetune.errors import LibraryError, OptionError
from edgetune.schedules import family_of, load_library
from edgetune.schedules.export import export_library
from edgetune.schedules.library import import_library, write_library
from edgetune.schedules.use import choose_library, transferred_library_candidates

pytestmark = pytest.mark.integration


def host_profile(loopback_board, **tuning):
    from edgetune.profile import load_profile

    return load_profile("host").with_overrides(rpc={"key": loopback_board.key}, tuning=tuning)


def tune(profile, loopback_board, out: Path, model: str = "demo:tiny-cnn", **options):
    from edgetune.board.base import TrackerBoard
    from edgetune.tuning import TuneOptions, run_tune

    return run_tune(TuneOptions(profile=profile, model=model, out_dir=out, board=TrackerBoard(loopback_board), **options))


def _extracted_tasks(profile, model: str, out: Path):
    """``model``'s tasks as a tune extracts them."""
    from edgetune.tuning import TuningPipeline, TuneOptions

    probe = TuningPipeline(TuneOptions(profile=profile, model=model, out_dir=out))
    return probe.extract_tasks(profile.tvm_target(), probe.check_inputs()[1])


def _tasks_the_library_lacks(library, profile, model: str, out: Path):
    """``model``'s tasks as a tune extracts them, and the names of those whose workload ``library`` lacks."""
    extracted = _extracted_tasks(profile, model, out)
    return extracted, {task.task_name for task in extracted if library.find(task.dispatched[0]) is None}


@pytest.fixture(scope="module")
def library_file(tmp_path_factory, loopback_board) -> tuple[Path, Path, object]:
    """A library exported from a real (small) tune of the demo CNN: (library, its history, the profile)."""
    from edgetune.history import open_history
    from edgetune.measure.runner import timing_of

    out = tmp_path_factory.mktemp("library-source")
    profile = host_profile(loopback_board, schedules="off")
    tune(profile, loopback_board, out, trials=20, evaluate=False)
    history = open_history(str(out / "history.db"), read_only=True, timing=timing_of(profile))
    try:
        library = export_library(history, out / "tiny.schedules.gz", profile.tvm_target(), top_k=2, budget_per_workload=4,
                                 zoo=["demo:tiny-cnn"])
    finally:
        history.close()
    return Path(library.path), out / "history.db", profile


def test_library_round_trip_export_info_import(library_file, tmp_path) -> None:
    from edgetune.history import open_history

    path, source_db, profile = library_file
    library = load_library(path)
    target = profile.tvm_target()
    assert library.family == family_of(target).name and library.header["tvm_version"] == tvm.__version__
    assert library.header["zoo"] == ["demo:tiny-cnn"] and library.header["budget_per_workload"] == 4
    assert library.timing == "flushed"  # the host profile times on flushed caches, and the library says so
    import sqlite3

    with sqlite3.connect(source_db) as conn:  # the tune stored every record as timed flushed
        assert conn.execute("SELECT DISTINCT timing FROM records").fetchall() == [("flushed",)]
    # the convolutions and the dense layer were tuned: each has its best traces, fastest first
    covered = [w for w in library.workloads if w.schedules]
    assert len(covered) >= 3 and all(len(w.schedules) <= 2 for w in covered)
    for workload in covered:
        latencies = [s.latency_us for s in workload.schedules]
        assert latencies == sorted(latencies) and latencies[0] > 0
        assert workload.schedules[0].board.startswith(SESSION_KEY)  # the key and the server that measured it
    text = "\n".join(library.describe())
    assert f"family: {library.family}" in text and "zoo: demo:tiny-cnn" in text and "budget: 4 trials per workload" in text
    assert "timed flushed" in text and "trials per workload, measured" in text
    # exported without --budget: the file says nothing of a budget rather than claim a measured one
    source = open_history(str(source_db), read_only=True, timing="flushed")
    try:
        unstated = export_library(source, tmp_path / "unstated.schedules.gz", target, top_k=1)
    finally:
        source.close()
    assert unstated.header["budget_per_workload"] is None and unstated.header["budget_counts"] is None
    assert "budget: not recorded" in "\n".join(load_library(unstated.path).describe())
    # the CLI's export records the zoo a history was built from (a build stopped part-way, exported by hand)
    named = tmp_path / "named.schedules.gz"
    keras_file = Path(__file__).parent / "data" / "tflite" / "mobilenet.tflite"
    result = run_cli("schedules", "export", str(named), "--db", str(source_db), "--budget", "4", "--zoo", "demo:tiny-cnn",
                     "demo:tiny-cnn@16 (2 of its 5 tasks at the budget)", str(keras_file))
    assert result.returncode == 0, result.stderr[-2000:]
    exported = load_library(named)
    # a model file is named with the exporter that wrote it (issue 52)
    assert exported.header["zoo"] == ["demo:tiny-cnn", "demo:tiny-cnn@16 (2 of its 5 tasks at the budget)",
                                      "mobilenet.tflite via the TensorFlow Lite converter (MLIR)"]
    # --min-records leaves out the workloads a stopped build barely started
    import tvm_ffi

    from edgetune.tasks.models import comparable_workload

    counts = {w.shash: 0 for w in exported.workloads}
    source = open_history(str(source_db), read_only=True, timing="flushed")
    try:
        for record, _board in source.successful_records(target, limit=100000):
            shash = str(tvm_ffi.structural_hash(comparable_workload(record.workload.mod)))
            if shash in counts:
                counts[shash] += 1
    finally:
        source.close()
    cut = max(counts.values())
    assert min(counts.values()) < cut, "the tune gave its workloads different numbers of records"
    fewer = tmp_path / "fewer.schedules.gz"
    result = run_cli("schedules", "export", str(fewer), "--db", str(source_db), "--min-records", str(cut))
    assert result.returncode == 0, result.stderr[-2000:]
    assert {w.shash for w in load_library(fewer).workloads} == {h for h, n in counts.items() if n >= cut}
    from edgetune.tasks.graph import layout_name

    # the layout the profile tunes convolutions in, as build records it (NCHW16c on AVX-512)
    assert exported.header["conv_layout"] == layout_name(profile.tuning.conv_layout, target) != ""

    result = run_cli("schedules", "info", str(path))
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"workloads: {len(library.workloads)}" in result.stdout

    fresh = tmp_path / "team.db"
    result = run_cli("schedules", "import", str(path), "--db", str(fresh))
    assert result.returncode == 0, result.stderr[-2000:]
    n = sum(len(w.schedules) for w in library.workloads)
    assert f"{n} schedules added, 0 already there" in result.stdout
    history = open_history(str(fresh), timing="flushed")
    try:
        for workload in covered:
            best = history.best_record(workload.mod, target)
            assert best is not None and float(best.run_secs[0]) * 1e6 == pytest.approx(workload.schedules[0].latency_us)
        assert history.count_records() == n  # stored as timed flushed, as the library was
        assert import_library(history, library) == (0, n)  # idempotent
    finally:
        history.close()
    warm = open_history(str(fresh), timing="warm")
    try:
        assert warm.count_records() == 0
        with pytest.raises(LibraryError, match=r"^the history handle must be opened with timing='flushed'"):
            import_library(warm, library)  # its records would be ranked against warm ones
    finally:
        warm.close()


def test_libraries_merge_by_workload_and_keep_each_builds_budget(library_file, tmp_path) -> None:
    """A zoo built in steps: two libraries of one family join into one, each workload's fastest schedules kept,
    each build's budget and zoo listed; another family does not merge."""
    import dataclasses

    from edgetune.schedules.library import merge_libraries

    path, _db, _profile = library_file
    library = load_library(path)
    covered = [w for w in library.workloads if w.schedules]
    assert len(covered) >= 3
    shared, only_first, only_second = covered[0], covered[1:2], covered[2:]
    faster = dataclasses.replace(shared.schedules[-1], latency_us=shared.schedules[0].latency_us / 2)
    header = {k: v for k, v in library.header.items() if k not in ("format", "version", "workloads")}
    write_library(tmp_path / "a.schedules.gz", {**header, "zoo": ["demo:a@224"], "budget_per_workload": 64,
                                                "budget_counts": None}, [shared, *only_first])
    second_shared = dataclasses.replace(shared, schedules=[faster])
    write_library(tmp_path / "b.schedules.gz", {**header, "zoo": ["demo:b@224"], "budget_per_workload": 32},
                  [second_shared, *only_second])
    first = load_library(tmp_path / "a.schedules.gz")

    out = tmp_path / "all.schedules.gz"
    result = run_cli("schedules", "merge", str(tmp_path / "a.schedules.gz"), str(tmp_path / "b.schedules.gz"),
                     "--out", str(out), "--top-k", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    merged = load_library(out)
    assert sorted(w.shash for w in merged.workloads) == sorted(w.shash for w in covered)
    entry = merged.find(shared.mod)
    # the faster schedule of the second build first, then the first build's fastest; top-k 2, no trace twice
    assert [s.latency_us for s in entry.schedules] == [faster.latency_us, shared.schedules[0].latency_us]
    assert len({json.dumps(s.trace_json, sort_keys=True) for s in entry.schedules}) == 2
    assert merged.header["zoo"] == ["demo:a@224", "demo:b@224"] and merged.header["budget_per_workload"] is None
    text = "\n".join(merged.describe())
    assert "budget: per build, below" in text and "merged from 2 builds:" in text
    assert "64 trials per workload, the candidates the search proposed; zoo" in text and "demo:a@224" in text
    assert "32 trials per workload, measured; zoo" in text
    # a merged library merges again: its parts are kept, not nested
    again = merge_libraries([merged, first], tmp_path / "again.schedules.gz")
    assert len(again.header["parts"]) == 3
    # another family (or timing, or target) is one line, and nothing is written
    foreign = {**header, "family": {**header["family"], "name": "aarch64-neon"}}
    write_library(tmp_path / "arm.schedules.gz", foreign, only_second)
    with pytest.raises(LibraryError, match=r"^cannot merge .*arm.schedules.gz.*: its family must be"):
        merge_libraries([first, load_library(tmp_path / "arm.schedules.gz")], tmp_path / "bad.schedules.gz")
    assert not (tmp_path / "bad.schedules.gz").exists()
    result = run_cli("schedules", "merge", str(tmp_path / "a.schedules.gz"), "--out", str(tmp_path / "one.schedules.gz"))
    assert result.returncode != 0 and "at least two libraries, got 1 instead" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_merged_builds_list_their_zoo_in_one_notation(library_file, tmp_path) -> None:
    """A library of the first format wrote the layout into each zoo entry; merged with a build that names it in
    conv_layout, info listed both notations side by side. One layout: plain specs; two: each entry says its own."""
    from edgetune.schedules.library import merge_libraries

    path, _db, _profile = library_file
    library = load_library(path)
    header = {k: v for k, v in library.header.items() if k not in ("format", "version", "workloads")}
    covered = [w for w in library.workloads if w.schedules][:2]
    old = {**header, "zoo": ["demo:a@224 in NCHW16c", "demo:b@224 in NCHW16c", "demo:transformer@128"],
           "conv_layout": None}
    write_library(tmp_path / "old.schedules.gz", old, covered[:1])
    write_library(tmp_path / "new.schedules.gz", {**header, "zoo": ["demo:c@224 (3 of its 9 tasks at the budget)"],
                                                  "conv_layout": "NCHW16c"}, covered[1:])
    write_library(tmp_path / "other.schedules.gz", {**header, "zoo": ["demo:d@128"], "conv_layout": "NHWC"}, covered[1:])
    libs = {name: load_library(tmp_path / f"{name}.schedules.gz") for name in ("old", "new", "other")}
    same = merge_libraries([libs["old"], libs["new"]], tmp_path / "same.schedules.gz")
    assert same.header["zoo"] == ["demo:a@224", "demo:b@224", "demo:transformer@128",
                                  "demo:c@224 (3 of its 9 tasks at the budget)"]
    assert same.header["conv_layout"] == "NCHW16c"
    assert "(convolutions in NCHW16c)" in "\n".join(same.describe())
    mixed = merge_libraries([libs["old"], libs["other"]], tmp_path / "mixed.schedules.gz")
    assert mixed.header["zoo"] == ["demo:a@224 in NCHW16c", "demo:b@224 in NCHW16c", "demo:transformer@128",
                                   "demo:d@128 in NHWC"]
    assert mixed.header["conv_layout"] is None
    # a model built part-way and finished by a later build is listed once, finished, where it was first listed
    # (another build of a model, "its fast-math graph", is listed beside it)
    write_library(tmp_path / "done.schedules.gz", {**header, "zoo": ["demo:c@224", "demo:e@224",
                                                                     "demo:transformer@128 (its fast-math graph)"],
                                                   "conv_layout": "NCHW16c"}, covered[1:])
    done = merge_libraries([same, load_library(tmp_path / "done.schedules.gz")], tmp_path / "done2.schedules.gz")
    assert done.header["zoo"] == ["demo:a@224", "demo:b@224", "demo:transformer@128", "demo:c@224", "demo:e@224",
                                  "demo:transformer@128 (its fast-math graph)"]


def test_a_library_of_another_family_is_not_used_and_says_so(library_file, tmp_path) -> None:
    path, _db, profile = library_file
    library = load_library(path)
    header = {k: v for k, v in library.header.items() if k not in ("format", "version", "workloads")}
    header["family"] = {"name": "aarch64-neon", "arch": "aarch64", "mcpu": "cortex-a72", "features": ["neon"]}
    other = write_library(tmp_path / "arm.schedules.gz", header, library.workloads)
    choice = choose_library(str(other), profile.tvm_target())
    assert choice.library is None
    assert choice.message == (
        f"schedule library not used: '{other}' is for aarch64-neon, this target is {family_of(profile.tvm_target()).name} "
        "(its schedules were tuned for other vector instructions)"
    )
    assert choose_library("off", profile.tvm_target()).library is None


def test_a_library_named_xz_is_written_in_xz_and_any_library_reads_by_its_bytes_not_its_name(library_file, tmp_path) -> None:
    """The shipped libraries are xz (a seventh of gzip's bytes); a user's .gz exports stay gzip, and both read back,
    whatever the file is called. A cut-off xz file is one line, as a damaged gzip one is."""
    import lzma

    path, _db, _profile = library_file
    library = load_library(path)
    header = {k: v for k, v in library.header.items() if k not in ("format", "version", "workloads")}
    xz = write_library(tmp_path / "lib.schedules.xz", header, library.workloads)
    gz = write_library(tmp_path / "lib.schedules.gz", header, library.workloads)
    assert xz.read_bytes()[:6] == b"\xfd7zXZ\x00" and gz.read_bytes()[:2] == b"\x1f\x8b"
    assert lzma.decompress(xz.read_bytes()) == gzip.decompress(gz.read_bytes())  # the same lines
    renamed = tmp_path / "misnamed.schedules.gz"
    renamed.write_bytes(xz.read_bytes())
    for other in (xz, renamed):
        again = load_library(other)
        assert [w.shash for w in again.workloads] == [w.shash for w in library.workloads]
        assert [[s.latency_us for s in w.schedules] for w in again.workloads] == \
            [[s.latency_us for s in w.schedules] for w in library.workloads]
    cut = tmp_path / "cut.schedules.xz"
    cut.write_bytes(xz.read_bytes()[: xz.stat().st_size // 2])
    with pytest.raises(LibraryError, match="is not a readable schedule library") as error:
        load_library(cut)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("damage", ["garbage", "not-gzip", "version", "tvm", "truncated"])
def test_a_damaged_or_foreign_library_is_one_line(library_file, tmp_path, damage) -> None:
    path, _db, profile = library_file
    lines = gzip.open(path, "rt").read().splitlines()
    header = json.loads(lines[0])
    bad = tmp_path / f"{damage}.schedules.gz"
    if damage == "not-gzip":
        bad.write_text("hello\n")
    else:
        if damage == "garbage":
            lines[1] = lines[1][: len(lines[1]) // 2]
        elif damage == "version":
            header["version"] = 99
        elif damage == "tvm":
            header["tvm_version"] = "0.19.0"
        elif damage == "truncated":
            lines = lines[:2]
        lines[0] = json.dumps(header)
        with gzip.open(bad, "wt") as handle:
            handle.write("\n".join(lines) + "\n")
    expected = {
        "garbage": "line 2 is not JSON", "not-gzip": "is not a readable schedule library",
        "version": "is schedule library format version 99, this edgetune reads version 1",
        "tvm": f"was made with TVM 0.19.0, this is TVM {tvm.__version__}", "truncated": "is damaged",
    }[damage]
    with pytest.raises(LibraryError, match=expected) as error:
        load_library(bad)
    assert "\n" not in str(error.value)
    choice = choose_library(str(bad), profile.tvm_target())
    assert choice.library is None and choice.message.startswith("schedule library not used: ") and expected in choice.message


def test_a_tune_covered_by_the_library_delivers_its_schedules_after_one_trial_per_task(library_file, tmp_path, loopback_board) -> None:
    """No search: each covered task measures the library's schedule once; the rest measure their default once."""
    path, _db, _profile = library_file
    library = load_library(path)
    profile = host_profile(loopback_board, schedules=str(path))
    from edgetune.tuning import TuningPipeline, TuneOptions

    probe = TuningPipeline(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path))
    n_tasks = len(probe.extract_tasks(profile.tvm_target(), probe.check_inputs()[1]))
    summary = tune(profile, loopback_board, tmp_path / "run", trials=n_tasks)
    assert summary.schedules["used"] and summary.schedules["library"] == str(path)
    assert summary.trials.this_run == n_tasks and all(t.trials_this_run == 1 for t in summary.tasks)
    started = [t for t in summary.tasks if t.library_latency_us is not None]
    covered = {w.shash for w in library.workloads if w.schedules}
    assert {t.workload_hash for t in started} == covered and len(started) >= 3
    for task in started:  # what is delivered is the library's schedule, as measured on this board
        assert task.best_latency_us == pytest.approx(task.library_latency_us)
    assert summary.end_to_end.outputs_match
    assert any("started from the library's schedule" in line for line in summary.library_lines())


def test_a_default_that_beat_the_search_travels_in_the_library_and_is_what_a_tune_delivers(
    library_file, tmp_path, loopback_board
) -> None:
    """A channel shuffle ran 5x faster unscheduled than anything the search found, yet the library left defaults out
    and a tune from it measured the library's schedule instead of its default: a kernel slower than untuned.
    Now the library keeps the default where it ranks and says how the default did; a tune from a library that does
    not say (made before) measures a memory-bound task's default beside the library's schedule."""
    import dataclasses
    import shutil
    import sqlite3

    import tvm_ffi

    from edgetune.history import open_history
    from edgetune.search.default_schedule import is_default_json
    from edgetune.tasks.inventory import classify

    path, source_db, profile = library_file
    target = profile.tvm_target()
    assert all(w.default_latency_us is not None for w in load_library(path).workloads)  # the tune measured each
    # a history where one memory-bound workload's default beat its tuned records (as a channel shuffle's did)
    doctored = tmp_path / "history.db"
    shutil.copy(source_db, doctored)
    history = open_history(str(doctored), read_only=True, timing="flushed")
    try:
        by_workload: dict[str, list] = {}
        for record, _board in history.successful_records(target, limit=10**6):
            by_workload.setdefault(str(tvm_ffi.structural_hash(record.workload.mod)), []).append(record)
    finally:
        history.close()

    def memory_bound(mod) -> bool:
        return classify(next(f for _g, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))) != "contraction"

    shuffle = next(
        shash for shash, records in by_workload.items()
        if memory_bound(records[0].workload.mod) and any(is_default_json(r.trace.as_json()) for r in records)
        and any(not is_default_json(r.trace.as_json()) for r in records)
    )
    fastest = min(float(np.mean([float(x) for x in r.run_secs])) for r in by_workload[shuffle])
    with sqlite3.connect(doctored) as conn:
        rows = conn.execute("SELECT r.id, r.trace_json FROM records r").fetchall()
        default_ids = [i for i, trace in rows if is_default_json(json.loads(trace))]
        for (wid,) in conn.execute("SELECT id FROM workloads WHERE shash = ?", (shuffle,)).fetchall():
            conn.execute(f"UPDATE records SET mean_run_sec = ?, run_secs_json = ? WHERE workload_id = ? AND id IN "
                         f"({','.join(map(str, default_ids))})", (fastest / 4, json.dumps([fastest / 4]), wid))
    history = open_history(str(doctored), read_only=True, timing="flushed")
    try:
        library = export_library(history, tmp_path / "with-default.schedules.gz", target, top_k=2)
    finally:
        history.close()
    entry = next(w for w in library.workloads if w.shash == shuffle)
    assert is_default_json(entry.schedules[0].trace_json)  # the fastest, and first
    assert entry.default_latency_us == pytest.approx(fastest / 4 * 1e6)
    assert not any(is_default_json(s.trace_json) for w in library.workloads if w.shash != shuffle for s in w.schedules[:1]
                   if w.default_latency_us > s.latency_us)

    from edgetune.tuning import TuningPipeline, TuneOptions

    probe = TuningPipeline(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path))
    n_tasks = len(probe.extract_tasks(target, probe.check_inputs()[1]))
    summary = tune(host_profile(loopback_board, schedules=library.path), loopback_board, tmp_path / "run", trials=n_tasks,
                   evaluate=False)
    task = next(t for t in summary.tasks if t.workload_hash == shuffle)
    assert task.trials_this_run == 1 and task.kept_default  # the library's schedule is the untuned code: delivered
    assert summary.trials.default_schedules == 0  # every other task trusted the library's word on its default

    # the same library as edgetune wrote it before defaults were kept: no default, nothing said of it
    old = [dataclasses.replace(w, default_latency_us=None,
                               schedules=[s for s in w.schedules if not is_default_json(s.trace_json)])
           for w in library.workloads]
    header = {k: v for k, v in library.header.items() if k not in ("format", "version", "workloads")}
    before = load_library(write_library(tmp_path / "before.schedules.gz", header, old))
    # the budget the library's schedules take: the defaults come on top of it, and no search runs
    summary = tune(host_profile(loopback_board, schedules=str(before.path)), loopback_board, tmp_path / "old-run",
                   trials=n_tasks, evaluate=False)
    covered = {w.shash: w for w in before.workloads if w.schedules}
    extracted = {str(tvm_ffi.structural_hash(t.dispatched[0])): t.dispatched[0]
                 for t in probe.extract_tasks(target, probe.check_inputs()[1])}
    expected_defaults = [h for h in covered if memory_bound(extracted[h])]
    assert shuffle in expected_defaults
    # defaults: the memory-bound covered tasks (beside their library schedule) and the tasks the library lacks
    assert summary.trials.default_schedules == len(expected_defaults) + sum(1 for h in extracted if h not in covered)
    task = next(t for t in summary.tasks if t.workload_hash == shuffle)
    assert task.trials_this_run >= 2  # the library's schedule and the default, both measured: the faster is delivered


def test_library_schedules_measures_the_libraries_best_few_and_keeps_the_fastest(library_file, tmp_path, loopback_board) -> None:
    """--library-schedules 2: a covered task measures the library's two best (one trial each) and delivers the faster."""
    path, _db, _profile = library_file
    library = load_library(path)
    profile = host_profile(loopback_board, schedules=str(path), library_schedules=2)
    from edgetune.tuning import TuningPipeline, TuneOptions

    probe = TuningPipeline(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path))
    extracted = probe.extract_tasks(profile.tvm_target(), probe.check_inputs()[1])
    entries = [library.find(task.dispatched[0]) for task in extracted]
    expected = [min(2, len(e.schedules)) if e is not None and e.schedules else 1 for e in entries]
    assert max(expected) == 2, "the library keeps two schedules of some workload"
    summary = tune(profile, loopback_board, tmp_path / "run", trials=sum(expected), evaluate=False)
    assert summary.trials.this_run == sum(expected)
    by_hash = {w.shash: w for w in library.workloads}
    for task in summary.tasks:
        entry = by_hash.get(task.workload_hash)
        if entry is not None and entry.schedules:
            assert task.trials_this_run == min(2, len(entry.schedules))
            assert task.best_latency_us == pytest.approx(task.library_latency_us)  # the faster of the two


def test_a_task_the_library_lacks_starts_from_its_nearest_shape_in_place_of_the_untuned_default(
    library_file, tmp_path, loopback_board
) -> None:
    """At one trial per task, a convolution the library lacked measured its untuned default (20 ms where tuned code
    takes 0.3) and was delivered so: ResNet-18 at 128x128 from a library of 224x224 ran 44x ONNX Runtime. Now each
    compute-bound task the library lacks measures the library's schedule of the nearest shape of its operator,
    adapted, as its one trial; memory-bound tasks still measure their default."""

    path, _db, _profile = library_file
    library = load_library(path)
    profile = host_profile(loopback_board, schedules=str(path))
    model = "demo:tiny-cnn@40"  # the library holds the 32x32 CNN: the same operators at other shapes
    extracted, lacking = _tasks_the_library_lacks(library, profile, model, tmp_path)
    summary = tune(profile, loopback_board, tmp_path / "run", model=model, trials=len(extracted))
    assert summary.trials.this_run == len(extracted) and all(t.trials_this_run == 1 for t in summary.tasks)
    classes = summary.kernel_classes()
    compute = [t for t in summary.tasks if classes.get(t.name) == "compute" and t.name in lacking]
    assert len(compute) >= 2, "the 40x40 CNN's convolutions are not in the 32x32 CNN's library"
    for task in compute:  # delivered: the transferred schedule, its default never measured
        assert task.transferred_latency_us is not None and task.default_latency_us is None, task.name
        assert task.best_latency_us == pytest.approx(task.transferred_latency_us) and not task.kept_default
        assert task.library_latency_us is None
    for task in summary.tasks:
        if task.name not in lacking:  # the exact workload: the library's own schedule
            assert task.transferred_latency_us is None and task.library_latency_us is not None, task.name
        elif classes.get(task.name, "compute") != "compute":
            assert task.transferred_latency_us is None and task.default_latency_us is not None, task.name
    assert summary.end_to_end.outputs_match  # the adapted schedules compute what the model computes
    assert any("of another shape of their operator" in line for line in summary.library_lines())
    # at two trials per task, each such convolution measures its default too (a small dense layer's
    # untuned loops can beat every tiling): the faster is delivered
    roomy = tune(profile, loopback_board, tmp_path / "roomy", model=model, trials=2 * len(extracted), evaluate=False)
    for task in roomy.tasks:
        if task.name in {t.name for t in compute}:
            assert task.transferred_latency_us is not None and task.default_latency_us is not None, task.name
            assert task.best_latency_us <= min(task.transferred_latency_us, task.default_latency_us) * 1.0001
    # with transfer off, the same tune measures the default of every task the library lacks, as before
    off = tune(host_profile(loopback_board, schedules=str(path), transfer="off"), loopback_board, tmp_path / "off",
               model=model, trials=len(extracted), evaluate=False)
    assert all(t.transferred_latency_us is None and t.default_latency_us is not None for t in off.tasks if t.name in lacking)


def test_failed_library_schedules_fall_back_to_the_measured_default(
    library_file, tmp_path, loopback_board, monkeypatch
) -> None:
    """At one trial per task, the library's schedule of another shape takes the place of the task's default. When it
    failed to build or run, the task had no record: the model got the untuned code, unmeasured and not reported as
    kept. Now the default is measured after it and delivered as kept."""
    import tvm.s_tir.meta_schedule as ms

    from edgetune.tuning import TuningPipeline, TuneOptions
    from edgetune.tuning import library_phase

    path, _db, _profile = library_file
    library = load_library(path)
    profile = host_profile(loopback_board, schedules=str(path))
    model = "demo:tiny-cnn@40"
    extracted, lacking = _tasks_the_library_lacks(library, profile, model, tmp_path)
    real = library_phase.measure_candidates
    failed: list[str] = []

    def failing(contexts, by_task, builder, runner):  # the board rejects every schedule of another shape
        measured = real(contexts, by_task, builder, runner)
        for index, (candidate, built, _ran) in list(measured.items()):
            if str(contexts[index].task_name) in lacking:
                failed.append(str(contexts[index].task_name))
                measured[index] = (candidate, built, ms.runner.RunnerResult(run_secs=None, error_msg="injected failure"))
        return measured

    monkeypatch.setattr(library_phase, "measure_candidates", failing)
    summary = tune(profile, loopback_board, tmp_path / "run", model=model, trials=len(extracted), evaluate=False)
    assert len(failed) >= 2, "the 40x40 CNN's convolutions start from the library's 32x32 schedules"
    for task in summary.tasks:
        if task.name in failed:
            assert task.transferred_latency_us is None and task.default_latency_us is not None, task.name
            assert task.kept_default and task.best_latency_us == pytest.approx(task.default_latency_us), task.name
            assert task.trials_this_run == 2, task.name  # the failed schedule and the default
    assert set(failed) <= set(summary.tasks_kept_default)
    defaults_without_failure = sum(1 for t in summary.tasks if t.name in lacking and t.name not in failed)
    assert summary.trials.default_schedules == len(failed) + defaults_without_failure
    # the library's schedules of the exact workloads too (a library from another machine of the family whose
    # traces do not build here): every task measures its default, none is delivered unmeasured
    exact = TuningPipeline(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path))
    exact_tasks = exact.extract_tasks(profile.tvm_target(), exact.check_inputs()[1])
    lacking.update(str(task.task_name) for task in exact_tasks)
    failed.clear()
    everything = tune(profile, loopback_board, tmp_path / "all-fail", trials=len(exact_tasks), evaluate=False)
    assert failed, "the 32x32 CNN's tasks start from the library"
    for task in everything.tasks:
        assert task.default_latency_us is not None and task.best_latency_us is not None, task.name
        if task.name in failed:
            assert task.kept_default and task.library_latency_us is None, task.name


def test_the_library_serves_the_nearest_shapes_first_and_their_fastest_schedules(library_file) -> None:
    """A task the library lacks replays the traces of the nearest few shapes of its operator only: replaying every
    shape's (MobileNetV2 at 160 against the AVX-512 library) cost a one-trial tune 8 s of its wall time."""
    from edgetune.search.default_schedule import is_default_json
    from edgetune.search.transfer import buffer_shapes, shape_distance
    from edgetune.tasks.signature import operator_signature
    from edgetune.tuning import TuningPipeline, TuneOptions

    path, _db, profile = library_file
    library = load_library(path)
    target = profile.tvm_target()
    probe = TuningPipeline(TuneOptions(profile=profile, model="demo:tiny-cnn@40", out_dir=Path("/nonexistent")))
    extracted = [t.dispatched[0] for t in probe.extract_tasks(target, probe.check_inputs()[1])]
    checked = 0
    for mod in extracted:
        signature = operator_signature(mod)
        nearest = library.nearest_workloads(mod, signature)
        assert {w.shash for w in nearest} == {w.shash for w in library.workloads if w.signature == list(signature) and w.schedules}
        distances = [shape_distance(buffer_shapes(mod), w.shapes) for w in nearest]
        assert distances == sorted(distances)
        if len(nearest) >= 2:
            checked += 1
            one = library.tuning_records(target, workloads=nearest[:1], per_workload=1)
            fastest = min(s.latency_us for s in nearest[0].schedules if not is_default_json(s.trace_json))
            assert len(one) == 1 and float(one[0].run_secs[0]) == pytest.approx(fastest * 1e-6)
            assert len(library.tuning_records(target, workloads=nearest[:2], per_workload=1)) == 2
    assert checked, "some operator of the 40x40 CNN has two shapes in the 32x32 CNN's library"


def test_similar_records_come_nearest_shape_first() -> None:
    """The first transferred seed (a one-trial tune's only one) is the shape whose tiles needed the least adapting."""
    from edgetune.search.transfer import buffer_shapes, shape_distance

    assert shape_distance([(1, 64, 56, 56)], [(1, 64, 56, 56)]) == 0
    assert shape_distance([(1, 64, 56, 56)], [(1, 64, 28, 28)]) < shape_distance([(1, 64, 56, 56)], [(1, 64, 7, 7)])
    assert shape_distance([(1, 64, 56, 56)], [(1, 64, 56)]) == float("inf")
    assert shape_distance([(1, 8)], [(1, 8), (8,)]) == float("inf")

    def dense(n: int):
        a = tvm.te.placeholder((n, 16), name="a")
        b = tvm.te.placeholder((16, 16), name="b")
        k = tvm.te.reduce_axis((0, 16), name="k")
        c = tvm.te.compute((n, 16), lambda i, j: tvm.te.sum(a[i, k] * b[k, j], axis=k), name="c")
        return tvm.IRModule({"main": tvm.te.create_prim_func([a, b, c])})

    assert buffer_shapes(dense(8)) == [(8, 16), (16, 16), (8, 16)]


def test_a_damaged_library_leaves_the_tune_running(tmp_path, loopback_board) -> None:
    bad = tmp_path / "bad.schedules.gz"
    bad.write_bytes(b"\x1f\x8b not really gzip")
    # 12 trials: more than tiny-cnn's tasks in any layout (7 with NCHWc's transforms), so the search runs too
    summary = tune(host_profile(loopback_board, schedules=str(bad)), loopback_board, tmp_path / "run", trials=12, evaluate=False)
    assert summary.trials.this_run == 12
    assert not summary.schedules["used"] and summary.schedules["message"].startswith("schedule library not used: ")
    assert all(t.library_latency_us is None for t in summary.tasks)


def test_auto_without_a_shipped_library_for_the_family_says_so(monkeypatch) -> None:
    from edgetune.schedules import use

    monkeypatch.setattr(use, "shipped_libraries", lambda: [Path("/x/aarch64-neon.schedules.xz")])
    target = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})
    choice = choose_library("auto", target)
    assert choice.library is None
    assert choice.message == (
        "schedule library: none shipped for this CPU family (x86-64-avx512; shipped: aarch64-neon); tuning from scratch"
    )


def test_library_records_transfer_to_another_shape_or_are_skipped(library_file) -> None:
    """A library schedule of the 32x32 CNN's convolutions replayed on the 40x40 CNN's: valid schedules or none."""
    from edgetune.builder.intrinsics import load_tensor_intrinsics
    from edgetune.search.transfer import best_similar_records, transferred_candidates
    from edgetune.tasks import load_model, prepare_for_tuning
    from edgetune.tasks.graph import prepare_graph
    from edgetune.tasks.signature import operator_signature

    path, _db, profile = library_file
    target = profile.tvm_target()
    load_tensor_intrinsics(target)
    library = load_library(path)
    records = library.tuning_records(target)
    # the graph the tune prepared: the profile's convolution layout (blocked on AVX-512 and AVX2 hosts)
    prepared = prepare_graph(load_model("demo:tiny-cnn@40"), profile.tuning.conv_layout, "full", target)
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(prepared.mod, target), target)
    conv = next(t for t in tasks if "conv2d_NCHWc1" in t.task_name)
    ctx = ms.TuneContext(mod=conv.dispatched[0], target=target, space_generator="post-order-apply",
                         search_strategy="replay-trace", task_name=conv.task_name, num_threads=1, rand_state=1)
    similar = best_similar_records(records, ctx.mod, operator_signature)
    assert similar, "the library holds the same operator at another shape"
    candidates = transferred_candidates(ctx, similar, limit=4)
    inputs = [np.random.default_rng(0).standard_normal([int(d) for d in a.shape]).astype("float32")
              for a in ms.arg_info.ArgInfo.from_entry_func(ctx.mod, remove_preproc=True)]

    def run(mod):
        func = tvm.compile(mod, target=target)
        arrays = [tvm.runtime.tensor(x) for x in inputs]
        func(*arrays)
        return arrays[-1].numpy()

    expected = run(ctx.mod)
    for candidate in candidates:  # each transferred schedule computes what the workload computes
        np.testing.assert_allclose(run(candidate.sch.mod), expected, rtol=1e-4, atol=1e-4)


def test_schedules_build_gives_every_workload_its_budget_and_resumes(tmp_path, loopback_board) -> None:
    """`schedules build`: each task of the zoo gets the whole budget (no early stop); a second run tops up only what
    the first left short."""
    from edgetune.profile import load_profile
    from edgetune.tuning.zoo import build_library

    # as imported: NCHWc's layout transforms have so few distinct schedules that two of three trials can be the
    # same trace, which the history keeps once, and the exact count below is the point of this test
    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key},
                                                  tuning={"num_trials_per_iter": 2, "conv_layout": "as-is"})
    db = f"sqlite:///{tmp_path / 'zoo.db'}"
    tracker = f"{loopback_board.host}:{loopback_board.port}"
    built, library = build_library(["demo:tiny-cnn"], profile, db, budget_per_workload=3, work_dir=tmp_path / "runs",
                                   out=tmp_path / "zoo.schedules.gz", tracker=tracker, key=loopback_board.key, say=lambda _m: None)
    summary = json.loads((tmp_path / "runs" / "tiny-cnn" / "summary.json").read_text())
    trials = {task["name"]: task["trials_this_run"] for task in summary["tasks"]}
    assert sum(trials.values()) == built[0].trials_this_run and len(trials) == built[0].tasks
    # the budget, spent: no task ended early (a reshape has fewer distinct programs than 3, and the search
    # measures none twice, nor the untuned code again)
    assert all(trials[name] == 3 for name in trials if "conv2d" in name or "matmul" in name or "mean" in name), trials
    assert all(1 <= count <= 3 for count in trials.values()), trials
    assert library is not None and library.header["budget_per_workload"] == 3
    assert (library.header["budget_counts"], library.header["conv_layout"]) == ("measured", "NCHW (as imported)")
    described = "\n".join(library.describe())
    assert "3 trials per workload, measured" in described and "(convolutions in NCHW (as imported))" in described
    assert {w.shash for w in library.workloads if w.schedules} and len(library.workloads) == built[0].tasks
    again, _ = build_library(["demo:tiny-cnn"], profile, db, budget_per_workload=3, work_dir=tmp_path / "runs",
                             tracker=tracker, key=loopback_board.key, say=lambda _m: None)
    # a rerun gives a task left short (the reshape) another try, and no task more than its budget
    assert again[0].in_history_before == built[0].trials_this_run
    assert again[0].trials_this_run <= sum(3 - count for count in trials.values())
    # a per-task budget counts what the history holds: a resumed run with trials to spare gives no task more
    # (a build's tasks that ended early used to hand their share to the full ones on every rerun)
    from edgetune.tuning import TuneOptions, run_tune

    capped = profile.with_overrides(tuning={"max_trials_per_task": 3, "early_stop": "none", "schedules": "off"})
    more = run_tune(TuneOptions(profile=capped, model="demo:tiny-cnn", out_dir=tmp_path / "more", db=db, evaluate=False,
                                tracker=tracker, key=loopback_board.key, trials=3 * built[0].tasks + 6))
    assert any(t.trials_before >= 3 for t in more.tasks)  # so the check below can fail
    for task in more.tasks:
        # (a minor task's cap, tuning.minor_task_trials, counts the history too, and may be lower)
        assert task.trial_cap is not None and task.trial_cap <= max(0, 3 - task.trials_before), task
        assert task.trials_this_run <= task.trial_cap, task
    assert more.trials.this_run < 6  # the spare trials went nowhere


def test_a_build_stopped_part_way_still_writes_its_library_and_says_how_far(tmp_path, loopback_board, monkeypatch) -> None:
    """`schedules build --hours`: at the limit the batch in flight finishes, the library of what was measured is
    written with the model it stopped in named with how far it got, the next model is not started, and it returns;
    Ctrl-C writes it too, then stops as a tune does."""
    import signal

    from edgetune.errors import TuningInterrupted
    from edgetune.profile import load_profile
    from edgetune.tuning import zoo as zoo_module
    from edgetune.tuning.zoo import build_library

    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key},
                                                  tuning={"num_trials_per_iter": 2, "conv_layout": "as-is"})
    from edgetune.tuning import TuneOptions
    from edgetune.tuning.pipeline import TuningPipeline

    tracker = f"{loopback_board.host}:{loopback_board.port}"
    probe = TuningPipeline(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path / "probe"))
    tasks = len(probe.extract_tasks(*probe.check_inputs()))
    # each look at the clock 1000 s later: the build reads it twice before the first batch, and a batch per
    # task's default comes first, so the limit falls after the second search batch of the first model
    ticks = iter(range(0, 10**9, 1000))
    hours = (tasks + 4) / 3.6
    said: list[str] = []
    built, library = build_library(
        ["demo:tiny-cnn", "demo:tiny-cnn@16"], profile, f"sqlite:///{tmp_path / 'zoo.db'}", budget_per_workload=3,
        work_dir=tmp_path / "runs", out=tmp_path / "part.schedules.gz", tracker=tracker, key=loopback_board.key,
        hours=hours, say=said.append, clock=lambda: next(ticks),
    )
    assert [b.spec for b in built] == ["demo:tiny-cnn"] and built[0].stopped, said
    assert not any("tiny-cnn@16:" in line for line in said), said  # the second model never started
    assert any(f"time limit of {hours:g} h reached in demo:tiny-cnn" in line for line in said), said
    assert tasks < built[0].trials_this_run <= tasks + 2 * 2, said  # the defaults, then two batches of at most two
    first = built[0]
    assert 0 < first.trials_this_run < 3 * first.tasks and first.tasks_at_budget < first.tasks
    assert library is not None and (tmp_path / "part.schedules.gz").exists()
    assert library.header["zoo"] == [f"demo:tiny-cnn ({first.tasks_at_budget} of its {first.tasks} tasks at the budget)"]
    assert sum(len(w.schedules) for w in library.workloads) >= 1  # what it measured is in the file
    assert "zoo: demo:tiny-cnn (" in "\n".join(load_library(tmp_path / "part.schedules.gz").describe())

    # Ctrl-C (what stop_on_signals does on SIGINT) after the first batch: written, then raised with its exit code
    def interrupt(self, progress, task):
        self.stop.signum = signal.SIGINT
        self.stop.event.set()

    monkeypatch.setattr(zoo_module._BuildProgress, "on_batch", interrupt)
    with pytest.raises(TuningInterrupted) as stopped:
        build_library(["demo:tiny-cnn@16"], profile, f"sqlite:///{tmp_path / 'zoo.db'}", budget_per_workload=3,
                      work_dir=tmp_path / "runs", out=tmp_path / "ctrl-c.schedules.gz", tracker=tracker,
                      key=loopback_board.key, say=said.append)
    assert stopped.value.exit_code == 130 and "run the same command again to resume" in str(stopped.value)
    written = load_library(tmp_path / "ctrl-c.schedules.gz")
    import re

    named = re.fullmatch(r"demo:tiny-cnn@16 \((\d+) of its (\d+) tasks at the budget\)", written.header["zoo"][0])
    assert named and int(named[1]) < int(named[2]), written.header["zoo"]  # stopped after its first default
    # the stop came after the first task's default, but every default measured in that batch was kept
    summary = json.loads((tmp_path / "runs" / "tiny-cnn-16" / "summary.json").read_text())
    new_tasks = [t for t in summary["tasks"] if t["trials_before"] == 0]
    assert len(new_tasks) >= 2 and all(t["trials_this_run"] == 1 for t in new_tasks), summary["tasks"]
    with pytest.raises(OptionError, match="--hours must be > 0, got 0 instead"):
        build_library(["demo:tiny-cnn"], profile, "sqlite:///unused.db", budget_per_workload=3, work_dir=tmp_path, hours=0)


def test_a_build_budget_counts_measured_trials_so_resuming_adds_none(tmp_path, loopback_board) -> None:
    """K-means measures some of each batch the search proposes: the budget is the measured trials, so a finished
    build holds the budget per workload and a rerun measures nothing (it used to deepen every task it resumed)."""
    from edgetune.profile import load_profile
    from edgetune.tuning.zoo import build_library

    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key},
                                                  tuning={"num_trials_per_iter": 8, "conv_layout": "as-is"})
    db = f"sqlite:///{tmp_path / 'zoo.db'}"
    tracker = f"{loopback_board.host}:{loopback_board.port}"
    runs = tmp_path / "runs"
    built, _ = build_library(["demo:tiny-cnn"], profile, db, budget_per_workload=5, work_dir=runs, tracker=tracker,
                             key=loopback_board.key, say=lambda _m: None)
    summary = json.loads((runs / "tiny-cnn" / "summary.json").read_text())
    search = summary["measurement_reduction"]
    assert search["proposed"] > search["measured"]  # sampling left candidates unmeasured: the case this test is about
    convolutions = [task for task in summary["tasks"] if "conv2d" in task["name"]]
    assert len(convolutions) == 2
    for task in convolutions:  # the budget, measured (not 5 proposed and fewer measured)
        assert task["trials_this_run"] == 5, task
    for task in summary["tasks"]:  # (a reshape has fewer distinct schedules than that)
        assert task["trials_this_run"] <= 5, task
    again, _ = build_library(["demo:tiny-cnn"], profile, db, budget_per_workload=5, work_dir=runs, tracker=tracker,
                             key=loopback_board.key, say=lambda _m: None)
    assert again[0].in_history_before == built[0].trials_this_run
    # nothing measured on the board (the reshape's two schedules are proposed again, and served from the history)
    assert json.loads((runs / "tiny-cnn" / "summary.json").read_text())["trials"]["measured_on_device"] == 0


def test_a_build_missing_from_a_library_tunes_only_what_the_library_lacks(tmp_path, loopback_board) -> None:
    """`schedules build --missing-from LIB`: a model the library holds whole is skipped, another model's tasks the
    library lacks are the only ones tuned, and the library written says so in its zoo."""
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions
    from edgetune.tuning.pipeline import TuningPipeline
    from edgetune.tuning.zoo import build_library

    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key},
                                                  tuning={"num_trials_per_iter": 2, "conv_layout": "as-is"})
    tracker = f"{loopback_board.host}:{loopback_board.port}"
    first = tmp_path / "first.schedules.gz"
    # two trials per workload: a searched schedule beside each untuned default, for the gap's tasks to start from
    build_library(["demo:tiny-cnn"], profile, f"sqlite:///{tmp_path / 'first.db'}", budget_per_workload=2,
                  work_dir=tmp_path / "first", out=first, tracker=tracker, key=loopback_board.key, say=lambda _m: None)
    library = load_library(first)
    # at 16x16 the convolutions are new shapes and the classifier after the global pool is not
    probe = TuningPipeline(TuneOptions(profile=profile, model="demo:tiny-cnn@16", out_dir=tmp_path / "probe"))
    extracted = probe.extract_tasks(*probe.check_inputs())
    names = [task.task_name for task in extracted]
    lacked = [task.task_name for task in extracted if library.find(task.dispatched[0]) is None]
    assert 0 < len(lacked) < len(names), (lacked, names)  # both kinds, so the checks below can fail

    said: list[str] = []
    built, gap = build_library(["demo:tiny-cnn", "demo:tiny-cnn@16"], profile, f"sqlite:///{tmp_path / 'gap.db'}",
                               budget_per_workload=1, work_dir=tmp_path / "gap", out=tmp_path / "gap.schedules.gz",
                               tracker=tracker, key=loopback_board.key, missing_from=library, say=said.append)
    assert any(line.startswith("[1/2] demo:tiny-cnn: all its ") and line.endswith(" tasks are in first.schedules.gz: skipped")
               for line in said), said
    assert [(b.spec, b.tasks, b.of_tasks) for b in built] == [("demo:tiny-cnn@16", len(lacked), len(names))]
    summary = json.loads((tmp_path / "gap" / "tiny-cnn-16" / "summary.json").read_text())
    assert sorted(task["name"] for task in summary["tasks"]) == sorted(lacked)
    assert all(task["trials_this_run"] >= 1 for task in summary["tasks"])
    # the lacked tasks start from the library's schedules of their neighbours, adapted, not from scratch
    assert summary["schedules"]["used"] and summary["schedules"]["library"] == str(first)
    assert any(task["transferred_latency_us"] is not None for task in summary["tasks"]), summary["tasks"]
    assert gap is not None and gap.workloads and {w.shash for w in gap.workloads}.isdisjoint(w.shash for w in library.workloads)
    assert gap.header["zoo"] == [f"demo:tiny-cnn@16 (the {len(lacked)} of its {len(names)} tasks first.schedules.gz lacked)"]
    # a zoo the library holds whole: nothing tuned, nothing written, and it says so
    said.clear()
    again, nothing = build_library(["demo:tiny-cnn"], profile, f"sqlite:///{tmp_path / 'gap.db'}", budget_per_workload=1,
                                   work_dir=tmp_path / "gap", out=tmp_path / "nothing.schedules.gz", tracker=tracker,
                                   key=loopback_board.key, missing_from=library, say=said.append)
    assert (again, nothing) == ([], None) and not (tmp_path / "nothing.schedules.gz").exists()
    assert said[-1] == f"nothing to build: first.schedules.gz holds every task of the zoo; {tmp_path / 'nothing.schedules.gz'} not written"

    # a file that is not a library of this family: one line, nothing tuned
    done = run_cli("schedules", "build", "--budget", "1", "--db", f"sqlite:///{tmp_path / 'no.db'}", "--zoo",
                   "demo:tiny-cnn", "--missing-from", str(tmp_path / "none.schedules.gz"), cwd=tmp_path)
    assert done.returncode != 0 and done.stderr.startswith(
        "edgetune: error: --missing-from must name a library of this profile's family"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "no.db").exists()


def test_a_deepening_build_tunes_each_models_heaviest_tasks_from_the_librarys_schedules(library_file, tmp_path, loopback_board) -> None:
    """`schedules build --heaviest 1 --start-from LIB`: only the task with the most FLOPs x repeats is tuned, it starts
    from the library's schedule of its own workload (not from scratch), and the library written says so."""
    from edgetune.tasks.flops import task_flops
    from edgetune.tuning.zoo import build_library, heaviest_tasks

    path, _db, profile = library_file
    library = load_library(path)
    extracted, _lacked = _tasks_the_library_lacks(library, profile, "demo:tiny-cnn", tmp_path / "probe")
    work = {task.task_name: task_flops(task.dispatched[0]) * float(task.weight) for task in extracted}
    heaviest = max(work, key=work.get)
    assert sorted(work.values())[-1] > sorted(work.values())[-2] > 0, work  # one heaviest, so the check below can fail
    assert [task.task_name for task in heaviest_tasks(extracted, 1)] == [heaviest]
    assert library.find(next(t for t in extracted if t.task_name == heaviest).dispatched[0]) is not None

    said: list[str] = []
    tracker = f"{loopback_board.host}:{loopback_board.port}"
    built, deep = build_library(["demo:tiny-cnn"], profile, f"sqlite:///{tmp_path / 'deep.db'}", budget_per_workload=3,
                                work_dir=tmp_path / "deep", out=tmp_path / "deep.schedules.gz", tracker=tracker,
                                key=loopback_board.key, heaviest=1, start_from=library, say=said.append)
    summary = json.loads((tmp_path / "deep" / "tiny-cnn" / "summary.json").read_text())
    assert [task["name"] for task in summary["tasks"]] == [heaviest]
    assert summary["schedules"]["used"] and summary["schedules"]["library"] == str(path)
    assert summary["tasks"][0]["library_latency_us"] is not None  # its own workload's schedule measured first
    assert [(b.tasks, b.of_tasks) for b in built] == [(1, len(extracted))]
    label = f"demo:tiny-cnn (the heaviest one of its {len(extracted)} tasks; started from {path.name})"
    assert deep is not None and deep.header["zoo"] == [label]
    assert f"[1/1] demo:tiny-cnn: 1 task (the heaviest one of its {len(extracted)} tasks; started from {path.name}), " \
           "up to 3 trials" in said, said

    for options, message in [
        (["--heaviest", "0"], "edgetune: error: --heaviest must be >= 1 task per model, got 0 instead"),
        (["--missing-from", str(path), "--start-from", str(path)], "edgetune: error: --start-from must be left out with --missing-from"),
        (["--start-from", str(tmp_path / "none.schedules.gz")], "edgetune: error: --start-from must name a library of this profile's family"),
    ]:
        done = run_cli("schedules", "build", "--budget", "1", "--db", f"sqlite:///{tmp_path / 'no.db'}", "--zoo",
                       "demo:tiny-cnn", *options, cwd=tmp_path)
        assert done.returncode == 2 and done.stderr.startswith(message), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "no.db").exists()


def test_a_build_for_one_operator_tunes_only_the_tasks_that_compute_it(tmp_path, loopback_board) -> None:
    """`schedules build --operator BLOCK`: only the model's tasks whose workload computes that block are tuned (an
    operator's entries built again after its search space changed), the library's zoo says which; an operator no task
    of the zoo computes is one line naming those they do, nothing tuned or written."""
    from edgetune.tasks.signature import operator_signature
    from edgetune.tuning.zoo import build_library

    profile = host_profile(loopback_board, schedules="off")
    extracted = _extracted_tasks(profile, "demo:tiny-cnn", tmp_path / "probe")
    convolutions = sorted(t.task_name for t in extracted if "conv2d_NCHWc" in operator_signature(t.dispatched[0]))
    assert 0 < len(convolutions) < len(extracted), convolutions  # some tasks and not all, so the check below can fail
    said: list[str] = []
    built, library = build_library(
        ["demo:tiny-cnn"], profile, f"sqlite:///{tmp_path / 'conv.db'}", budget_per_workload=1, work_dir=tmp_path / "conv",
        out=tmp_path / "conv.schedules.gz", tracker=f"{loopback_board.host}:{loopback_board.port}",
        key=loopback_board.key, operator="conv2d_NCHWc", say=said.append)
    summary = json.loads((tmp_path / "conv" / "tiny-cnn" / "summary.json").read_text())
    assert sorted(task["name"] for task in summary["tasks"]) == convolutions
    label = f"demo:tiny-cnn (the {len(convolutions)} of its {len(extracted)} tasks computing conv2d_NCHWc)"
    assert library is not None and library.header["zoo"] == [label]
    assert {tuple(w.signature)[1] for w in library.workloads} == {"conv2d_NCHWc"}
    count = len(convolutions)
    assert (f"[1/1] demo:tiny-cnn: {count} tasks (the {count} of its {len(extracted)} tasks computing conv2d_NCHWc), "
            f"up to {count} trials") in said, said

    done = run_cli("schedules", "build", "--budget", "1", "--db", f"sqlite:///{tmp_path / 'no.db'}", "--zoo",
                   "demo:tiny-cnn", "--operator", "depthwise_conv2d_NCHWc", "--out", str(tmp_path / "no.schedules.gz"),
                   cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith(
        "edgetune: error: --operator must name an operator of the zoo's tasks ("), done.stderr
    assert "conv2d_NCHWc, " in done.stderr and "matmul" in done.stderr  # what its tasks compute
    assert "got 'depthwise_conv2d_NCHWc' instead" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "no.schedules.gz").exists()


def test_a_build_for_this_cpu_tunes_the_workloads_the_library_holds_only_for_other_cpu_models(library_file, tmp_path,
                                                                                                loopback_board) -> None:
    """`schedules build --missing-from LIB --for-this-cpu`: a workload the library holds only as another CPU model's
    schedules is tuned as a lacked one (a family shares instructions, not the best tiles); one held for this CPU model
    is not. Without --for-this-cpu the same model is skipped whole."""
    from edgetune.schedules.library import target_cpu
    from edgetune.tuning.zoo import build_library

    path, _db, profile = library_file
    library = load_library(path)
    cpu = target_cpu(profile.tvm_target())
    assert cpu and all(s.mcpu == cpu for w in library.workloads for s in w.schedules)  # all this host's, as measured
    extracted, lacked = _tasks_the_library_lacks(library, profile, "demo:tiny-cnn", tmp_path / "probe")
    held = [task for task in extracted if task.task_name not in lacked]
    assert len(held) >= 2, [t.task_name for t in extracted]  # one relabelled, one left: both outcomes can fail
    # the first held task's workload as if another CPU model of the family had measured it
    moved = library.find(held[0].dispatched[0])
    for schedule in moved.schedules:
        schedule.target_json = json.dumps({**json.loads(schedule.target_json), "mcpu": "another-cpu"})
        schedule.__dict__.pop("mcpu", None)  # read above: the cached CPU model goes with the target
    other = write_library(tmp_path / "other.schedules.gz", {k: v for k, v in library.header.items() if k != "workloads"},
                          library.workloads)
    assert all("mcpu" not in json.loads(line) for line in gzip.open(other, "rt"))  # a derived field is not stored
    mixed = load_library(other)
    assert {s.mcpu for s in mixed.find(held[0].dispatched[0]).schedules} == {"another-cpu"}

    tracker, said = f"{loopback_board.host}:{loopback_board.port}", []
    db = f"sqlite:///{tmp_path / 'mine.db'}"
    if not lacked:  # the library holds the model whole: without --for-this-cpu nothing is tuned
        skipped, _ = build_library(["demo:tiny-cnn"], profile, db, budget_per_workload=1, work_dir=tmp_path / "all",
                                   tracker=tracker, key=loopback_board.key, missing_from=mixed, say=said.append)
        assert skipped == [] and said[-1].endswith(" tasks are in other.schedules.gz: skipped"), said
    built, mine = build_library(["demo:tiny-cnn"], profile, db, budget_per_workload=1, work_dir=tmp_path / "mine",
                                out=tmp_path / "mine.schedules.gz", tracker=tracker, key=loopback_board.key,
                                missing_from=mixed, for_this_cpu=True, say=said.append)
    summary = json.loads((tmp_path / "mine" / "tiny-cnn" / "summary.json").read_text())
    wanted = sorted(lacked | {held[0].task_name})
    assert sorted(task["name"] for task in summary["tasks"]) == wanted
    assert [(b.tasks, b.of_tasks) for b in built] == [(len(wanted), len(extracted))]
    assert any(f"other.schedules.gz lacks them for {cpu}; it holds the other {len(extracted) - len(wanted)})" in line
               for line in said), said
    lacked_by = "the one" if len(wanted) == 1 else f"the {len(wanted)}"
    assert mine is not None and mine.header["zoo"] == [
        f"demo:tiny-cnn ({lacked_by} of its {len(extracted)} tasks other.schedules.gz lacked for {cpu})"]
    # the relabelled workload started from the other CPU model's schedule of its own workload
    task = next(t for t in summary["tasks"] if t["name"] == held[0].task_name)
    assert task["library_latency_us"] is not None, task

    for options, message in [
        (["--for-this-cpu"], "edgetune: error: --for-this-cpu must come with --missing-from"),
    ]:
        done = run_cli("schedules", "build", "--budget", "1", "--db", f"sqlite:///{tmp_path / 'no.db'}", "--zoo",
                       "demo:tiny-cnn", *options, cwd=tmp_path)
        assert done.returncode == 2 and done.stderr.startswith(message), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "no.db").exists()

def test_the_last_batch_is_cut_to_the_runs_budget(tmp_path, loopback_board) -> None:
    """--trials is a limit: MetaSchedule counts whole batches, so 5 tasks x 2 would spend 10 of a search budget of 9."""
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune

    profile = load_profile("host").with_overrides(
        rpc={"key": loopback_board.key},
        tuning={"num_trials_per_iter": 2, "conv_layout": "as-is", "sampler": "none", "early_stop": "none",
                "schedules": "off", "transfer": "off", "minor_task_share": 0},
    )
    summary = run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path / "run", evaluate=False,
                                   tracker=f"{loopback_board.host}:{loopback_board.port}", key=loopback_board.key,
                                   trials=5 + 9))  # 5 default schedules, then 9 for the search
    assert len(summary.tasks) == 5 and summary.trials.default_schedules == 5
    assert summary.trials.this_run == 14 and sum(t.trials_this_run for t in summary.tasks) == 14


def test_schedules_build_tunes_without_early_stop_or_a_library(tmp_path, monkeypatch) -> None:
    """The adaptive early stop saves a user's trials; a library build must spend its budget on every workload."""
    from edgetune.profile import load_profile
    from edgetune.tuning import pipeline, zoo

    seen = []

    class Summary:
        tasks = []

        class trials:
            this_run = 0
            in_history_before = 0

    monkeypatch.setattr(pipeline.TuningPipeline, "run", lambda self: seen.append(self.options) or Summary())
    zoo.build_library(["demo:tiny-cnn"], load_profile("host"), f"sqlite:///{tmp_path / 'h.db'}", budget_per_workload=5,
                      work_dir=tmp_path, say=lambda _m: None)
    tuning = seen[0].profile.tuning
    assert (tuning.early_stop, tuning.schedules, tuning.max_trials_per_task, tuning.minor_task_share) == ("none", "off", 5, 0)
    assert seen[0].evaluate is False


def test_the_shipped_library_loads_is_small_and_covers_its_zoo() -> None:
    """The library shipped for this workplace's CPU family: loads, is named by its family, under 5 MB, covers ResNet-18
    (224, 128), ResNet-50, MobileNetV2 and SqueezeNet 1.1 at 128, MobileNetV3-small at 128 and EfficientNet-B0 at both."""
    from edgetune.schedules.use import SHIPPED_SUFFIX, shipped_libraries
    from edgetune.tasks import load_model, prepare_for_tuning
    from edgetune.tasks.graph import prepare_graph

    shipped = shipped_libraries()
    assert shipped, "a library ships in edgetune/schedules/data"
    assert sum(path.stat().st_size for path in shipped) <= 5_000_000  # the issue's limit (5 MB) on what it adds to the wheel
    for path in shipped:
        library = load_library(path)
        assert path.name == f"{library.family}{SHIPPED_SUFFIX}"
        assert library.workloads and all(w.schedules for w in library.workloads)
    library = load_library(next(p for p in shipped if p.name.startswith("x86-64-avx512")))
    assert "demo:resnet18@224" in library.header["zoo"] and library.header["conv_layout"] == "NCHW16c"
    # built in eleven steps and merged: each build's budget is stated, the zoo's later models are in it (ResNet-50 at
    # 64, ResNet-18 again at 128 trials per task, ResNet-18 at 128x128 at 32, four more CNNs at 128x128 at 32, then
    # SqueezeNet 1.0, ShuffleNetV2 and MobileNetV3-small at 128x128 at 32, then the 128x128 CNNs' layers in blocks of
    # 8 and EfficientNet-B0 at 128x128 in part, then EfficientNet-B0 at 128x128 finished with its SiLU blocked, then
    # EfficientNet-B0 at 224x224 on that graph, then the layers the 224x224 CNNs' tasks still lacked: --missing-from;
    # then torchvision's SqueezeNet 1.1 as torch.onnx.export writes it, then its ShuffleNetV2, MobileNetV3-small and
    # EfficientNet-B0: the real exports' tasks the library lacked; then DenseNet-121's (torchvision's and Keras') three
    # heaviest convolutions and SqueezeNet 1.0's five, deepened at 96 from the library's own: build --heaviest --start-from;
    # then the int8 zoo at 32: the KWS fixture, Keras MobileNet and MobileNetV2 int8; then the SqueezeNets' tasks
    # the classifier's output channels padded to whole blocks changed, exports and demos; then the Winograd form of
    # ResNet-18's and the SqueezeNets' 3x3 convolutions at 64: build --operator bgemm; then DenseNet-121's and ResNet-50's)
    assert [part["budget_per_workload"] for part in library.header["parts"]] == [64, 32, 64, 128, 32, 32, 32, 32, 32, 32, 32, 32,
                                                                                 32, 96, 96, 32, 32, 32, 32, 64, 64]
    assert {"demo:mobilenetv3-small@224", "demo:shufflenetv2@224", "demo:squeezenet1.0@224", "demo:transformer-bert@128",
            "demo:transformer@32", "demo:transformer-bert@32", "demo:resnet50@224",
            "demo:resnet18@128", "demo:mobilenetv2@128", "demo:mobilenetv1@128", "demo:squeezenet1.1@128",
            "demo:resnet50@128", "demo:squeezenet1.0@128", "demo:shufflenetv2@128", "demo:mobilenetv3-small@128",
            "demo:efficientnet-b0@128"} <= {
        entry.split(" (")[0] for entry in library.header["zoo"]}  # "(built at 64 ...)"
    # the later build says how each workload's untuned default did, and keeps it where nothing beat it (ShuffleNetV2's
    # channel shuffles): a tune from the library delivers that default, not a slower tuned schedule
    from edgetune.search.default_schedule import is_default_json

    assert sum(w.default_latency_us is not None for w in library.workloads) >= 200
    assert any(is_default_json(w.schedules[0].trace_json) for w in library.workloads)
    # the graph a tune prepares for this family by default: every convolution blocked (MobileNetV2's 24 and
    # MobileNetV3's 24-120 channels in blocks of 8), the stem and pool too, EfficientNet's SiLU fused into them
    target = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    for spec, convolutions_and_pools in (("demo:resnet18@224", 12), ("demo:resnet50@224", 20), ("demo:resnet18@128", 12),
                                         ("demo:mobilenetv2@128", 30), ("demo:squeezenet1.1@128", 21),
                                         ("demo:mobilenetv3-small@128", 40), ("demo:efficientnet-b0@128", 41),
                                         ("demo:efficientnet-b0@224", 41), ("demo:squeezenet1.1@224", 21),
                                         ("demo:shufflenetv2@224", 8)):
        prepared = prepare_graph(load_model(spec), "auto", "full", target)
        tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(prepared.mod, target), target)
        heavy = [t for t in tasks if "conv2d_NCHWc" in t.task_name or "pool" in t.task_name]
        assert len(heavy) >= convolutions_and_pools, (spec, len(heavy))
        missing = [t.task_name for t in heavy if library.find(t.dispatched[0]) is None]
        assert not missing, (spec, missing)
        if spec in ("demo:squeezenet1.1@224", "demo:shufflenetv2@224"):  # completed by `build --missing-from`: every task
            missing = [t.task_name for t in tasks if library.find(t.dispatched[0]) is None]
            assert not missing, (spec, missing)


def test_the_avx512_library_puts_the_3x3_convolutions_it_measured_faster_in_the_winograd_form() -> None:
    """``tuning.winograd = "auto"`` with the shipped AVX-512 library on a Zen 4: ResNet-18's 56x56 and 28x28 3x3
    convolutions take the Winograd form (the library's Winograd schedules of them ran 0.43 and 0.64 of its direct
    ones), SqueezeNet's expands from 16 channels stay direct (its Winograd schedules of them were slower), and every
    Winograd task of ResNet-18 starts from the library's own schedule of it."""
    from edgetune.profile import load_profile
    from edgetune.tasks import load_model, prepare_for_tuning
    from edgetune.schedules.use import recipe_library
    from edgetune.tasks.recipe import prepare_model, recipe_from_settings

    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    tuning = load_profile("host").tuning
    assert tuning.winograd == "auto"
    recipe = recipe_from_settings(tuning, target, library=recipe_library(tuning, target))
    shapes = recipe.switch("winograd")
    assert {"1x4x56x56x16>1x4x56x56x16", "1x8x28x28x16>1x8x28x28x16"} <= set(shapes), shapes
    assert "1x1x55x55x16>1x4x55x55x16" not in shapes and "1x1x54x54x16>1x4x54x54x16" not in shapes
    prepared = prepare_model(load_model("demo:resnet18@224"), recipe, target)
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(prepared.mod, target), target)
    winograd = [t for t in tasks if "winograd" in t.task_name]
    # 4 in the first stage, 3 in the second (its first is strided); the 14x14 and 7x7 ones have too few tiles
    assert sum(t.weight for t in winograd) == 7, [t.task_name for t in winograd]
    library = choose_library(tuning.schedules, target).library
    assert all(library.find(t.dispatched[0]) is not None for t in winograd)
    # without the library, auto chooses nothing: the same model's convolutions stay direct
    off = dataclasses.replace(tuning, schedules="off")
    assert recipe_from_settings(off, target, library=recipe_library(off, target)).switch("winograd") is False


def _tasks_and_heaviest(path: Path, target: "tvm.target.Target", count: int = 6) -> tuple[list, list]:
    """The tasks a tune extracts from the model at ``path`` for ``target`` (default graph preparation), and the ``count``
    with the most FLOPs times repeats: those ``schedules build --heaviest`` tunes."""
    from edgetune.tasks import load_model, prepare_for_tuning
    from edgetune.tasks.flops import task_flops
    from edgetune.tasks.graph import prepare_graph

    prepared = prepare_graph(load_model(str(path)), "auto", "full", target)
    extracted = ms.relax_integration.extract_tasks(prepare_for_tuning(prepared.mod, target), target)
    return extracted, sorted(extracted, key=lambda t: -task_flops(t.dispatched[0]) * t.weight)[:count]


@pytest.mark.parametrize("architecture, entry, tasks", [("squeezenet1_1", "torchvision:squeezenet1_1@224", 29)])
def test_the_shipped_library_holds_torchvisions_squeezenets_as_torch_onnx_export_writes_them(
    architecture: str, entry: str, tasks: int, tmp_path
) -> None:
    """Real exports in the zoo (issue 52): torchvision's SqueezeNet 1.1 (ceil-mode pools: every layer after the stem a
    shape the edgetune lookalike does not have) through torch.onnx.export. Only 3 of its 29 tasks were in the library
    (its 512->1000 classifier ran an adapted schedule at 30 GFLOPS); now every task is found exactly. The model is
    torchvision's definition (tests/torch_models.py: the same workloads as torchvision's own export, checked against it
    when the library was built)."""
    import torch

    import torch_models
    from edgetune.schedules.use import shipped_libraries

    torch_models.require_torch()
    library = load_library(next(p for p in shipped_libraries() if p.name.startswith("x86-64-avx512")))
    entries = [zoo for zoo in library.header["zoo"] if zoo.startswith(entry)]
    assert entries and "torch.onnx.export (TorchScript exporter)" in entries[0]  # the zoo says which exporter wrote it
    assert entries[0] in "\n".join(library.describe())  # and `schedules info` shows it
    path = tmp_path / f"{architecture}.onnx"
    torch.onnx.export(getattr(torch_models, architecture)(), (torch.randn(1, 3, 224, 224),), str(path), dynamo=False,
                      opset_version=17, input_names=["input"], output_names=["logits"])
    target = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    extracted, heaviest = _tasks_and_heaviest(path, target)
    assert len(extracted) == tasks
    missing = [t.task_name for t in extracted if library.find(t.dispatched[0]) is None]
    assert not missing, missing
    # its 6 heaviest tasks were deepened on an Intel Xeon (Sapphire Rapids class, LLVM's rocketlake), where the Zen
    # builds' schedules ran 18% slower at the median than 32 trials found: each holds that CPU model's own schedules,
    # kept beside the Zen ones where a Zen build measured it too, and a tune on each CPU model tries its own first
    xeon = tvm.target.Target({"kind": "llvm", "mcpu": "rocketlake", "num-cores": 2})
    both = 0
    for task in heaviest:
        workload = library.find(task.dispatched[0])
        cpus = {schedule.mcpu for schedule in workload.schedules}
        if [1, 63, 13, 13, 16] in [[int(d) for d in p.ty.shape] for p in task.dispatched[0]["main"].params]:
            # the 512 -> 1000 classifier, its output padded to 1008 channels (63 blocks of 16) since: built on a Zen 4
            assert cpus == {"znver4"}, cpus
            continue
        assert "rocketlake" in cpus, (task.task_name, cpus)
        assert workload.schedules_for(xeon)[0].mcpu == "rocketlake", task.task_name
        for zen in cpus - {"rocketlake"}:
            both += 1
            assert workload.schedules_for(tvm.target.Target({"kind": "llvm", "mcpu": zen}))[0].mcpu == zen, task.task_name
    assert both >= 3  # the classifier and the stem SqueezeNet 1.0 shares were built on the Xeon only


def test_the_shipped_library_holds_densenets_heaviest_convolution_as_torch_onnx_export_writes_it(tmp_path) -> None:
    """DenseNet-121's 3x3 convolutions (128 -> 32 channels, six of them on 56x56: a quarter of its FLOPs) ran an adapted
    schedule at half the speed the deepened build reached; the library holds them now. One dense layer as torchvision
    writes it (pre-activation batch norm and ReLU, bias-free convolutions), exported by torch.onnx.export: its 3x3
    convolution is found exactly, as in the whole model's export."""
    import torch
    from torch import nn

    import torch_models
    from edgetune.schedules.use import shipped_libraries
    from edgetune.tasks import load_model, prepare_for_tuning
    from edgetune.tasks.graph import prepare_graph

    torch_models.require_torch()
    library = load_library(next(p for p in shipped_libraries() if p.name.startswith("x86-64-avx512")))
    assert any(z.startswith("densenet121-224-onnx-torchscript.onnx via torch.onnx.export") and "3 heaviest" in z
               for z in library.header["zoo"]), library.header["zoo"]
    torch.manual_seed(0)
    layer = nn.Sequential(nn.BatchNorm2d(64), nn.ReLU(), nn.Conv2d(64, 128, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU(),
                          nn.Conv2d(128, 32, 3, padding=1, bias=False)).eval()
    path = tmp_path / "dense_layer.onnx"
    torch.onnx.export(layer, (torch.randn(1, 64, 56, 56),), str(path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["features"])
    target = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    prepared = prepare_graph(load_model(str(path)), "auto", "full", target)
    extracted = ms.relax_integration.extract_tasks(prepare_for_tuning(prepared.mod, target), target)
    from edgetune.tasks.flops import task_flops

    heaviest = max(extracted, key=lambda t: task_flops(t.dispatched[0]))
    assert round(task_flops(heaviest.dispatched[0]) / 1e6) == 231, heaviest.task_name  # 2 x 32 x 56 x 56 x 128 x 9
    assert library.find(heaviest.dispatched[0]) is not None, heaviest.task_name


def test_the_shipped_library_holds_the_int8_zoos_kernels_for_a_vnni_cpu() -> None:
    """Issue 54: every int8 task started from its untuned default (a 1x1 VNNI convolution of Keras MobileNet int8 at
    21 ms, 0.1 ms once searched), so 8 trials per task were spent finding a first sane schedule. The library holds
    the int8 zoo now (the KWS fixture, Keras MobileNet and MobileNetV2 int8): on a VNNI CPU of the family the
    fixture's integer kernels (convolutions, the depthwise one among them, and dense layers) are found exactly."""
    from edgetune.schedules.use import shipped_libraries
    from edgetune.tasks import load_model, prepare_for_tuning
    from edgetune.tasks.graph import prepare_graph

    library = load_library(next(p for p in shipped_libraries() if p.name.startswith("x86-64-avx512")))
    for name in ("kws_int8.tflite", "mobilenet-224-int8.tflite", "mobilenet_v2-224-int8.tflite"):
        assert any(z.startswith(f"{name} via ") for z in library.header["zoo"]), (name, library.header["zoo"])
    target = tvm.target.Target({"kind": "llvm", "mcpu": "cascadelake", "num-cores": 2})  # AVX-512 with VNNI
    prepared = prepare_graph(load_model(str(Path(__file__).parent / "data" / "tflite" / "kws_int8.tflite")),
                             "auto", "full", target)
    extracted = ms.relax_integration.extract_tasks(prepare_for_tuning(prepared.mod, target), target)
    integer = [t for t in extracted if "_int8" in t.task_name]  # 4 convolutions, 1 depthwise, 2 dense
    assert len(integer) == 7 and any("depthwise" in t.task_name for t in integer), [t.task_name for t in extracted]
    missing = [t.task_name for t in integer if library.find(t.dispatched[0]) is None]
    assert not missing, missing


def test_libraries_of_one_family_measured_on_two_cpu_models_merge_and_say_so(library_file, tmp_path) -> None:
    """The shipped library was built on Zen 4 hosts and extended on a Zen 5 one: the CPU model may differ, each part
    keeps the target it was built for, and info names both; another family still does not merge."""
    from edgetune.schedules.library import merge_libraries

    path, _db, _profile = library_file
    library = load_library(path)
    other = tmp_path / "other-cpu.schedules.gz"
    write_library(other, {**library.header, "target": {**library.header["target"], "mcpu": "some-other-cpu"}},
                  library.workloads)
    merged = merge_libraries([library, load_library(other)], tmp_path / "merged.schedules.gz")
    cpus = [part["target"].get("mcpu") for part in merged.header["parts"]]
    assert "some-other-cpu" in cpus and len(set(cpus)) == 2
    assert "some-other-cpu" in merged.describe()[1] and " and " in merged.describe()[1]


def test_each_cpu_model_keeps_its_best_schedules_in_a_merge_and_a_task_measures_its_own_first(library_file, tmp_path) -> None:
    """A family shares vector instructions, not the best tiles: on an Intel Xeon (Sapphire Rapids class), the
    schedules Zen 4 builds kept for Keras MobileNet's pointwise convolutions ran up to 2x their record, and 8 trials
    of search found ones 1.5-3x faster. A faster CPU also records faster times, so a merge that kept the fastest
    records pushed out the other CPU model's best. Now each CPU model keeps its best few, and a task measures its
    own CPU model's first."""
    import dataclasses

    import tvm_ffi

    from edgetune.schedules.library import merge_libraries, target_cpu
    from edgetune.schedules.use import library_candidates
    from edgetune.search.default_schedule import is_default_json, replayed_candidate

    path, _db, profile = library_file
    library = load_library(path)
    target = profile.tvm_target()
    here = target_cpu(target)
    assert here, "the host profile names this CPU's model"
    entry = next(w for w in library.workloads if w.schedules and not is_default_json(w.schedules[0].trace_json))
    mine = entry.schedules[0]
    assert mine.mcpu == here
    other_cpu = "znver4" if here != "znver4" else "znver5"
    # another CPU model of the family recorded another schedule (here: the untuned default's lookups) 4x faster
    # than this one's best
    untuned = [[mine.trace_json[0][0]], []]  # its first lookup, of a block the workload has before any schedule
    assert is_default_json(untuned)
    elsewhere = dataclasses.replace(mine, trace_json=untuned, latency_us=mine.latency_us / 4,
                                    target_json=json.dumps({**json.loads(mine.target_json), "mcpu": other_cpu}))
    header = {k: v for k, v in library.header.items() if k not in ("format", "version", "workloads")}
    write_library(tmp_path / "other.schedules.gz", {**header, "target": {**header["target"], "mcpu": other_cpu}},
                  [dataclasses.replace(entry, schedules=[elsewhere])])
    merged = merge_libraries([library, load_library(tmp_path / "other.schedules.gz")], tmp_path / "merged.schedules.gz",
                             top_k=1)
    kept = merged.find(entry.mod)
    # top-k 1 per CPU model: both kept, the faster record first (before, only the other CPU model's was kept)
    assert [(s.mcpu, s.latency_us) for s in kept.schedules] == [(other_cpu, elsewhere.latency_us), (here, mine.latency_us)]
    assert "(best 1 per workload and CPU model, timed" in merged.describe()[2]
    # each CPU model's own first
    assert [s.mcpu for s in kept.schedules_for(target)] == [here, other_cpu]
    other_target = tvm.target.Target({**{k: v for k, v in target.export().items() if k in ("kind", "num-cores")},
                                      "mcpu": other_cpu})
    assert [s.mcpu for s in kept.schedules_for(other_target)] == [other_cpu, here]
    # what a covered task measures first on this CPU: its own best, not the other CPU model's faster record
    context = ms.TuneContext(mod=kept.mod, target=target, space_generator="post-order-apply", task_name="own-cpu")
    (first,) = library_candidates(context, merged, 1)
    assert tvm_ffi.structural_equal(first.sch.mod, replayed_candidate(context, entry.trace(mine)).sch.mod)
    assert not tvm_ffi.structural_equal(first.sch.mod, replayed_candidate(context, kept.trace(elsewhere)).sch.mod)
    (record,) = merged.tuning_records(target, workloads=[kept], per_workload=1)
    assert float(record.run_secs[0]) == pytest.approx(mine.latency_us * 1e-6)


def test_the_avx2_library_is_used_by_an_avx2_target_and_covers_its_zoo() -> None:
    """An AVX2 CPU (here Zen 3 by name; the family is read from its features) gets the shipped x86-64-avx2 library,
    whose workloads are those of the graph a tune prepares for it by default (NCHW8c)."""
    from edgetune.tasks import load_model, prepare_for_tuning
    from edgetune.tasks.graph import prepare_graph

    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    choice = choose_library("auto", target)
    assert choice.library is not None and choice.library.family == "x86-64-avx2", choice.message
    library = choice.library
    assert library.header["conv_layout"] == "NCHW8c" and library.header["budget_counts"] == "measured"
    assert "demo:resnet18@224" in library.header["zoo"]
    prepared = prepare_graph(load_model("demo:resnet18@224"), "auto", "full", target)
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(prepared.mod, target), target)
    heavy = [t for t in tasks if "conv2d_NCHWc" in t.task_name or "pool" in t.task_name]
    assert len(heavy) >= 12
    missing = [t.task_name for t in heavy if library.find(t.dispatched[0]) is None]
    assert not missing, missing


def test_the_avx2_library_holds_a_real_avx2_cpus_schedules_for_torchvisions_squeezenet_11(tmp_path) -> None:
    """The AVX2 library was built on a Zen 4 with code for Haswell (a stand-in) from the zoo's lookalikes only: on a real
    AVX2 CPU (an AMD EPYC Zen 3, LLVM's znver3) torchvision's SqueezeNet 1.1 as torch.onnx.export writes it found 3 of its
    29 workloads and ran the rest from adapted schedules. Its 6 heaviest tasks now hold that CPU's own schedules,
    tried first on a znver3 target, and the zoo says which export they came from."""
    import torch

    import torch_models
    from edgetune.schedules.use import shipped_libraries

    torch_models.require_torch()
    library = load_library(next(p for p in shipped_libraries() if p.name.startswith("x86-64-avx2")))
    assert any(z.startswith("squeezenet1_1-224-onnx-torchscript.onnx via torch.onnx.export") and "6 heaviest" in z
               for z in library.header["zoo"]), library.header["zoo"]
    path = tmp_path / "squeezenet1_1.onnx"
    torch.onnx.export(torch_models.squeezenet1_1(), (torch.randn(1, 3, 224, 224),), str(path), dynamo=False,
                      opset_version=17, input_names=["input"], output_names=["logits"])
    zen3 = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    _extracted, heaviest = _tasks_and_heaviest(path, zen3)
    haswell = tvm.target.Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    for task in heaviest:
        workload = library.find(task.dispatched[0])
        assert workload is not None, task.task_name
        assert workload.schedules_for(zen3)[0].mcpu == "znver3", task.task_name
        # another CPU model also gets them (its own first where it has any)
        assert workload.schedules_for(haswell), task.task_name


def test_the_avx2_librarys_depthwise_workloads_hold_depthwise_space_schedules_that_other_epilogues_start_from() -> None:
    """The AVX2 library's depthwise entries were built before the depthwise space, as ``MultiLevelTiling`` traces,
    which carry into no depthwise task of another epilogue: MnasNet's (ReLU where the library's MobileNets have ReLU6)
    all measured their untuned loops first on a Zen 3. Its zoo's depthwise workloads were built again in the depthwise
    space on that CPU (``schedules build --operator depthwise_conv2d_NCHWc``): those schedules are tried first there,
    and a ReLU depthwise task at a shape the library lacks starts from one, its lanes whole and innermost."""
    from test_depthwise_space import _lanes_whole_and_vectorized, depthwise_workload

    from edgetune.search.depthwise_space import depthwise_space, is_depthwise_nchwc_workload
    from edgetune.tasks import load_model, prepare_for_tuning
    from edgetune.tasks.graph import prepare_graph

    zen3 = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    library = choose_library("auto", zen3).library
    assert library is not None and library.family == "x86-64-avx2"
    prepared = prepare_graph(load_model("demo:mobilenetv2@224"), "auto", "full", zen3)
    tasks = [t for t in ms.relax_integration.extract_tasks(prepare_for_tuning(prepared.mod, zen3), zen3)
             if is_depthwise_nchwc_workload(t.dispatched[0])]
    assert len(tasks) >= 10
    for task in tasks:
        workload = library.find(task.dispatched[0])
        assert workload is not None, task.task_name
        first = workload.schedules_for(zen3)[0]
        trace = workload.trace(first)
        tiles = [len(trace.get_decision(inst)) for inst in trace.insts
                 if inst.kind.name == "SamplePerfectTile" and trace.get_decision(inst) is not None]
        assert first.mcpu == "znver3" and tiles == [2, 2, 2], (task.task_name, tiles)  # the depthwise space's splits

    task = depthwise_workload(chunks=5, size=21)  # ReLU, a shape no zoo model has
    assert library.find(task) is None
    context = ms.TuneContext(mod=task, target=zen3, space_generator=depthwise_space(), search_strategy="replay-trace",
                             rand_state=1, num_threads=1)
    [candidate] = transferred_library_candidates(context, library, zen3, 1)
    assert _lanes_whole_and_vectorized(candidate.sch)


def test_info_counts_the_ports_of_a_loopback_board_instead_of_listing_them() -> None:
    """A build's loopback RPC server gets a new port per run: info said 39 of them one by one."""
    from edgetune.schedules.library import _boards_in_brief

    boards = {"local", "rk3399-a@10.0.0.7:9090", "local@127.0.0.1:33751", "local@127.0.0.1:35001"}
    assert _boards_in_brief(boards) == ["local", "rk3399-a@10.0.0.7:9090", "local@127.0.0.1 (2 ports)"]
    assert _boards_in_brief({"local@127.0.0.1:1"}) == ["local@127.0.0.1"]


def _library_at_gflops(source: Path, out: Path, scale: float) -> Path:
    """``source`` with every schedule's recorded GFLOPS times ``scale``: its operator classes reach more (or less)."""
    library = load_library(source)
    for workload in library.workloads:
        for schedule in workload.schedules:
            schedule.gflops = schedule.gflops * scale if schedule.gflops else schedule.gflops
    return write_library(out, library.header, library.workloads)


@pytest.mark.parametrize("scale", [1e4, 1e-4], ids=["far-below-its-class", "close-to-its-class"])
def test_a_task_far_below_its_class_is_searched_first_whatever_its_per_task_budget(
    library_file, tmp_path, loopback_board, monkeypatch, scale
) -> None:
    """An adapted schedule is a first candidate, not a verdict (tuning/lagging.py): torchvision's SqueezeNet 1.1 kept a
    classifier schedule adapted from another shape at 30 GFLOPS (half the model) where its class ran at 100-200, and at
    two trials per task nothing searched it. A task far below its class gets the kept search trials over its per-task
    cap; one close to its class keeps the budget it had."""
    import edgetune.tuning.lagging as lagging
    from edgetune.tuning import TuningPipeline, TuneOptions

    monkeypatch.setattr(lagging, "MIN_CLASS_WORKLOADS", 1)  # the small library holds one or two convs per class
    path, _db, _profile = library_file
    scaled = _library_at_gflops(path, tmp_path / "scaled.schedules.gz", scale)
    profile = host_profile(loopback_board, schedules=str(scaled), max_trials_per_task=2, lagging_trials=4,
                           lagging_share=0.05)
    model = "demo:tiny-cnn@40"  # the library holds the 32x32 CNN: its convolutions start from adapted schedules
    probe = TuningPipeline(TuneOptions(profile=profile, model=model, out_dir=tmp_path))
    extracted = probe.extract_tasks(profile.tvm_target(), probe.check_inputs()[1])
    summary = tune(profile, loopback_board, tmp_path / "run", model=model, trials=3 * len(extracted), evaluate=False)
    searched_first = summary.schedules["searched_first"]
    by_name = {t.name: t for t in summary.tasks}
    if scale > 1:
        assert searched_first, summary.library_lines()
        model_us = sum(t.weight * t.best_latency_us for t in summary.tasks if t.best_latency_us)
        for entry in searched_first:
            task = by_name[entry["name"]]
            assert task.transferred_latency_us is not None or task.library_latency_us is not None
            assert entry["gflops"] < 0.5 * entry["class_gflops"] and entry["reserved"] == 4
            # its inherited schedule (and its untuned default, at three trials per task), then the kept search
            # trials, past the per-task cap of 2
            before = 1 + (task.default_latency_us is not None)
            assert task.trials_this_run == before + entry["reserved"] > 2, task
            assert entry["share"] >= 0.05 and task.weight * task.best_latency_us <= model_us
        assert any(line.startswith("searched first") for line in summary.library_lines())
    else:
        assert searched_first == []
        assert all(t.trials_this_run <= 2 for t in summary.tasks)


@pytest.mark.parametrize("recheck, second_slower", [(1.5, False), (1.5, True), (0.0, False)],
                         ids=["recheck-on", "recheck-on-second-slower", "recheck-off"])
def test_a_library_schedule_first_measured_far_slower_than_its_record_is_measured_again(
    library_file, tmp_path, loopback_board, monkeypatch, recheck, second_slower
) -> None:
    """At one trial per task the library schedule's one measurement decides what a user gets. SqueezeNet 1.0's largest
    layer once measured 1,961 us against its record of 1,029 (1,023 in the next tune). Here the first measurement of
    the heaviest task comes back 10x slow: the recheck measures it again and delivers the second time; without it
    (``tuning.library_recheck = 0``) the slow time stands. A second time slower still (a busy host) does not replace
    the first: the faster of the two is kept."""
    import edgetune.tuning.library_phase as library_phase
    from edgetune.tuning import TuningPipeline, TuneOptions

    path, _db, _profile = library_file
    profile = host_profile(loopback_board, schedules=str(path), library_recheck=recheck)
    real_measure = library_phase.measure_candidates
    slowed: dict[int, float] = {}

    def first_measurement_slow(contexts, by_task, builder, runner):
        measured = real_measure(contexts, by_task, builder, runner)
        if not slowed:
            ok = [i for i, (_c, _b, ran) in measured.items() if ran.error_msg is None]
            index = max(ok, key=lambda i: float(np.mean([float(x) for x in measured[i][2].run_secs])))
            candidate, built, ran = measured[index]
            secs = [10 * float(x) for x in ran.run_secs]
            measured[index] = (candidate, built, ms.runner.RunnerResult(run_secs=secs, error_msg=None))
            slowed[index] = float(np.mean(secs)) * 1e6
        return measured

    monkeypatch.setattr(library_phase, "measure_candidates", first_measurement_slow)
    if second_slower:
        real_together = library_phase.measure_together

        def measured_slower_again(ctx, candidates, builder, runner):
            # 1000x: a second time slower than the 10x-slowed first whatever the load (at 30x, a first real time
            # 3.4x the second under CI load once made the second the faster)
            return [None if secs is None else [1000 * float(x) for x in secs]
                    for secs in real_together(ctx, candidates, builder, runner)]

        monkeypatch.setattr(library_phase, "measure_together", measured_slower_again)
    probe = TuningPipeline(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path))
    n_tasks = len(probe.extract_tasks(profile.tvm_target(), probe.check_inputs()[1]))
    summary = tune(profile, loopback_board, tmp_path / "run", trials=n_tasks, evaluate=False)
    [(index, slow_us)] = slowed.items()
    task = summary.tasks[index]
    assert task.library_latency_us is not None
    assert summary.trials.this_run == n_tasks and all(t.trials_this_run <= 1 for t in summary.tasks)  # not trials
    rechecked = summary.schedules["rechecked"]
    if recheck and second_slower:
        # measured again, ~100x slower than the slowed first time: the first stands
        [entry] = [e for e in rechecked if e["name"] == task.name]
        assert entry["first_us"] == pytest.approx(slow_us)
        assert entry["again_us"] == pytest.approx(slow_us)
        assert task.best_latency_us == pytest.approx(slow_us)
    elif recheck:
        # the slowed task is measured again (a tiny kernel's noise under load may add others, and may make the
        # second time as slow: the history keeps the faster)
        [entry] = [e for e in rechecked if e["name"] == task.name]
        assert entry["first_us"] == pytest.approx(slow_us) and entry["again_us"] is not None
        assert entry["again_us"] < slow_us
        # what the model gets is the second measurement, and the library's schedule is credited with it (the task
        # measured one library schedule: trials_this_run is 1)
        assert task.best_latency_us == pytest.approx(entry["again_us"])
        assert task.library_latency_us == pytest.approx(entry["again_us"])
        assert any(line.startswith("measured again, far slower than the library's record") for line in summary.library_lines())
    else:
        assert rechecked == []
        assert task.best_latency_us == pytest.approx(slow_us)


def _hard_swish_cnn(path: Path, res: int) -> str:
    """demo:tiny-cnn with hard-swish where it has ReLU: the same convolutions, an epilogue the tiny library lacks."""
    from edgetune.tasks.demo import _GraphBuilder

    g = _GraphBuilder(11)
    x = g.hard_swish(g.conv("input", 3, 16, 3))
    x = g.hard_swish(g.conv(x, 16, 32, 3, stride=2))
    path.write_bytes(g.model("hard_swish_cnn", "input", res, g.classifier(x, 32, 10), 10).SerializeToString())
    return str(path)


def test_a_convolution_with_an_epilogue_the_library_lacks_starts_from_its_schedules_of_another(
    library_file, tmp_path, loopback_board
) -> None:
    """torchvision's MobileNetV3 (hard-swish) and the dynamo exporter's MobileNetV2 (no bias, clip as max/min) found
    no workload of their convolutions' signature in the library: 23 and 20 of their convolutions measured their untuned
    loops at 2 GFLOPS and at two trials per task kept them (14x and 21x ONNX Runtime). The library's convolutions with
    ReLU now give them their first candidates: their decisions, in the task's own design space."""
    from edgetune.tasks.signature import anchor_signature, operator_signature
    from edgetune.tuning import TuningPipeline, TuneOptions

    path, _db, _profile = library_file
    library = load_library(path)
    profile = host_profile(loopback_board, schedules=str(path))
    model = _hard_swish_cnn(tmp_path / "hs.onnx", 32)
    probe = TuningPipeline(TuneOptions(profile=profile, model=model, out_dir=tmp_path))
    extracted = probe.extract_tasks(profile.tvm_target(), probe.check_inputs()[1])
    convs = {t.task_name for t in extracted if "conv2d" in t.task_name}
    assert len(convs) == 2
    for task in extracted:
        if task.task_name in convs:  # no workload of its signature, but the same operator with ReLU
            signature = operator_signature(task.dispatched[0])
            assert not library.nearest_workloads(task.dispatched[0], signature)
            assert any(anchor_signature(w.signature) == anchor_signature(signature) for w in library.workloads)
    summary = tune(profile, loopback_board, tmp_path / "run", model=model, trials=len(extracted))
    for task in summary.tasks:
        if task.name in convs:  # delivered: the carried schedule, its untuned default never measured
            assert task.transferred_latency_us is not None and task.default_latency_us is None, task
            assert task.best_latency_us == pytest.approx(task.transferred_latency_us)
    assert summary.end_to_end.outputs_match  # the carried schedules compute hard-swish, not ReLU


def test_a_task_left_at_its_untuned_default_far_below_its_class_is_searched_first(
    library_file, tmp_path, loopback_board, monkeypatch
) -> None:
    """A task with nothing in the library to start from measures its untuned loops: two trials per task may never
    search it. Judged against its class like an inherited schedule, it gets the kept trials."""
    import edgetune.tuning.lagging as lagging

    monkeypatch.setattr(lagging, "MIN_CLASS_WORKLOADS", 1)  # the small library holds one or two convs per class
    path, _db, _profile = library_file
    scaled = _library_at_gflops(path, tmp_path / "scaled.schedules.gz", 1e4)
    profile = host_profile(loopback_board, schedules=str(scaled), max_trials_per_task=1, lagging_trials=3,
                           lagging_share=0.05, transfer="off")
    model = _hard_swish_cnn(tmp_path / "hs.onnx", 40)  # neither its shapes nor its epilogue are in the library
    summary = tune(profile, loopback_board, tmp_path / "run", model=model, trials=40, evaluate=False)
    searched_first = summary.schedules["searched_first"]
    assert searched_first, summary.library_lines()
    by_name = {t.name: t for t in summary.tasks}
    for entry in searched_first:
        task = by_name[entry["name"]]
        assert "conv2d" in task.name and task.transferred_latency_us is None and task.default_latency_us is not None
        assert task.trials_this_run == 1 + entry["reserved"] > 1, task  # its default, then the kept trials


def test_a_memory_bound_task_the_library_lacks_measures_a_transferred_schedule_beside_its_default(
    library_file, tmp_path, loopback_board
) -> None:
    """DenseNet-121's concatenations with their pre-activation batch norm and ReLU (memory-bound, no library workload)
    each measured their untuned loops (one thread, no vectors, 1 GFLOPS) as their one trial: 31 of them, 21 of the
    model's 47 ms, at two trials per task. With room for two trials, a memory-bound task the library lacks measures
    the library's schedule of its operator beside its default, and the faster is delivered; with one, only the
    default (a channel shuffle ran 5x faster unscheduled)."""

    path, _db, _profile = library_file
    library = load_library(path)
    profile = host_profile(loopback_board, schedules=str(path))
    model = "demo:tiny-cnn@40"
    extracted, lacking = _tasks_the_library_lacks(library, profile, model, tmp_path)
    roomy = tune(profile, loopback_board, tmp_path / "roomy", model=model, trials=2 * len(extracted), evaluate=False)
    classes = roomy.kernel_classes()
    memory = [t for t in roomy.tasks if classes.get(t.name, "").startswith("memory") and t.name in lacking]
    carried = [t for t in memory if t.transferred_latency_us is not None]
    assert carried, [(t.name, t.transferred_latency_us, t.default_latency_us) for t in memory]
    for task in carried:  # its default measured too; the faster delivered
        assert task.default_latency_us is not None, task
        assert task.best_latency_us <= min(task.transferred_latency_us, task.default_latency_us) * 1.0001
    # with one trial per task, only the default: test_a_task_the_library_lacks_starts_from_its_nearest_shape_...


def test_info_counts_a_reduction_by_its_operator_not_by_the_variable_it_came_from() -> None:
    """Relax names a mean's sum after its input (``lv180_red``): ``info`` listed 56 one-off "operators" of them."""
    from edgetune.schedules.library import _operator

    assert _operator(["lv180_red", "T_divide"]) == _operator(["lv33_red"]) == "red"
    assert _operator(["data_pad", "conv2d_NCHWc"]) == "conv2d_NCHWc"
