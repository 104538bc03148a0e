"""The qrels metrics of pipeline.evaluation.metrics, as pipeline.evaluation.evaluate writes them into
metrics.json, cross-checked against ir_measures on a real BM25 run over real SQuAD v1.1 dev articles.

The run is built the way the workflow builds it: the project's SQuAD reader, the project's BM25 index
and retrieval (config settings), the project's run reader; then ``evaluate.evaluate`` scores it.
Every qrels metric key it produces is compared, aggregated and per query, to 1e-9, with

  MRR@10 / MRR_all@10  <->  ir_measures RR@10      (msmarco provider: MS MARCO's own MRR script)
                            and RR on the run cut at rank 10 (pytrec_eval, i.e. trec_eval recip_rank)
  hit@k  / hit_all@k   <->  ir_measures Success@k  (pytrec_eval success_k)
  recall@k             <->  ir_measures R@k        (pytrec_eval recall_k)
  nDCG@10              <->  ir_measures nDCG@10    (pytrec_eval ndcg_cut_10; relevance 0/1: binary)

at k = 1, 5, 20, 100, on two judgement sets: the SQuAD gold qrels (one relevant passage per question,
the question's own paragraph) and "answer-bearing" qrels (the gold paragraph plus every other paragraph
of the same article containing an answer string, by the project's DPR string matcher), under which
many questions have several relevant passages, so recall@k and hit@k differ.

Semantic differences between the two sides, and how the test handles each (see the comments at the
places marked SEMANTICS):
  1. queries absent from the run: the project averages over all qrels queries, an unranked one
     scoring 0; ir_measures 0.4.3 does the same (Evaluator.iter_calc yields measure.DEFAULT = 0 for
     every qrels query the provider did not score). Some queries are removed from the run to exercise
     it, and the test asserts ir_measures really reports them as 0.
  2. ties in score: the project scores the order of the run's ``rank`` column; trec_eval re-sorts by
     score (ties by docno, descending) and the MS MARCO provider by (-score, docid). ir_measures is
     therefore given score = DEPTH + 1 - rank, strictly decreasing by rank, so both rank identically.
  3. relevance < 1: the project treats such rows as judgements of non-relevance and a query with no
     row of relevance >= 1 is not a qrels query (docs/evaluation.md); ir_measures (rel=1) also never
     counts such a passage as relevant, but keeps the query in its denominator with a 0. The gold
     qrels carry judged-non-relevant rows, and one query judged only non-relevant; that query is
     removed from what ir_measures sees, and the test asserts that leaving it in would differ.

The test must be able to fail: ``test_controls_differ`` asserts that near-miss definitions (another
cut-off, no MRR cut-off, recall vs hit, averaging over ranked queries only) give different numbers on
this run, so the agreement above is not a coincidence of the data. Also checked by breaking the code
by hand (then restoring it): each of these makes test_evaluate_matches_ir_measures fail, most also
test_per_query_matches - hit_at_k cutting at ``[:k + 1]``; recall_at_k dividing by the number of
ranked queries instead of len(qrels); mrr_at_k without its ``[:k]``; recall_at_k adding
``min(found, 1)`` (= hit); mrr_at_k adding 0.999999 instead of 1.0 for a first hit at rank 1;
evaluate.load_qrels keeping relevance >= 0.
"""

from __future__ import annotations

import math

import ir_measures
import pandas as pd
import pytest
from ir_measures import RR, R, Success, nDCG
from squad_data import OVERLAY, squad36

from pipeline.core.config import load_config
from pipeline.core.schemas import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, RUN_SCHEMA
from pipeline.core.storage import read_table, write_table
from pipeline.data.answers import AnswerMatcher
from pipeline.data.readers import squad
from pipeline.evaluation import metrics
from pipeline.evaluation.evaluate import evaluate
from pipeline.retrieval import bm25
from pipeline.retrieval.runs import ranked_lists, read_run

N_ARTICLES = 5  # the first 5 of the 36 articles: 229 passages, 1,099 questions
KS = [1, 5, 20, 100]
DEPTH = 100  # eval.depth of config.yaml
N_UNRANKED = 3  # queries removed from the run (their gold passage was at rank 1)
TOL = 1e-9


