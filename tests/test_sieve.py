"""The passage sieve: the rule's equivalent forms, Lemma 1, fallback, determinism, candidates and labels,
and the CLI end to end on a tiny random retriever."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.nn.functional as F
from stage_args import flags

from pipeline.core.schemas import MINED_NEGATIVES_SCHEMA as NEGATIVES_SCHEMA
from pipeline.core.storage import DataError
from pipeline.sieve import candidates as fn_labels
from pipeline.sieve import passage_sieve as sv
from pipeline.sieve.data import read_negatives


def random_queries(seed: int, n: int = 200):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        k = int(rng.integers(1, 40))
        yield float(rng.uniform(-1, 1)), rng.uniform(-1, 1, size=k)


# ---- the rule ----------------------------------------------------------------------------------


def test_nce_losses_hand_computed():
    # s = [1, 0], tau = 1: l(p0) = log(1 + e^-1), l(p1) = log(e + 1)
    losses = sv.nce_losses(np.array([1.0, 0.0]), tau=1.0)
    assert losses == pytest.approx([math.log(1 + math.exp(-1)), math.log(math.e + 1)], abs=1e-12)
    q = sv.sieve_query(1.0, np.array([0.0]), tau=1.0)
    assert q.threshold == pytest.approx(0.5 * (losses[0] + losses[1]), abs=1e-12)
    assert q.kept.tolist() == [True]  # the candidate's loss is above the mean


@pytest.mark.parametrize("tau", [1.0, 0.05])
def test_rule_equals_per_query_nll_form(tau):
    """l(p) equals torch's cross-entropy with p as the target, and keep iff l >= mean l."""
    for pos, cands in random_queries(1):
        scores = torch.tensor(np.concatenate([[pos], cands]), dtype=torch.float64) / tau
        nll = torch.stack([F.cross_entropy(scores[None], torch.tensor([i])) for i in range(len(scores))])
        result = sv.sieve_query(pos, cands, tau=tau)
        np.testing.assert_allclose(result.losses, nll[1:].numpy(), rtol=1e-10, atol=1e-10)
        assert result.positive_loss == pytest.approx(float(nll[0]), abs=1e-10)
        assert result.kept.tolist() == (nll[1:] >= nll.mean()).tolist()


def test_rule_equals_cosine_below_mean_form_and_ignores_tau():
    for pos, cands in random_queries(2):
        expected = cands <= np.concatenate([[pos], cands]).mean()
        for tau in (1.0, 0.2, 0.05, 0.01):
            assert sv.sieve_query(pos, cands, tau=tau).kept.tolist() == expected.tolist()
            assert (
                sv.sieve_query(pos, cands, tau=tau, strict=True).kept.tolist()
                == (cands < np.concatenate([[pos], cands]).mean()).tolist()
            )


def test_lemma1_confident_candidates_are_never_kept():
    """A candidate with softmax probability > 1/(|N|+1) over P is dropped (both comparisons)."""
    seen = 0
    for pos, cands in random_queries(3, n=400):
        for tau in (1.0, 0.1):
            z = np.concatenate([[pos], cands]) / tau
            prob = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
            confident = prob[1:] > 1.0 / (len(cands) + 1)
            seen += int(confident.sum())
            for strict in (False, True):
                kept = sv.sieve_query(pos, cands, tau=tau, strict=strict).kept
                assert not (kept & confident).any()
    assert seen > 100


def test_grouped_equals_per_query():
    queries = list(random_queries(4, n=60))
    offsets = np.cumsum([0] + [len(c) for _, c in queries])
    pos = np.array([p for p, _ in queries])
    cands = np.concatenate([c for _, c in queries])
    for strict in (False, True):
        loss, pos_loss, thr, kept = sv.sieve_grouped(offsets, pos, cands, tau=0.05, strict=strict)
        for i, (p, c) in enumerate(queries):
            one = sv.sieve_query(p, c, tau=0.05, strict=strict)
            np.testing.assert_allclose(loss[offsets[i] : offsets[i + 1]], one.losses, rtol=1e-12)
            assert pos_loss[i] == pytest.approx(one.positive_loss, rel=1e-12)
            assert thr[i] == pytest.approx(one.threshold, rel=1e-12)
            assert kept[offsets[i] : offsets[i + 1]].tolist() == one.kept.tolist()


def test_strict_differs_only_at_ties():
    # Positive and candidate score alike: both losses equal the threshold exactly.
    assert sv.sieve_query(0.3, np.array([0.3])).kept.tolist() == [True]
    assert sv.sieve_query(0.3, np.array([0.3]), strict=True).kept.tolist() == [False]


