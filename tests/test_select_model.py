"""Model selection on dev (pipeline.training.select_model): WiSE-FT interpolation between the start and the
trained model, the choice (ties to the start), and the stage end to end on tiny models."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from stage_args import flags

from pipeline.core.config import ConfigError
from pipeline.core.schemas import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, RUN_SCHEMA
from pipeline.core.storage import DataError, write_table
from pipeline.retrieval.embeddings import rowwise_dot
from pipeline.retrieval.encode import encode_buffer
from pipeline.retrieval.model import Retriever
from pipeline.training import select_model
from pipeline.training.data import PassageStore
from pipeline.training.select_model import (
    SELECTION_FILE,
    DevCandidates,
    choose,
    interpolate,
    rescore,
)

# ---- interpolate: hand-computed values ------------------------------------------------------------


def test_interpolation_is_the_weighted_sum_of_the_two_models():
    start = {"w": torch.tensor([1.0, 2.0, -4.0]), "b": torch.tensor([0.0])}
    trained = {"w": torch.tensor([3.0, 6.0, 4.0]), "b": torch.tensor([8.0])}
    mixed = interpolate(start, trained, 0.25)
    # 0.75 * start + 0.25 * trained
    assert mixed["w"].tolist() == [1.5, 3.0, -2.0] and mixed["b"].tolist() == [2.0]
    assert interpolate(start, trained, 0.5)["w"].tolist() == [2.0, 4.0, 0.0]


def test_the_ends_are_the_two_models_exactly():
    gen = torch.Generator().manual_seed(0)
    start = {
        "w": torch.randn(50, generator=gen) * 1e3,
        "h": torch.randn(7, dtype=torch.float64, generator=gen),
    }
    trained = {
        "w": torch.randn(50, generator=gen) * 1e-3,
        "h": torch.randn(7, dtype=torch.float64, generator=gen),
    }
    for alpha, expected in ((0.0, start), (1.0, trained)):
        got = interpolate(start, trained, alpha)
        assert all(torch.equal(got[k], expected[k]) and got[k].dtype == expected[k].dtype for k in start)


def test_a_half_precision_tensor_is_mixed_in_fp32_and_keeps_its_dtype():
    # bf16 holds 8 bits of mantissa: 256 and 257 are not both representable, 256 + 2 is.
    start = {"w": torch.tensor([256.0, 1.0], dtype=torch.bfloat16)}
    trained = {"w": torch.tensor([258.0, 2.0], dtype=torch.bfloat16)}
    got = interpolate(start, trained, 0.5)["w"]
    assert got.dtype == torch.bfloat16
    # fp32: (128 + 129, 0.5 + 1) = (257, 1.5), then rounded once to bf16 (257 -> 256, ties to even)
    assert got.tolist() == [256.0, 1.5]


def test_integer_buffers_are_taken_as_they_are_and_must_be_equal():
    start = {"ids": torch.arange(4), "w": torch.zeros(2)}
    got = interpolate(start, {"ids": torch.arange(4), "w": torch.ones(2)}, 0.5)
    assert got["ids"].dtype == torch.int64 and got["ids"].tolist() == [0, 1, 2, 3]
    with pytest.raises(DataError, match=r"integer buffer 'ids' differs") as err:
        interpolate(start, {"ids": torch.arange(1, 5), "w": torch.ones(2)}, 0.5)
    assert err.value.field == "ids"


@pytest.mark.parametrize(
    "trained,message",
    [
        ({"a": torch.zeros(2), "c": torch.zeros(2)}, r"tensor 'b' is in the start model only"),
        (
            {"a": torch.zeros(2), "b": torch.zeros(2), "c": torch.zeros(1)},
            r"tensor 'c' is in the trained model only",
        ),
        (
            {"a": torch.zeros(2), "b": torch.zeros(3)},
            r"tensor 'b' is float32 \[2\] in the start model, float32 \[3\]",
        ),
        (
            {"a": torch.zeros(2), "b": torch.zeros(2, dtype=torch.float16)},
            r"tensor 'b' is float32 \[2\] .* float16",
        ),
    ],
)
def test_tensors_the_models_do_not_share_are_one_line_naming_the_tensor(trained, message):
    start = {"a": torch.zeros(2), "b": torch.zeros(2)}
    with pytest.raises(DataError, match=message) as err:
        interpolate(start, trained, 0.5)
    assert "\n" not in str(err.value)


def test_alpha_outside_the_unit_interval_is_refused():
    with pytest.raises(ValueError, match="alpha"):
        interpolate({"w": torch.zeros(1)}, {"w": torch.ones(1)}, 1.5)


# ---- choose: max, ties to the smallest alpha -------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rowwise_dot_is_each_pair_s_dot_product_whatever_the_chunk(dtype):
    rng = np.random.default_rng(0)
    queries, passages = (
        rng.standard_normal((5, 8), dtype=np.float32),
        rng.standard_normal((9, 8), dtype=np.float32),
    )
    query_row, passage_row = rng.integers(0, 5, 23), rng.integers(0, 9, 23)
    expected = np.array(
        [np.dot(queries[q].astype(dtype), passages[p].astype(dtype)) for q, p in zip(query_row, passage_row)]
    )
    whole = rowwise_dot(queries, query_row, passages, passage_row, dtype=dtype)
    assert whole.dtype == dtype
    np.testing.assert_allclose(whole, expected, rtol=1e-6)
    # Chunks that do not divide the rows (the last one short) and single rows give every pair the same value.
    for chunk in (1, 4, 7, 23, 100):
        np.testing.assert_array_equal(
            rowwise_dot(queries, query_row, passages, passage_row, dtype, chunk), whole
        )
    assert rowwise_dot(queries, query_row[:0], passages, passage_row[:0]).shape == (0,)


def test_choose_takes_the_best_metric():
    assert choose({0.0: 0.40, 0.25: 0.45, 0.5: 0.52, 0.75: 0.50, 1.0: 0.30}) == 0.5


def test_choose_breaks_ties_towards_the_start():
    assert choose({0.0: 0.5, 0.5: 0.6, 1.0: 0.6}) == 0.5
    assert choose({0.0: 0.7, 0.25: 0.7, 1.0: 0.7}) == 0.0
    # the dict's order is not the rule: the smallest alpha wins whatever order the scores come in
    assert choose({1.0: 0.6, 0.75: 0.6, 0.0: 0.1}) == 0.75


def test_the_settings_keep_both_ends_and_stay_in_the_unit_interval():
    from pipeline.core.settings.job_documents import SelectModelJob
    from pipeline.core.settings.validation import from_dict

    assert from_dict(SelectModelJob, {}, "settings").alphas == [0.0, 0.25, 0.5, 0.75, 1.0]
    for alphas, message in (
        ([0.5, 1], "must include 0"),
        ([0, 0.5], "must include 1"),
        ([0, 1.2, 1], "less than"),
    ):
        with pytest.raises(ConfigError, match=message):
            from_dict(SelectModelJob, {"alphas": alphas}, "settings")
    with pytest.raises(ConfigError, match="listed twice"):
        from_dict(SelectModelJob, {"alphas": [0, 1, 1]}, "settings")


# ---- the stage on tiny models ------------------------------------------------------------------------

N_QUERIES, N_PASSAGES, DEPTH = 8, 30, 10
WORDS = "river stone market winter garden engine bridge violin harbor forest lantern copper meadow".split()


@pytest.fixture(scope="module")
def world(tmp_path_factory, make_retriever):
    """Two tiny retrievers of one architecture (start, trained), dev queries, a corpus and a candidates
    run of DEPTH passages per query, plus 5 passages per query below DEPTH that must not be scored."""
    root = tmp_path_factory.mktemp("select")
    rng = np.random.default_rng(0)
    paths = {name: root / f"{name}.parquet" for name in ("corpus", "queries", "candidates")}
    pids = [f"p{i:02d}" for i in range(N_PASSAGES)]
    corpus = pd.DataFrame(
        {
            "pid": pids,
            "title": [f"t{i}" for i in range(N_PASSAGES)],
            "text": [" ".join(rng.choice(WORDS, 6)) for _ in pids],
        }
    )
    write_table(paths["corpus"], corpus, CORPUS_SCHEMA)
    qids = [f"q{i}" for i in range(N_QUERIES)]
    queries = pd.DataFrame(
        {"qid": qids, "text": [" ".join(rng.choice(WORDS, 3)) for _ in qids], "answers": [[]] * N_QUERIES}
    )
    write_table(paths["queries"], queries, QUERIES_SCHEMA)
    rows = []
    for qid in qids:
        for rank, pid in enumerate(rng.permutation(pids)[: DEPTH + 5], start=1):
            rows.append((qid, pid, rank, float(100 - rank)))
    write_table(paths["candidates"], pd.DataFrame(rows, columns=RUN_SCHEMA.names), RUN_SCHEMA)
    start = make_retriever(root / "start", seed=0)
    trained = make_retriever(root / "trained", seed=1)
    return root, paths, start, trained


def _scored(folder_or_model, paths, state=None) -> pd.DataFrame:
    """The dev candidates re-ranked by a retriever folder (or a model with ``state`` loaded)."""
    model = Retriever.load(folder_or_model) if not isinstance(folder_or_model, Retriever) else folder_or_model
    if state is not None:
        model.load_state_dict(state)
    run = select_model.top_candidates(
        pd.read_parquet(paths["candidates"]).sort_values(["qid", "rank"]), DEPTH
    )
    texts = select_model.load_texts(paths["queries"], list(run["qid"].unique()))
    store = PassageStore.from_corpus(paths["corpus"], np.array(sorted(set(run["pid"])), dtype=object))
    dev = DevCandidates.tokenize(model, run, texts, store)
    return rescore(model, dev, batch_size=4, device=torch.device("cpu"), amp=True)


def _qrels_from_top(run: pd.DataFrame, path) -> None:
    """Labels that a given model's first passage is the relevant one for every query (hit@1 = 1 for it)."""
    top = run[run["rank"] == 1]
    write_table(path, top.assign(relevance=1)[["qid", "pid", "relevance"]], QRELS_SCHEMA)