# ---- the real run -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("squad_bm25")
    source, _ = squad36()
    config = load_config([OVERLAY])

    paragraphs = []
    for para in squad.read_squad(source):
        if para.article >= N_ARTICLES:
            break
        paragraphs.append(para)
    corpus = pd.DataFrame([(p.pid, p.title, p.text) for p in paragraphs], columns=CORPUS_SCHEMA.names)
    questions = [(q, p) for p in paragraphs for q in p.questions]
    queries = pd.DataFrame([(q.qid, q.text, q.answers) for q, _ in questions], columns=QUERIES_SCHEMA.names)
    paths = {
        name: root / f"{name}.parquet"
        for name in ("corpus", "queries", "qrels", "qrels_multi", "run_full", "run")
    }
    write_table(paths["corpus"], corpus, CORPUS_SCHEMA)
    write_table(paths["queries"], queries, QUERIES_SCHEMA)

    settings = config["bm25"]
    bm25.build_index(
        paths["corpus"],
        root / "index",
        k1=settings["k1"],
        b=settings["b"],
        stemmer=settings["stemmer"],
        stopwords=settings["stopwords"],
    )
    bm25.retrieve_run(root / "index", paths["queries"], DEPTH, paths["run_full"])
    full = read_table(paths["run_full"])
    gold = {q.qid: p.pid for q, p in questions}
    top1 = full[full["rank"] == 1].set_index("qid")["pid"].to_dict()

    # SEMANTICS 1: a BM25 query sharing no term with the corpus gets no row (the workflow evaluates
    # BM25 runs with --allow-missing-queries); every SQuAD question here shares some, so a few are
    # removed by hand - ones BM25 answered perfectly, so that dropping them from the denominator
    # instead of counting them as 0 would change every metric.
    unranked = [qid for qid in gold if top1.get(qid) == gold[qid]][:N_UNRANKED]
    write_table(paths["run"], full[~full["qid"].isin(unranked)], RUN_SCHEMA)

    # Gold qrels (relevance 1) plus judged-non-relevant rows (relevance 0): BM25's wrong top passage
    # for some queries, and one query (SEMANTICS 3) whose only row is relevance 0.
    rows = [(qid, pid, 1) for qid, pid in gold.items()]
    wrong_top = [qid for qid in gold if qid in top1 and top1[qid] != gold[qid]]
    rows += [(qid, top1[qid], 0) for qid in wrong_top[::5]]
    only_nonrelevant = next(qid for qid in gold if top1.get(qid) == gold[qid] and qid not in unranked)
    rows = [(q, p, 0 if q == only_nonrelevant else r) for q, p, r in rows]
    write_table(paths["qrels"], pd.DataFrame(rows, columns=QRELS_SCHEMA.names), QRELS_SCHEMA)

    # Answer-bearing qrels: the gold paragraph and every paragraph of the same article that contains
    # one of the question's answers (DPR string match, the project's matcher).
    matcher = AnswerMatcher("string")
    for p in paragraphs:
        matcher.add_passage(p.pid, p.text)
    by_article: dict[int, list[str]] = {}
    for p in paragraphs:
        by_article.setdefault(p.article, []).append(p.pid)
    multi_rows = []
    for q, p in questions:
        prepared = matcher.prepare_answers(q.answers)
        relevant = {p.pid} | {pid for pid in by_article[p.article] if matcher.matches(prepared, pid)}
        multi_rows += [(q.qid, pid, 1) for pid in sorted(relevant)]
    write_table(paths["qrels_multi"], pd.DataFrame(multi_rows, columns=QRELS_SCHEMA.names), QRELS_SCHEMA)

    qrels_rows = {name: read_table(paths[name]) for name in ("qrels", "qrels_multi")}
    return {
        "paths": paths,
        "unranked": unranked,
        "only_nonrelevant": only_nonrelevant,
        "rows": qrels_rows,
        "n_queries": len(queries),
        "n_passages": len(corpus),
    }


def ir_qrels(rows: pd.DataFrame, drop_unjudged_relevant: bool = True) -> dict[str, dict[str, int]]:
    """ir_measures qrels (dict of dicts) from a qrels table, every row with its relevance.

    SEMANTICS 3: a query with no row of relevance >= 1 is not a qrels query for the project; ir_measures
    would keep it in the denominator with a 0, so by default it is left out here.
    """
    out: dict[str, dict[str, int]] = {}
    for qid, pid, rel in rows.itertuples(index=False):
        out.setdefault(qid, {})[pid] = int(rel)
    if drop_unjudged_relevant:
        out = {qid: docs for qid, docs in out.items() if max(docs.values()) >= 1}
    return out