def test_fallback_keeps_one_seeded_candidate():
    # Query a: every candidate scores above the positive -> nothing survives; query b keeps some.
    offsets = np.array([0, 3, 5])
    pos = np.array([-0.5, 0.9])
    cands = np.array([0.8, 0.7, 0.9, 0.1, 0.2])
    _, _, _, kept = sv.sieve_grouped(offsets, pos, cands)
    assert kept[:3].tolist() == [False, False, False] and kept[3:].all()
    none_kept, none_fb = sv.apply_fallback(kept, offsets, ["a", "b"], seed=0, mode="none")
    assert none_kept.tolist() == kept.tolist() and not none_fb.any()
    kept1, fb1 = sv.apply_fallback(kept, offsets, ["a", "b"], seed=0)
    assert kept1[:3].sum() == 1 and fb1.sum() == 1 and fb1[:3].any() and kept1[3:].all()
    again, _ = sv.apply_fallback(kept, offsets, ["a", "b"], seed=0)
    assert again.tolist() == kept1.tolist()
    picks = {int(np.argmax(sv.apply_fallback(kept, offsets, ["a", "b"], seed=s)[1][:3])) for s in range(20)}
    assert len(picks) > 1  # the pick depends on the seed, not always the first row
    with pytest.raises(ValueError):
        sv.apply_fallback(kept, offsets, ["a", "b"], seed=0, mode="keep_all")


def test_select_candidates_is_deterministic_and_order_free():
    rng = np.random.default_rng(0)
    rows = [(f"q{q}", f"p{i}", i + 1, float(100 - i)) for q in range(5) for i in range(50)]
    df = pd.DataFrame(rows, columns=["qid", "pid", "rank", "score"])
    a = sv.select_candidates(df, n_candidates=7, pool=20, seed=3)
    b = sv.select_candidates(df.iloc[rng.permutation(len(df))], n_candidates=7, pool=20, seed=3)
    pd.testing.assert_frame_equal(a, b)
    assert (a.groupby("qid").size() == 7).all()
    assert a["rank"].max() <= 20
    assert (a.groupby("qid")["rank"].apply(lambda r: r.is_monotonic_increasing)).all()
    c = sv.select_candidates(df, n_candidates=7, pool=20, seed=4)
    assert not a["pid"].equals(c["pid"])
    # pool <= candidates: the top ranks, no sampling
    top = sv.select_candidates(df, n_candidates=30, pool=10, seed=0)
    assert sorted(top[top["qid"] == "q0"]["rank"]) == list(range(1, 11))


# ---- inputs, labels ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda t: t.drop_columns(["rank"]), "rank"),
        (lambda t: t.set_column(2, "rank", pa.array([str(v) for v in t["rank"].to_pylist()])), "rank"),
        (lambda t: t.set_column(1, "pid", pa.array([None] + t["pid"].to_pylist()[1:], pa.string())), "pid"),
        (lambda t: t.set_column(2, "rank", pa.array([0] + t["rank"].to_pylist()[1:], pa.int32())), "rank"),
        (lambda t: pa.concat_tables([t, t.slice(0, 1)]), "pid"),
    ],
)
def test_malformed_negatives_file_names_file_and_field(tmp_path, change, field, make_sieve_dataset):
    paths = make_sieve_dataset(tmp_path / "d")
    bad = tmp_path / "bad.parquet"
    pq.write_table(change(pq.read_table(paths["negatives"])), bad)
    with pytest.raises(DataError) as err:
        read_negatives(bad)
    assert err.value.field == field and str(bad) in str(err.value)
    with pytest.raises(SystemExit) as exit_info:  # the CLI exits 2 with one clear line
        from pipeline.core.cli import run_main

        tables = ("negatives", "qrels", "queries", "corpus")
        run_main(fn_labels.main, flags(dict(paths, negatives=bad), *tables, out=tmp_path / "c.parquet"))
    assert exit_info.value.code == 2
    assert not (tmp_path / "c.parquet").exists()


def build_candidates(p: dict, **kw) -> pd.DataFrame:
    """fn_labels.build_candidates on a make_sieve_dataset folder's four tables."""
    return fn_labels.build_candidates(p["negatives"], p["qrels"], p["queries"], p["corpus"], **kw)