def _run_stage(root, paths, start, trained, qrels, out, *extra) -> dict:
    argv = flags(paths, "queries", "corpus", "candidates", start=start, trained=trained, qrels=qrels, out=out)
    assert (
        select_model.main([*argv, "--depth", str(DEPTH), "--batch-size", "4", "--device", "cpu", *extra]) == 0
    )
    return json.loads((out / SELECTION_FILE).read_text())


def test_alpha_0_scores_as_the_start_model_and_alpha_1_as_the_trained_one(world):
    _root, paths, start, trained = world
    start_state = Retriever.load(start).state_dict()
    trained_state = Retriever.load(trained).state_dict()
    model = Retriever.load(trained)
    for alpha, folder in ((0.0, start), (1.0, trained)):
        mixed = _scored(model, paths, interpolate(start_state, trained_state, alpha))
        pd.testing.assert_frame_equal(mixed, _scored(folder, paths), check_exact=True)
    # and the two models do rank differently, so the comparison above can tell them apart
    assert not _scored(start, paths)["pid"].equals(_scored(trained, paths)["pid"])


def test_a_candidate_scores_with_the_corpus_encoding_s_embeddings(world, monkeypatch):
    """Scored as pipeline.retrieval.encode computes the test corpus (encode.amp's autocast: bf16 on a CPU
    with native bf16, forced here), so the model chosen on dev is measured as the evaluation will see it;
    a pair's score is its two embeddings' dot."""
    monkeypatch.setenv("SIEVE_CPU_BF16", "1")
    _root, paths, start, _trained = world
    model = Retriever.load(start)
    run = _scored(model, paths)
    corpus = pd.read_parquet(paths["corpus"]).set_index("pid")
    texts = select_model.load_texts(paths["queries"])
    qids, pids = sorted(set(run["qid"])), sorted(set(run["pid"]))
    passages = corpus.loc[pids]

    def scores(amp: bool) -> list:
        options = {"batch_size": 4, "device": torch.device("cpu"), "amp": amp, "dtype": torch.float32}
        queries = dict(zip(qids, encode_buffer(model, [texts[q] for q in qids], None, **options)))
        embedded = encode_buffer(model, list(passages["text"]), list(passages["title"]), **options)
        by_pid = dict(zip(pids, embedded))
        return [np.float32(np.dot(queries[q], by_pid[p])) for q, p in zip(run["qid"], run["pid"])]

    np.testing.assert_allclose(run["score"].to_numpy(), scores(amp=True), rtol=0, atol=1e-6)
    # and bf16 is what was compared: fp32 embeddings score the pairs measurably otherwise
    assert np.abs(run["score"].to_numpy() - scores(amp=False)).max() > 1e-5