def ir_run(run: pd.DataFrame, depth: int = DEPTH) -> dict[str, dict[str, float]]:
    """ir_measures run from a run table, cut at ``depth``.

    SEMANTICS 2: scores are replaced by DEPTH + 1 - rank, strictly decreasing by rank, so trec_eval's
    sort by score and the MS MARCO provider's sort by (-score, docid) both give the run's rank order.
    """
    out: dict[str, dict[str, float]] = {}
    for qid, pid, rank in zip(run["qid"], run["pid"], run["rank"]):
        if rank <= depth:
            out.setdefault(qid, {})[pid] = float(DEPTH + 1 - int(rank))
    return out


def project_qrels(rows: pd.DataFrame) -> dict[str, set[str]]:
    positive = rows[rows["relevance"] >= 1]
    return {qid: set(group) for qid, group in positive.groupby("qid", sort=False)["pid"]}


# ir_measures measure for each project metric family; providers named so a change of ir_measures'
# fallback order cannot silently swap the implementation being compared against.
def measure_for(name: str):
    family, _, cut = name.partition("@")
    k = int(cut)
    family = family.removesuffix("_all")
    return {"MRR": RR @ k, "nDCG": nDCG @ k, "hit": Success @ k, "recall": R @ k}[family]


def provider_for(measure):
    return ir_measures.msmarco if measure.NAME == "RR" else ir_measures.pytrec_eval


def ir_aggregate(names, qrels, run) -> dict[str, float]:
    out = {}
    for name in names:
        measure = measure_for(name)
        out[name] = provider_for(measure).calc_aggregate([measure], qrels, run)[measure]
    return out


@pytest.fixture(scope="module")
def scored(data) -> dict:
    p = data["paths"]
    gold, _, _ = evaluate(
        p["run"],
        p["queries"],
        p["qrels"],
        p["corpus"],
        KS,
        qrels_all_path=p["qrels_multi"],
        allow_missing_queries=True,
    )
    multi, _, _ = evaluate(
        p["run"], p["queries"], p["qrels_multi"], p["corpus"], KS, allow_missing_queries=True
    )
    run = read_run(p["run"])
    return {"gold": gold, "multi": multi, "run": run, "ranked": ranked_lists(run)}


# ---- the cross-check --------------------------------------------------------------------------------


def test_evaluate_matches_ir_measures(data, scored):
    run = ir_run(scored["run"])
    gold_q, multi_q = ir_qrels(data["rows"]["qrels"]), ir_qrels(data["rows"]["qrels_multi"])
    gold_m, multi_m = scored["gold"]["metrics"], scored["multi"]["metrics"]

    # Every qrels metric evaluate writes is covered (R@k is answer-match, not qrels-based).
    expected = {"MRR@10", "nDCG@10"} | {f"{f}@{k}" for f in ("hit", "recall") for k in KS}
    assert {n for n in gold_m if not n.startswith("R@")} == expected | {
        "MRR_all@10",
        *(f"hit_all@{k}" for k in KS),
    }
    assert {n for n in multi_m if not n.startswith("R@")} == expected
    assert scored["gold"]["n_unranked_queries"] == N_UNRANKED
    assert scored["gold"]["n_qrels_queries"] == len(gold_q) == data["n_queries"] - 1
    assert scored["gold"]["n_qrels_all_queries"] == len(multi_q) == data["n_queries"]

    checks = [(gold_m, n, gold_q) for n in gold_m if not n.startswith("R@") and "_all" not in n]
    checks += [(gold_m, n, multi_q) for n in gold_m if "_all" in n]
    checks += [(multi_m, n, multi_q) for n in multi_m if not n.startswith("R@")]
    mismatches = []
    for project, name, qrels in checks:
        theirs = ir_aggregate([name], qrels, run)[name]
        if not math.isclose(project[name], theirs, rel_tol=0, abs_tol=TOL):
            mismatches.append((name, project[name], theirs))
    assert not mismatches, mismatches

    # MRR@10 a second way: trec_eval's recip_rank (no cut-off of its own) on the run cut at rank 10.
    for project, qrels in ((gold_m["MRR@10"], gold_q), (multi_m["MRR@10"], multi_q)):
        theirs = ir_measures.pytrec_eval.calc_aggregate([RR], qrels, ir_run(scored["run"], 10))[RR]
        assert project == pytest.approx(theirs, rel=0, abs=TOL)