def test_candidates_labels_from_qrels_all(tmp_path, make_sieve_dataset):
    p = make_sieve_dataset(tmp_path / "d")
    cands = build_candidates(p, candidates=12, pool=100, seed=0, qrels_all=p["qrels_all"])
    assert not ((cands["qid"] == "q1") & (cands["rank"] == 3)).any()  # excluded row
    assert (cands["fn_label_source"] == "qrels_all").all()
    fns = cands[cands["is_false_negative"].astype(bool)]
    assert sorted(fns["pid"]) == sorted(f"fn{k}" for k in range(8))
    assert (cands["positive_pid"] == cands["qid"].str.replace("q", "pos")).all()
    assert cands["has_answer"].astype(bool).tolist() == cands["pid"].str.startswith("fn").tolist()


def test_injection_moves_positives_and_labels_them(tmp_path, make_sieve_dataset):
    p = make_sieve_dataset(tmp_path / "d")
    kw = dict(candidates=6, pool=100, seed=0)
    plain = build_candidates(p, **kw)
    inj = build_candidates(p, injection_fraction=0.5, **kw)
    again = build_candidates(p, injection_fraction=0.5, **kw)
    pd.testing.assert_frame_equal(inj, again)
    moved = inj[inj["source"] == "injected"]
    assert len(moved) == 2  # 4 eligible queries (two positives each) x 0.5
    assert set(moved["pid"]) <= {f"pos{k}b" for k in range(0, 8, 2)}
    assert moved["is_false_negative"].astype(bool).all() and (moved["fn_label_source"] == "injected").all()
    assert len(inj) == len(plain)  # injected positives replace slots
    others = inj[inj["qid"].isin(moved["qid"]) & (inj["source"] != "injected")]
    assert (others["fn_label_source"] == "injected").all() and not others["is_false_negative"].any()
    untouched = inj[~inj["qid"].isin(moved["qid"])]
    assert untouched["is_false_negative"].isna().all() and untouched["fn_label_source"].isna().all()
    assert fn_labels.injection_queries([f"q{i}" for i in range(10)], 0.3, 0) == fn_labels.injection_queries(
        [f"q{i}" for i in reversed(range(10))], 0.3, 0
    )


def test_suspected_are_same_article_answer_matches_and_not_truth(tmp_path, make_sieve_dataset):
    p = make_sieve_dataset(tmp_path / "d")
    cands = build_candidates(p, candidates=12, pool=100, seed=0, suspect_same_article=True)
    suspected = cands[cands["fn_label_source"] == "suspected"]
    # fnK shares pos K's article and contains answerK; fillers never contain an answer.
    assert sorted(suspected["pid"]) == sorted(f"fn{k}" for k in range(8))
    assert cands["is_false_negative"].isna().all()


# ---- end to end ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy(tmp_path_factory, make_sieve_dataset, make_retriever, make_sieve_candidates):
    root = tmp_path_factory.mktemp("sieve")
    paths = make_sieve_dataset(root / "data")
    paths["model"] = make_retriever(root / "model")
    paths["candidates"] = make_sieve_candidates(paths, root / "candidates.parquet")
    return paths


def run_cli(toy, out_dir, *extra):
    out = out_dir / "sieve_b0.5.parquet"
    sv.main(
        [
            *flags(
                toy,
                "candidates",
                "corpus",
                "queries",
                "model",
                out=out,
                train_out=out_dir / "sieve_b0.5.train.parquet",
                losses_out=out_dir / "losses.parquet",
                in_batch=3,
            ),
            *extra,
        ]
    )
    return (
        pd.read_parquet(out),
        pd.read_parquet(out_dir / "sieve_b0.5.train.parquet"),
        pd.read_parquet(out_dir / "losses.parquet"),
    )


