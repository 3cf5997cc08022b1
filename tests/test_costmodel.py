"""MetaTune (edgetune.costmodel): graph encoding, MAML, model files, the CLI and tuning with --cost-model meta."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from conftest import REPO, SESSION_KEY, run_cli
from edgetune.costmodel import graph
from edgetune.costmodel.modelfile import FORMAT_VERSION, ModelFile, bundled_model
from edgetune.errors import CostModelError

torch = pytest.importorskip("torch", reason="the meta cost model needs edgetune[meta]")


def matmul_relu(n: int = 4):
    """``D = relu(A @ B)``: a reduction block (with its init store) and an elementwise epilogue."""
    import tvm
    from tvm import te

    a, b = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    d = te.compute((n, n), lambda i, j: te.max(c[i, j], 0.0), name="D")
    return tvm.IRModule({"main": te.create_prim_func([a, b, d])})


def test_graph_of_matmul_with_epilogue_has_the_papers_nodes_and_edges():
    func = matmul_relu(4)["main"]
    # PerStoreFeature's rows, one per stored buffer in program order: recognisable values
    features = np.stack([np.full(graph.STORE_FEATURES, 1.0), np.full(graph.STORE_FEATURES, 2.0)])
    g = graph.encode(func, features)
    assert (g.num_for, g.num_interval) == (5, 2)  # i, j, k of C; i, j of D; stores to C (init + update) and D
    # root-for: 5, nesting: i-j, j-k, i-j: 3, interval-innermost loop: 2
    assert g.num_edges == 10
    assert g.nodes.shape == (graph.NUM_NODES, graph.NODE_FEATURES)
    assert g.mask.sum() == 1 + 5 + 2
    assert g.nodes[0, 0] == 1 and g.nodes[graph.FOR_SLOT:graph.FOR_SLOT + 5, 1].all()
    first, second = graph.INTERVAL_SLOT, graph.INTERVAL_SLOT + 1
    assert g.nodes[first, 2] == 1 and g.nodes[second, 2] == 1
    assert (g.nodes[first, graph.STORE_OFFSET:] == 1.0).all() and (g.nodes[second, graph.STORE_OFFSET:] == 2.0).all()
    assert (g.nodes[first, :graph.STORE_OFFSET] == [0, 0, 1] + [0] * graph.FOR_FEATURES).all()  # no loop features
    # C's store hangs from k (the third loop), D's from the second loop of its own nest
    assert g.adjacency[first, graph.FOR_SLOT + 2] == 1 and g.adjacency[second, graph.FOR_SLOT + 4] == 1
    assert g.nodes[graph.FOR_SLOT, graph.FOR_OFFSET] == pytest.approx(math.log2(5))  # extent 4
    assert g.nodes[graph.FOR_SLOT + 2, graph.FOR_OFFSET + 7] == 1  # k is innermost
    assert g.nodes[graph.FOR_SLOT, graph.FOR_OFFSET + 7] == 0
    assert not g.mask[graph.FOR_SLOT + 5:graph.INTERVAL_SLOT].any()  # padding of the template


def test_scheduled_loops_carry_their_kind_and_pad_to_one_template():
    import tvm

    sch = tvm.s_tir.Schedule(matmul_relu(16))
    i, j = sch.get_loops(sch.get_sblock("D"))
    _, inner = sch.split(j, factors=[None, 4])
    sch.vectorize(inner)
    sch.parallel(i)
    scheduled = graph.encode(sch.mod["main"], np.zeros((2, graph.STORE_FEATURES)))
    plain = graph.encode(matmul_relu(16)["main"], np.zeros((2, graph.STORE_FEATURES)))
    assert scheduled.nodes.shape == plain.nodes.shape and scheduled.num_for == plain.num_for + 1
    kinds = scheduled.nodes[graph.FOR_SLOT:graph.FOR_SLOT + scheduled.num_for, graph.FOR_OFFSET + 1:graph.FOR_OFFSET + 6]
    assert kinds[3].argmax() == 1 and kinds[5].argmax() == 2  # D's i parallel, its split inner loop vectorized
    nodes, adjacency, mask = graph.stack([scheduled, plain])
    assert nodes.shape == (2, graph.NUM_NODES, graph.NODE_FEATURES)
    assert np.allclose(adjacency, adjacency.transpose(0, 2, 1)) and (adjacency[mask == 0] == 0).all()


def _linear_tasks(rng: np.random.Generator, count: int, shots: int, query: int, w0: np.ndarray):
    """Regression tasks alike in structure: y = (w0 + small task offset) . z."""
    for _ in range(count):
        w = w0 + 0.1 * rng.normal(size=w0.shape)
        z = torch.tensor(rng.normal(size=(shots + query, len(w0))), dtype=torch.float32)
        y = z @ torch.tensor(w, dtype=torch.float32)
        yield z[:shots], y[:shots], z[shots:], y[shots:]


def test_maml_start_adapts_better_than_a_random_start_after_k_shots():
    from edgetune.costmodel import net

    net.set_threads(1)
    w0 = np.random.default_rng(7).normal(size=6)
    start = net.to_torch(net.init_head(6, 16, np.random.default_rng(0)))
    random_start = net.to_torch(net.init_head(6, 16, np.random.default_rng(1)))
    losses = net.meta_train_head(start, lambda rng: _linear_tasks(rng, 8, 5, 10, w0), iterations=100,
                                 inner_steps=5, inner_lr=0.05, outer_lr=0.01, seed=0)
    assert losses[-1] < 0.5 * losses[0]

    def after_k_shots(params) -> float:
        errors = []
        for support_z, support_y, query_z, query_y in _linear_tasks(np.random.default_rng(99), 20, 5, 20, w0):
            fast = net.adapt(params, support_z, support_y, steps=5, lr=0.05)
            with torch.no_grad():
                errors.append(float(torch.mean((net.head(fast, query_z) - query_y) ** 2)))
        return float(np.mean(errors))

    meta, scratch = after_k_shots(start), after_k_shots(random_start)
    assert meta < 0.5 * scratch, (meta, scratch)


def _model_file(seed: int = 0) -> ModelFile:
    from edgetune.costmodel import net

    params = net.init_params(graph.NODE_FEATURES, 8, seed)
    return ModelFile(params, np.zeros(graph.NODE_FEATURES), np.ones(graph.NODE_FEATURES),
                     {"training": {"records": 3, "tasks": 1}, "hyperparameters": {"inner_steps": 2}})


def test_few_shot_tasks_label_support_and_query_on_one_scale():
    """Support and query are relative to the best of both: with the support's best alone, query labels went
    above 1, out of reach of a head adapted to the support, and the meta-learned start ranked no better than
    random (benchmarks/RESULTS.md, MetaTune ranking diagnostic)."""
    from edgetune.costmodel.training import MetaTrainer

    trainer = MetaTrainer(meta_batch=20, support=4, query=6)
    costs = np.array([1e-3 * (1 + i) for i in range(10)] + [1e-3 * (1 + i) for i in range(10)])
    tasks = [np.arange(10), np.arange(10, 20)]
    z = torch.arange(20, dtype=torch.float32)[:, None]
    for support_z, y_s, query_z, y_q in trainer._sample(np.random.default_rng(0), tasks, z, costs):
        labels = torch.cat([y_s, y_q])
        assert float(labels.max()) == pytest.approx(1.0) and float(labels.min()) > 0
        rows = torch.cat([support_z, query_z]).long().squeeze(1)
        best = costs[rows.numpy()].min()
        assert torch.allclose(labels, torch.as_tensor(best / costs[rows.numpy()], dtype=torch.float32))


def test_model_file_round_trip(tmp_path):
    model = _model_file()
    path = model.save(tmp_path / "m.npz")
    loaded = ModelFile.load(path)
    assert loaded.params.keys() == model.params.keys()
    for name, value in model.params.items():
        assert np.array_equal(loaded.params[name], value)
    assert loaded.info["format_version"] == FORMAT_VERSION and loaded.info["training"] == {"records": 3, "tasks": 1}
    assert np.array_equal(loaded.feature_std, model.feature_std)


def test_corrupt_and_mismatched_files_are_one_line_errors(tmp_path):
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a model")
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(_model_file().save(tmp_path / "full.npz").read_bytes()[:200])
    newer = tmp_path / "newer.npz"
    with zipfile.ZipFile(tmp_path / "full.npz") as source, zipfile.ZipFile(newer, "w") as target:
        for item in source.namelist():
            data = source.read(item)
            if item == "info.npy":
                info_array = np.load(__import__("io").BytesIO(data))
                info = json.loads(bytes(info_array).decode())
                info["format_version"] = FORMAT_VERSION + 1
                buffer = __import__("io").BytesIO()
                np.save(buffer, np.frombuffer(json.dumps(info).encode(), dtype=np.uint8))
                data = buffer.getvalue()
            target.writestr(item, data)
    for path, expected in ((garbage, "not a MetaTune model file"), (truncated, "not a MetaTune model file"),
                           (newer, f"format version {FORMAT_VERSION + 1}"), (tmp_path / "absent.npz", "cannot read")):
        with pytest.raises(CostModelError, match=expected):
            ModelFile.load(path)
    for path, expected in ((garbage, "not a MetaTune model file"), (newer, f"format version {FORMAT_VERSION + 1}")):
        result = run_cli("costmodel", "info", str(path))
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and expected in result.stderr and "Traceback" not in result.stderr


def test_cost_model_file_setting_picks_the_model(tmp_path):
    from edgetune.search import make_cost_model

    custom = _model_file(seed=3).save(tmp_path / "custom.npz")
    model = make_cost_model("meta", model_file=str(custom))
    assert model.file_.info["training"] == {"records": 3, "tasks": 1} and model.inner_steps == 2
    assert make_cost_model("meta").file_.info["training"]["records"] == bundled_model().info["training"]["records"]
    (tmp_path / "bad.npz").write_text("nonsense")
    with pytest.raises(CostModelError, match="not a MetaTune model file"):
        make_cost_model("meta", model_file=str(tmp_path / "bad.npz"))


def _tiled_candidates():
    """Distinct schedules of ``matmul_relu(16)`` (C's i and j loops split by different factors) and their context."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    candidates = []
    for fi in (1, 2, 4, 8, 16):
        for fj in (1, 2, 4, 8):
            sch = tvm.s_tir.Schedule(matmul_relu(16))
            i, j, _ = sch.get_loops(sch.get_sblock("C"))
            sch.split(i, factors=[None, fi])
            sch.split(j, factors=[None, fj])
            candidates.append(ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
    context = ms.TuneContext(mod=matmul_relu(16), target=tvm.target.Target({"kind": "llvm"}), task_name="handoff")
    return context, candidates


def test_meta_hands_ranking_over_to_the_forest_as_measurements_grow(tmp_path):
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from edgetune.costmodel.meta_model import MetaTuneModel
    from edgetune.search import make_cost_model

    context, candidates = _tiled_candidates()
    hybrid, alone = make_cost_model("meta", meta_handoff_samples=12, seed=1), make_cost_model("meta", meta_handoff_samples=0)
    assert (hybrid.handoff_samples, hybrid.forest_.seed, alone.forest_) == (12, 1, None)
    assert make_cost_model("meta").forest_ is None  # off by default
    assert [hybrid.meta_weight(n) for n in (0, 12, 36)] == [1.0, 0.5, 0.25] and alone.meta_weight(100) == 1.0
    # the first batch is ranked by MetaTune alone
    assert np.array_equal(hybrid.predict(context, candidates), alone.predict(context, candidates))
    measured, rest = candidates[:12], candidates[12:]
    results = [RunnerResult([1e-3 * (1 + (k * 7) % 5)], None) for k in range(12)]
    for model in (hybrid, alone):
        model.update(context, measured, results)
    assert hybrid.forest_.num_samples_ == 12
    meta = alone.predict(context, rest)  # the same start adapted to the same measurements
    mean, std = hybrid.forest_.predict_mean_std(context, rest)
    expected = 0.5 * meta + 0.5 * (mean + std)
    assert np.allclose(hybrid.predict(context, rest), expected) and not np.allclose(expected, meta)
    start = tmp_path / "start.npz"
    hybrid.save(str(start))
    hybrid.load(str(start))  # a new start: what was fitted to the old one's measurements goes
    assert hybrid.tasks_ == {} and hybrid.forest_.num_samples_ == 0
    with pytest.raises(ValueError, match="handoff_samples must be >= 0, got -1 instead"):
        MetaTuneModel(handoff_samples=-1)


def test_missing_torch_is_a_one_line_error_naming_the_extra():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from edgetune.costmodel.meta_model import require_torch\n"
            "from edgetune.errors import CostModelError\n"
            "try:\n    require_torch()\nexcept CostModelError as e:\n    print(e)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert "pip install 'edgetune[meta]'" in result.stdout, result.stderr


def test_bundled_model_loads_and_is_small():
    model = bundled_model()
    assert model.info["training"]["records"] > 0 and model.num_parameters > 0
    assert (REPO / "edgetune" / "costmodel" / "data" / "metatune.npz").stat().st_size < 1_000_000


@pytest.fixture(scope="module")
def meta_run(tmp_path_factory, loopback_board):
    """A short tune of the demo CNN with the MetaTune cost model: its history is the CLI tests' database."""
    out = tmp_path_factory.mktemp("meta") / "run"
    result = run_cli("tune", "--profile", "host", "--model", "demo:tiny-cnn", "--trials", "12", "--out", str(out),
                     "--no-evaluate", "--cost-model", "meta", "--tracker", f"{loopback_board.host}:{loopback_board.port}",
                     "--key", SESSION_KEY)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


@pytest.mark.integration
def test_tune_with_the_meta_cost_model(meta_run):
    summary = json.loads((meta_run / "summary.json").read_text())
    assert summary["search"]["cost_model"] == "meta"
    assert summary["trials"]["this_run"] >= 8
    assert any(task["best_latency_us"] for task in summary["tasks"]), summary["tasks"]


@pytest.mark.integration
def test_costmodel_cli_pretrains_from_a_real_history(meta_run, tmp_path):
    out = tmp_path / "from-run.npz"
    result = run_cli("costmodel", "pretrain", "--db", str(meta_run / "history.db"), "--out", str(out),
                     "--epochs", "3", "--iterations", "5")
    assert result.returncode == 0, result.stderr[-3000:]
    info = run_cli("costmodel", "info", str(out))
    assert info.returncode == 0, info.stderr
    assert f"format version {FORMAT_VERSION}" in info.stdout and "history: sqlite:///" in info.stdout
    model = ModelFile.load(out)
    assert model.info["training"]["records"] >= 8 and model.info["training"]["tasks"] >= 1
    assert model.info["hyperparameters"]["epochs"] == 3
    missing = run_cli("costmodel", "pretrain", "--db", str(tmp_path / "none.db"), "--out", str(tmp_path / "x.npz"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.integration
def test_warm_start_adapts_the_meta_model_to_the_history(meta_run):
    """The pipeline's warm start feeds history records to MetaTuneModel.update: each task gets its adapted head."""
    import tvm
    from tvm.s_tir.meta_schedule import TuneContext

    from edgetune.builder.intrinsics import load_tensor_intrinsics
    from edgetune.costmodel.meta_model import MetaTuneModel
    from edgetune.history import open_history
    from edgetune.costmodel.warmstart import warm_start

    history = open_history(str(meta_run / "history.db"), read_only=True)
    try:
        target = tvm.target.Target(json.loads(history.bulk.record_groups()[0].target_json))
        load_tensor_intrinsics(target)
        records = history.successful_records(target)
        mods = list({r.workload.mod.script(): r.workload.mod for r, _ in records}.values())
        model = MetaTuneModel()
        report = warm_start(model, mods, history, target, board_id=SESSION_KEY)
        assert report.same_task == len(records) > 0 and model.num_samples_ == report.total
        assert all(task.head is not None for task in model.tasks_.values()) and len(model.tasks_) == len(mods)
        record = records[0][0]
        context = TuneContext(mod=record.workload.mod, target=target, task_name="check")
        adapted = model.predict(context, [record.as_measure_candidate()])
        start = MetaTuneModel().predict(context, [record.as_measure_candidate()])
        assert adapted.shape == (1,) and np.isfinite(adapted).all() and adapted[0] != start[0]
    finally:
        history.close()


def test_pretraining_never_ranks_a_flushed_time_against_a_warm_one(tmp_path):
    """One workload timed both ways is two training tasks: relative throughput is taken on one scale only."""
    from edgetune.costmodel.training import load_corpus
    from edgetune.history import open_history
    from test_history import MOD, _record

    url = f"sqlite:///{tmp_path / 'both.db'}"
    for timing, secs in (("warm", (1e-4, 2e-4)), ("flushed", (9e-4, 6e-4))):
        db = open_history(url, board_id="b", timing=timing)
        try:
            workload = db.commit_workload(MOD)
            for factor, sec in zip((4, 8), secs):
                db.commit_measurement(_record(workload, factor, [sec]))
        finally:
            db.close()
    corpus = load_corpus([url])
    assert corpus.tasks == 2 and len(corpus.graphs) == 4
    by_task: dict[int, list[float]] = {}
    for task, cost in zip(corpus.group, corpus.costs):
        by_task.setdefault(task, []).append(cost)
    assert sorted(sorted(costs) for costs in by_task.values()) == [[1e-4, 2e-4], [6e-4, 9e-4]]