def test_the_record_names_the_precision_the_models_were_scored_in(world, monkeypatch):
    monkeypatch.setenv("SIEVE_CPU_BF16", "1")  # as on a CPU with native bf16
    root, paths, start, trained = world
    qrels = root / "qrels.precision_top.parquet"
    _qrels_from_top(_scored(start, paths), qrels)
    assert _run_stage(root, paths, start, trained, qrels, root / "amp")["precision"] == "bf16"
    record = _run_stage(root, paths, start, trained, qrels, root / "fp32", "--no-amp")
    assert record["precision"] == "fp32"


def test_only_the_top_depth_candidates_are_scored(world):
    _root, paths, start, _trained = world
    run = _scored(start, paths)
    assert run.groupby("qid").size().eq(DEPTH).all()
    candidates = pd.read_parquet(paths["candidates"])
    assert set(zip(run["qid"], run["pid"])) == set(
        zip(*candidates[candidates["rank"] <= DEPTH][["qid", "pid"]].to_numpy().T)
    )


def test_a_trained_model_worse_on_dev_keeps_the_start(world):
    root, paths, start, trained = world
    qrels = root / "qrels.start_top.parquet"
    _qrels_from_top(_scored(start, paths), qrels)  # the start model is right on every dev query
    out = root / "kept"
    record = _run_stage(root, paths, start, trained, qrels, out)
    by_alpha = record["dev_metric_by_alpha"]
    assert by_alpha["0"] == 1.0 and by_alpha["1"] < 1.0
    assert record["chosen_alpha"] == 0.0 and record["kept_start"] and record["qrels"] == str(qrels)
    assert "smallest alpha" in record["tie_rule"]
    pd.testing.assert_frame_equal(_scored(out, paths), _scored(start, paths), check_exact=True)