@pytest.mark.parametrize("qrels_name", ["qrels", "qrels_multi"])
def test_per_query_matches(data, scored, qrels_name):
    """Each qrels query on its own: the project's metric functions vs ir_measures' per-query values."""
    rows = data["rows"][qrels_name]
    qrels, theirs_qrels = project_qrels(rows), ir_qrels(rows)
    assert set(qrels) == set(theirs_qrels)
    run = ir_run(scored["run"])
    names = ["MRR@10", "nDCG@10", *(f"{f}@{k}" for f in ("hit", "recall") for k in KS)]
    functions = {
        "MRR": metrics.mrr_at_k,
        "nDCG": metrics.ndcg_at_k,
        "hit": metrics.hit_at_k,
        "recall": metrics.recall_at_k,
    }
    theirs: dict[tuple[str, str], float] = {}
    for name in names:
        measure = measure_for(name)
        for m in provider_for(measure).iter_calc([measure], theirs_qrels, run):
            theirs[(name, m.query_id)] = m.value
    assert len(theirs) == len(names) * len(qrels)
    mismatches = []
    for name in names:
        family, _, cut = name.partition("@")
        for qid, relevant in qrels.items():
            ours = functions[family](scored["ranked"], {qid: relevant}, int(cut))
            if not math.isclose(ours, theirs[(name, qid)], rel_tol=0, abs_tol=TOL):
                mismatches.append((name, qid, ours, theirs[(name, qid)]))
    assert not mismatches, mismatches[:10]
    # SEMANTICS 1: ir_measures itself scores the queries absent from the run as 0.
    for qid in data["unranked"]:
        assert qid not in run and all(theirs[(name, qid)] == 0.0 for name in names)


# ---- the test can fail ------------------------------------------------------------------------------


def test_controls_differ(data, scored):
    """Near-miss definitions give different numbers on this run: a broken metric would be caught."""
    run = ir_run(scored["run"])
    gold_q, multi_q = ir_qrels(data["rows"]["qrels"]), ir_qrels(data["rows"]["qrels_multi"])
    gold_m, multi_m = scored["gold"]["metrics"], scored["multi"]["metrics"]
    far = 1e-3

    # another cut-off
    for name, wrong in (
        ("hit@1", Success @ 5),
        ("hit@5", Success @ 1),
        ("recall@20", R @ 5),
        ("MRR@10", RR @ 5),
        ("nDCG@10", nDCG @ 5),
    ):
        theirs = provider_for(wrong).calc_aggregate([wrong], gold_q, run)[wrong]
        assert abs(gold_m[name] - theirs) > far, (name, wrong)
    # MRR without its cut-off at 10 (few first hits lie below rank 10 in this run: 0.9076 vs 0.9083)
    no_cut = ir_measures.pytrec_eval.calc_aggregate([RR], gold_q, run)[RR]
    assert abs(gold_m["MRR@10"] - no_cut) > far / 10
    # recall is not hit when queries have several relevant passages
    assert sum(len(d) > 1 for d in multi_q.values()) > len(multi_q) / 10
    for k in (1, 5, 20):
        assert multi_m[f"hit@{k}"] - multi_m[f"recall@{k}"] > far
        theirs = ir_measures.pytrec_eval.calc_aggregate([Success @ k], multi_q, run)[Success @ k]
        assert abs(multi_m[f"recall@{k}"] - theirs) > far
    # SEMANTICS 1: averaging over the ranked queries only (the unranked ones leave the denominator)
    ranked_only = {qid: docs for qid, docs in gold_q.items() if qid in run}
    for name in ("MRR@10", "hit@1", "recall@20"):
        assert abs(gold_m[name] - ir_aggregate([name], ranked_only, run)[name]) > far / 10, name
    # SEMANTICS 3: keeping the query judged only non-relevant in ir_measures' denominator
    with_unjudged = ir_qrels(data["rows"]["qrels"], drop_unjudged_relevant=False)
    assert data["only_nonrelevant"] in with_unjudged and data["only_nonrelevant"] not in gold_q
    assert abs(gold_m["hit@1"] - ir_aggregate(["hit@1"], with_unjudged, run)["hit@1"]) > far / 10
    # SEMANTICS 2: the run's own float32 scores have real ties (SQuAD's Chloroplast#34 and #35 score
    # the same for several questions, at rank 1), which bm25 broke by pid ascending when it assigned
    # ranks and trec_eval breaks by docno descending: on raw scores trec_eval's success_1 is lower
    # (0.8561 vs hit@1 0.8597 here). Also what trec_eval reports for the exported run.test.trec.
    raw: dict[str, dict[str, float]] = {}
    for qid, pid, score in zip(scored["run"]["qid"], scored["run"]["pid"], scored["run"]["score"]):
        raw.setdefault(qid, {})[pid] = float(score)
    on_raw = ir_measures.pytrec_eval.calc_aggregate([Success @ 1], gold_q, raw)[Success @ 1]
    assert gold_m["hit@1"] - on_raw > far