def test_cli_outputs_are_consistent_and_deterministic(toy, tmp_path, monkeypatch):
    from pipeline.retrieval.model import Retriever

    encoded = []
    original = Retriever.encode_passages
    monkeypatch.setattr(
        Retriever,
        "encode_passages",
        lambda self, titles, texts, batch_size=64: (
            encoded.extend(texts) or original(self, titles, texts, batch_size)
        ),
    )
    table, train, losses = run_cli(toy, tmp_path / "a")
    cands = pd.read_parquet(toy["candidates"])
    assert list(table.columns) == sv.SIEVE_SCHEMA.names and len(table) == len(cands)
    # each distinct passage (candidates + positives) encoded exactly once
    assert len(encoded) == len(set(cands["pid"]) | set(cands["positive_pid"])) == len(set(encoded))
    for _qid, rows in table.groupby("qid"):
        losses_q = np.concatenate([[rows["positive_loss"].iat[0]], rows["nce_loss"]])
        assert rows["threshold"].iat[0] == pytest.approx(losses_q.mean(), rel=1e-12)
        sims = np.concatenate([[rows["positive_similarity"].iat[0]], rows["similarity"]])
        rule = (rows["similarity"] <= sims.mean()).to_numpy()
        assert (rows["kept"].to_numpy() == (rule | rows["fallback"].to_numpy())).all()
        assert rows["kept"].any()
    assert table["is_false_negative"].tolist() == cands["is_false_negative"].tolist()
    # training file: the kept rows, bm25.parquet layout, ranks 1..n per query
    assert pq.read_schema(tmp_path / "a" / "sieve_b0.5.train.parquet").names == NEGATIVES_SCHEMA.names
    assert len(train) == table["kept"].sum() and set(train["source"]) == {"sieve_b0.5"}
    assert (train.groupby("qid")["rank"].apply(lambda r: list(r) == list(range(1, len(r) + 1)))).all()
    assert not train["excluded"].any()
    # Figure 1 data: one softmax per query over positive + candidates + in-batch negatives
    sums = losses.groupby("qid")["nce_loss"].apply(lambda nll: float(np.exp(-nll).sum()))
    np.testing.assert_allclose(sums.to_numpy(), 1.0, rtol=1e-9)
    assert (losses[losses["group"] == "in_batch"].groupby("qid").size() == 3).all()
    assert set(losses["group"]) == {"positive", "false_negative", "hard_negative", "in_batch"}
    table2, train2, losses2 = run_cli(toy, tmp_path / "b")
    pd.testing.assert_frame_equal(table, table2)
    pd.testing.assert_frame_equal(train, train2)
    pd.testing.assert_frame_equal(losses, losses2)


def test_cli_strict_and_no_fallback(toy, tmp_path):
    loose, _, _ = run_cli(toy, tmp_path / "a", "--fallback", "none")
    strict, _, _ = run_cli(toy, tmp_path / "b", "--strict", "--fallback", "none")
    assert not loose["fallback"].any() and not strict["fallback"].any()
    assert (strict["kept"] <= loose["kept"]).all()
    assert (strict["kept"] == (strict["nce_loss"] > strict["threshold"])).all()


def test_bad_negatives_type_in_candidates_file(tmp_path, toy):
    bad = tmp_path / "cands.parquet"
    table = pq.read_table(toy["candidates"]).drop_columns(["positive_pid"])
    pq.write_table(table, bad)
    with pytest.raises(DataError) as err:
        sv.read_candidates(bad)
    assert err.value.field == "positive_pid"


def test_fixture_schema_matches_bm25(tmp_path, make_sieve_dataset):
    negatives = make_sieve_dataset(tmp_path / "d")["negatives"]
    assert pq.read_schema(negatives).names == NEGATIVES_SCHEMA.names


def test_max_queries_is_a_seeded_sample(tmp_path, make_sieve_dataset):
    p = make_sieve_dataset(tmp_path / "d")
    kw = dict(candidates=4, pool=100, seed=0, max_queries=3)
    a = build_candidates(p, **kw)
    b = build_candidates(p, **kw)
    assert a["qid"].nunique() == 3 and (a.groupby("qid").size() == 4).all()
    pd.testing.assert_frame_equal(a, b)
    c = build_candidates(p, **dict(kw, seed=5))
    assert set(c["qid"]) != set(a["qid"])


@pytest.mark.parametrize(
    "options",
    [
        dict(qrels_all=True),
        dict(injection_fraction=0.5, suspect_same_article=True),
        dict(max_queries=3, qrels_all=True),
    ],
)
def test_candidates_read_in_pieces_equal_one_read(tmp_path, make_sieve_dataset, monkeypatch, options):
    """The negatives streamed 3 rows at a time, also with each query's rows scattered over the file
    (rows ordered by rank: every query open until the end), give the table of one read."""
    p = make_sieve_dataset(tmp_path / "d")
    kw = dict(candidates=4, pool=100, seed=0, **options)
    if kw.pop("qrels_all", False):
        kw["qrels_all"] = p["qrels_all"]
    whole = build_candidates(p, **kw)
    monkeypatch.setattr("pipeline.sieve.data.NEGATIVES_BATCH", 3)
    pd.testing.assert_frame_equal(build_candidates(p, **kw), whole)
    table = pq.read_table(p["negatives"])
    scattered = table.sort_by([("rank", "descending"), ("qid", "ascending")])
    assert scattered["qid"][0] != scattered["qid"][1]
    pq.write_table(scattered, p["negatives"])
    pd.testing.assert_frame_equal(build_candidates(p, **kw), whole)