def test_the_chosen_folder_loads_and_scores_as_the_chosen_alpha(world):
    root, paths, start, trained = world
    states = (Retriever.load(start).state_dict(), Retriever.load(trained).state_dict())
    halfway = _scored(Retriever.load(trained), paths, interpolate(*states, 0.5))
    qrels = root / "qrels.halfway_top.parquet"
    _qrels_from_top(halfway, qrels)  # the halfway model is right on every dev query, the ends are not
    out = root / "chosen"
    record = _run_stage(root, paths, start, trained, qrels, out, "--alphas", "0", "0.5", "1")
    by_alpha = {float(a): v for a, v in record["dev_metric_by_alpha"].items()}
    assert by_alpha[0.5] == 1.0 > max(by_alpha[0.0], by_alpha[1.0])
    assert record["chosen_alpha"] == 0.5 and not record["kept_start"]
    pd.testing.assert_frame_equal(_scored(out, paths), halfway, check_exact=True)
    assert Retriever.load(out).settings == Retriever.load(trained).settings


def test_models_of_another_shape_are_one_line_naming_the_tensor(world, tmp_path, capsys):
    from pipeline.retrieval.model import RetrieverSettings, make_tiny_encoder

    root, paths, start, _trained = world
    wide = make_tiny_encoder(tmp_path / "wide-base", seed=2, hidden=16)
    Retriever.from_pretrained(str(wide), RetrieverSettings(base="tiny", temperature=0.05)).save(
        tmp_path / "wide"
    )
    qrels = root / "qrels.any.parquet"
    _qrels_from_top(_scored(start, paths), qrels)
    argv = flags(
        paths, "queries", "corpus", "candidates", start=start, trained=tmp_path / "wide", qrels=qrels
    )
    with pytest.raises(SystemExit) as exit_:
        select_model.run_main(select_model.main, [*argv, "--out", str(tmp_path / "out"), "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1
    assert str(tmp_path / "wide") in err and "tensor 'query_model." in err and "[" in err
    assert not (tmp_path / "out").exists()


def test_the_output_may_not_be_an_input(world):
    root, paths, start, trained = world
    argv = flags(
        paths, "queries", "corpus", "candidates", start=start, trained=trained, qrels=paths["queries"]
    )
    with pytest.raises(DataError, match="--out is the same file as the input --start|--out .* input --start"):
        select_model.main([*argv, "--out", str(start), "--device", "cpu"])


def test_models_scored_differently_are_one_line_naming_the_setting(world, tmp_path):
    from pipeline.retrieval.model import RetrieverSettings, make_tiny_encoder

    root, paths, start, _trained = world
    base = make_tiny_encoder(tmp_path / "cls-base", seed=3)
    Retriever.from_pretrained(str(base), RetrieverSettings(base="tiny", pooling="cls")).save(tmp_path / "cls")
    qrels = root / "qrels.any.parquet"
    _qrels_from_top(_scored(start, paths), qrels)
    argv = flags(paths, "queries", "corpus", "candidates", start=start, trained=tmp_path / "cls", qrels=qrels)
    with pytest.raises(DataError, match=r"retriever.json: field 'pooling': pooling is 'mean' in the start"):
        select_model.main([*argv, "--out", str(tmp_path / "out"), "--device", "cpu"])
    assert not (tmp_path / "out").exists()


def test_the_truth_file_chooses_by_hit_all(world, tmp_path):
    # One labels file: hit_all@1 over it is hit@1 over it (synthkb's qrels_all as --qrels).
    root, paths, start, trained = world
    qrels = root / "qrels.any.parquet"
    _qrels_from_top(_scored(start, paths), qrels)
    by_name = {
        metric: _run_stage(root, paths, start, trained, qrels, tmp_path / metric, "--metric", metric)
        for metric in ("hit@1", "hit_all@1")
    }
    assert by_name["hit@1"]["dev_metric_by_alpha"] == by_name["hit_all@1"]["dev_metric_by_alpha"]


# ---- checkpoints as candidates: snapshots kept by training ----------------------------------------


def test_snapshot_steps_are_evenly_spaced_inside_the_run():
    from pipeline.training.snapshots import snapshot_steps

    assert snapshot_steps(30, 2) == [10, 20]
    assert snapshot_steps(60, 3) == [15, 30, 45]
    assert snapshot_steps(7, 2) == [2, 4]  # 7 // 3, 14 // 3
    assert snapshot_steps(5, 10) == [1, 2, 3, 4]  # at most one a step, never the last (the trained model)
    assert snapshot_steps(1, 3) == [] and snapshot_steps(30, 0) == []


def _candidate(name: str):
    from pipeline.training.select_model import Candidate

    if name in ("start", "trained"):
        return Candidate(name, alpha=0.0 if name == "start" else 1.0)
    if name.startswith("step"):
        return Candidate("snapshot", step=int(name[4:]))
    return Candidate("interpolation", alpha=float(name[5:]))


def _choice(scores: dict[str, float]) -> str:
    from pipeline.training.select_model import Candidate

    # listed in an order that is not the tie order: the rule, not the dict, must decide
    return choose({_candidate(n): v for n, v in reversed(scores.items())}, Candidate.order).name


def test_choose_among_checkpoints_takes_the_best_and_ties_go_to_the_start():
    # hand-computed: step20 alone is best
    assert (
        _choice({"start": 0.50, "step10": 0.55, "step20": 0.61, "alpha0.5": 0.60, "trained": 0.58})
        == "step20"
    )
    # a tie among trained candidates: the earliest snapshot (before interpolations and the trained model)
    assert _choice({"start": 0.5, "step10": 0.7, "step20": 0.7, "alpha0.5": 0.7, "trained": 0.7}) == "step10"
    assert (
        _choice({"start": 0.5, "step10": 0.6, "alpha0.25": 0.7, "alpha0.75": 0.7, "trained": 0.7})
        == "alpha0.25"
    )
    # the start ties with everything: it is kept
    assert _choice({"start": 0.7, "step10": 0.7, "alpha0.5": 0.7, "trained": 0.7}) == "start"


def _with_snapshots(trained, folder, states: dict[int, dict]) -> str:
    """A copy of the trained folder keeping ``states`` as its snapshots (step -> state_dict)."""
    import shutil

    from safetensors.torch import save_file

    from pipeline.training.snapshots import SNAPSHOT_DIR, step_folder

    shutil.copytree(trained, folder)
    for step, state in states.items():
        path = step_folder(folder / SNAPSHOT_DIR, step)
        path.mkdir(parents=True)
        save_file({k: v.contiguous().clone() for k, v in state.items()}, str(path / "model.safetensors"))
    return folder


def test_a_snapshot_best_on_dev_is_chosen_and_its_folder_is_complete(world, tmp_path, make_retriever):
    root, paths, start, trained = world
    other = Retriever.load(make_retriever(tmp_path / "other", seed=5)).state_dict()
    halfway = interpolate(Retriever.load(start).state_dict(), Retriever.load(trained).state_dict(), 0.5)
    folder = _with_snapshots(trained, tmp_path / "trained", {20: halfway, 10: other})
    snapshot_run = _scored(Retriever.load(trained), paths, other)
    qrels = tmp_path / "qrels.snapshot_top.parquet"
    _qrels_from_top(snapshot_run, qrels)  # step 10's model is right on every dev query
    out = tmp_path / "chosen"
    record = _run_stage(root, paths, start, folder, qrels, out, "--alphas", "0", "0.5", "1")
    assert [c["name"] for c in record["scored"]] == ["start", "step10", "step20", "alpha0.5", "trained"]
    by_name = {c["name"]: c["dev_metric"] for c in record["scored"]}
    assert by_name["step10"] == 1.0 > max(v for n, v in by_name.items() if n != "step10")
    # step 20 is the halfway interpolation's weights: the same dev metric, computed twice
    assert by_name["step20"] == by_name["alpha0.5"] == record["dev_metric_by_alpha"]["0.5"]
    assert record["dev_metric_by_snapshot"] == {"10": 1.0, "20": by_name["step20"]}
    assert record["chosen"] == "step10" and record["chosen_step"] == 10 and record["chosen_alpha"] is None
    assert not record["kept_start"]
    pd.testing.assert_frame_equal(_scored(out, paths), snapshot_run, check_exact=True)
    assert Retriever.load(out).settings == Retriever.load(trained).settings
    card = (out / "README.md").read_text()
    assert "snapshot at step 10" in card and "| step10 (chosen) | 1.0000 |" in card


def test_a_snapshot_that_is_the_start_s_copy_ties_and_the_start_is_kept(world, tmp_path):
    root, paths, start, trained = world
    folder = _with_snapshots(trained, tmp_path / "trained", {10: Retriever.load(start).state_dict()})
    qrels = tmp_path / "qrels.start_top.parquet"
    _qrels_from_top(_scored(start, paths), qrels)
    out = tmp_path / "kept"
    record = _run_stage(root, paths, start, folder, qrels, out, "--alphas", "0", "1")
    by_name = {c["name"]: c["dev_metric"] for c in record["scored"]}
    assert by_name["start"] == by_name["step10"] == 1.0 > by_name["trained"]
    assert record["chosen"] == "start" and record["kept_start"] and "start model first" in record["tie_rule"]
    pd.testing.assert_frame_equal(_scored(out, paths), _scored(start, paths), check_exact=True)
    assert "the start model itself" in (out / "README.md").read_text()


def test_a_snapshot_of_another_shape_is_one_line_naming_its_file(world, tmp_path, capsys):
    root, paths, start, trained = world
    state = Retriever.load(trained).state_dict()
    name = next(k for k, v in state.items() if v.ndim == 2)
    state[name] = state[name][:1]
    folder = _with_snapshots(trained, tmp_path / "trained", {10: state})
    qrels = root / "qrels.any.parquet"
    _qrels_from_top(_scored(start, paths), qrels)
    argv = flags(paths, "queries", "corpus", "candidates", start=start, trained=folder, qrels=qrels)
    with pytest.raises(SystemExit) as exit_:
        select_model.run_main(select_model.main, [*argv, "--out", str(tmp_path / "out"), "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1
    assert "step10/model.safetensors" in err and f"tensor {name!r}" in err and "snapshot" in err


# ---- training keeps the snapshots: resume-safe, in the model folder ---------------------------------


@pytest.fixture(scope="module")
def train_setup(tmp_path_factory, make_train_files, tiny_model_dir):
    from pipeline.training.data import TrainData, TrainInputs

    root = tmp_path_factory.mktemp("snapshots")
    paths = make_train_files(root / "data")
    data = TrainData(TrainInputs(**paths), depth=5, seed=3)
    return root, tiny_model_dir(root), data, paths


def _snapshot_bytes(ckpt) -> dict[str, bytes]:
    return {
        p.parent.name: p.read_bytes() for p in sorted((ckpt / "snapshots").glob("step*/model.safetensors"))
    }


def test_a_killed_run_resumed_writes_the_same_snapshots(
    resume_config, train_setup, tmp_path, tiny_retriever, train_until_crash
):
    from pipeline.training.loop import train

    _, model_dir, data, _ = train_setup
    cfg = resume_config()  # 6 steps, a checkpoint every 3, killed after step 4
    summary = train(tiny_retriever(model_dir), data, cfg, checkpoint_dir=tmp_path / "ref", snapshots=2)
    assert summary["snapshots"] == [2, 4]
    train_until_crash(tiny_retriever(model_dir), data, cfg, tmp_path / "run", snapshots=2)
    summary = train(tiny_retriever(model_dir), data, cfg, checkpoint_dir=tmp_path / "run", snapshots=2)
    assert summary["start_step"] == 3
    reference = _snapshot_bytes(tmp_path / "ref")
    assert list(reference) == ["step2", "step4"] and reference == _snapshot_bytes(tmp_path / "run")
    # the snapshots differ from each other (training moved the weights between them)
    assert reference["step2"] != reference["step4"]


def test_a_kill_right_after_a_checkpoint_keeps_that_step_s_snapshot(
    resume_config, train_setup, tmp_path, tiny_retriever, monkeypatch
):
    # Step 3 is both a snapshot and a checkpoint; the run dies as the checkpoint is written, and the
    # resume starts after step 3: its snapshot must already be on disk.
    from pipeline.training import engine as engine_module
    from pipeline.training.loop import train

    _, model_dir, data, _ = train_setup
    cfg = resume_config()
    reference = train(tiny_retriever(model_dir), data, cfg, checkpoint_dir=tmp_path / "ref", snapshots=1)
    assert reference["snapshots"] == [3]
    save = engine_module.Engine.save

    def save_then_die(self, step, extra=None):
        save(self, step, extra)
        raise RuntimeError("simulated kill")

    monkeypatch.setattr(engine_module.Engine, "save", save_then_die)
    with pytest.raises(RuntimeError, match="simulated kill"):
        train(tiny_retriever(model_dir), data, cfg, checkpoint_dir=tmp_path / "run", snapshots=1)
    monkeypatch.setattr(engine_module.Engine, "save", save)
    summary = train(tiny_retriever(model_dir), data, cfg, checkpoint_dir=tmp_path / "run", snapshots=1)
    assert summary["start_step"] == 3
    assert _snapshot_bytes(tmp_path / "run") == _snapshot_bytes(tmp_path / "ref") != {}


def test_a_checkpoint_made_without_snapshots_is_not_resumed_with_them(
    resume_config, train_setup, tmp_path, tiny_retriever, train_until_crash
):
    from pipeline.training.loop import train

    _, model_dir, data, _ = train_setup
    train_until_crash(tiny_retriever(model_dir), data, resume_config(), tmp_path / "c")
    summary = train(
        tiny_retriever(model_dir), data, resume_config(), checkpoint_dir=tmp_path / "c", snapshots=2
    )
    assert summary["start_step"] == 0 and list(_snapshot_bytes(tmp_path / "c")) == ["step2", "step4"]


def test_the_model_folder_holds_its_snapshots_and_the_default_keeps_none(
    train_setup, tmp_path, resume_config
):
    from pipeline.training.train_dense import TrainInputs, train_retriever

    _, model_dir, _, paths = train_setup
    inputs = TrainInputs(**paths)
    cfg = resume_config()
    out = tmp_path / "kept"
    train_retriever(str(model_dir), inputs, out, cfg, snapshots=2)
    assert [p.name for p in sorted((out / "snapshots").iterdir())] == ["step2", "step4"]
    assert json.loads((out / "train_info.json").read_text())["summary"]["snapshots"] == [2, 4]
    assert (
        not (tmp_path / "kept.ckpt").exists()
        and "Weight snapshots at steps 2, 4" in (out / "README.md").read_text()
    )
    # the same folder trained again without snapshots: the earlier ones would pass for this model's
    train_retriever(str(model_dir), inputs, out, cfg)
    assert not (out / "snapshots").exists()
    assert "snapshots" not in json.loads((out / "train_info.json").read_text())["summary"]
    assert "Weight snapshots" not in (out / "README.md").read_text()


def test_the_training_document_carries_snapshots_only_when_kept():
    import copy

    from pipeline.core.config import load_config
    from pipeline.core.methods import method_table
    from pipeline.core.recipes import dataset_configs
    from pipeline.core.settings.validation import from_dict
    from pipeline.training.settings import TrainJob
    from pipeline.workflow.training import train_job

    config = dataset_configs(load_config(), methods=method_table)["synthkb"]
    assert "snapshots" not in train_job(config, "dpr", seed=0)  # the default jobs' params are unchanged
    kept = copy.deepcopy(config)
    kept["selection"]["checkpoints"] = 2
    assert train_job(kept, "ccr", seed=0)["snapshots"] == 2
    assert "snapshots" not in train_job(kept, "ccr", seed=0, snapshots=False)  # AR2's round scorer
    assert from_dict(TrainJob, train_job(kept, "dpr", seed=0), "settings").snapshots == 2
    with pytest.raises(ConfigError, match="snapshots"):
        from_dict(TrainJob, {"snapshots": 51}, "settings")


def test_a_snapshots_folder_that_is_not_one_is_one_line_naming_the_entry(tmp_path):
    from pipeline.training.snapshots import collect, list_snapshots, load_snapshot

    assert list_snapshots(tmp_path) == []  # a folder that keeps none
    (tmp_path / "snapshots" / "step10").mkdir(parents=True)
    with pytest.raises(DataError, match="without its weights") as err:
        list_snapshots(tmp_path)
    assert err.value.file.endswith("step10/model.safetensors")
    (tmp_path / "snapshots" / "step10" / "model.safetensors").write_bytes(b"not safetensors")
    (tmp_path / "snapshots" / "latest").mkdir()
    with pytest.raises(DataError, match="not a snapshot folder") as err:
        list_snapshots(tmp_path)
    assert err.value.file.endswith("snapshots/latest")
    (tmp_path / "snapshots" / "latest").rmdir()
    [(step, path)] = list_snapshots(tmp_path)
    with pytest.raises(DataError, match="not a readable snapshot") as err:
        load_snapshot(path)
    assert step == 10 and "\n" not in str(err.value)
    # a step the run should have kept but did not: never a model folder with a gap
    with pytest.raises(DataError, match="snapshot of step 20 is missing"):
        collect(tmp_path / "snapshots", tmp_path / "out", [10, 20], keep_source=False)
    assert not (tmp_path / "out").exists()
