"""The file layout of the workflow: every rule names its files through these functions, so a location is
written once (docs/usage.md "Data layout").

Called with wildcard names ("{dataset}", "{split}", ...) they return the rules' patterns; called with
values, the concrete paths that input functions ask for. logs/ and benchmarks/ are per rule and stay in
the rules. Paths are relative to Snakemake's working directory.
"""

from __future__ import annotations

# The download layout is the data family's (pipeline.data.readers.sources): the readers need it below
# the workflow, and the rules name it from here with every other path.
from pipeline.data.readers.sources import archive_member, source_file  # noqa: F401

__all__ = [
    "dataset_dir",
    "corpus",
    "queries",
    "qrels",
    "qrels_all",
    "shipped_negatives",
    "dataset_manifest",
    "fingerprint_path",
    "prefetch_summary",
    "source_file",
    "archive_member",
    "bm25_index",
    "bm25_index_checksums",
    "run_dir",
    "run",
    "trec_qrels",
    "trec_run",
    "method_metrics",
    "per_query",
    "ar2_info",
    "dataset_metrics",
    "negatives",
    "mining_run",
    "train_negatives",
    "relabel_qrels",
    "model_dir",
    "retriever",
    "ranker",
    "embeddings_dir",
    "embeddings",
    "embedding_shard",
    "index_dir",
    "index",
    "sieve_dir",
    "candidates",
    "dev_candidates",
    "filter_decisions",
    "filter_report",
    "sieve_losses",
    "comparison",
    "sweep_output",
    "tradeoff",
    "figure",
    "sieve_figure",
    "cleaned",
    "clean_file",
    "ar2_seed_dir",
    "ar2_round_dir",
    "ar2_start_file",
    "ar2_trained_ranker",
    "ar2_round_json",
]


# resources/{dataset}/: the canonical tables of a dataset (docs/usage.md "Data layout", pipeline.core.schemas).
def dataset_dir(d: str) -> str:
    return f"resources/{d}"


def corpus(d: str) -> str:
    return f"{dataset_dir(d)}/corpus.parquet"


def queries(d: str, split: str) -> str:
    return f"{dataset_dir(d)}/queries.{split}.parquet"


def qrels(d: str, split: str) -> str:
    return f"{dataset_dir(d)}/qrels.{split}.parquet"


def qrels_all(d: str, split: str) -> str:
    """synthkb only: every passage that states the answer (qrels holds the generating one)."""
    return f"{dataset_dir(d)}/qrels_all.{split}.parquet"


def shipped_negatives(d: str) -> str:
    """Negatives that come with the dataset (DPR's hard_negative_ctxs), not mined ones."""
    return f"{dataset_dir(d)}/negatives.train.parquet"


def dataset_manifest(d: str) -> str:
    return f"{dataset_dir(d)}/manifest.json"


def fingerprint_path(name: str) -> str:
    """The content digest of a local base folder or source file (content.smk's rule fingerprint)."""
    return f"resources/fingerprints/{name}.json"


def prefetch_summary(d: str) -> str:
    """What dataset ``d``'s prefetch fetched, with sizes (prefetch.smk); the target a user asks for."""
    return f"resources/prefetch/{d}.json"


# downloads/: fetched sources, keyed by what they are, never by the dataset that declared them first
# (pipeline.data.readers.sources computes the keys and names; docs/data.md "Downloads").
# results/{dataset}/: everything derived.
def bm25_index(d: str) -> str:
    return f"results/{d}/bm25/index"


def bm25_index_checksums(d: str) -> str:
    """The BM25 index's declared output: the sha256 of each of its files, written last (a
    directory() output is judged by its mtime alone, so a copy of results/ reran every job after it;
    a small file Snakemake compares by checksum once it is newer)."""
    return f"{bm25_index(d)}/checksums.json"


def run_dir(d: str, method: str, seed: int | str | None = None) -> str:
    """A method's run folder; an AR2 method has one per seed (results/{d}/{method}/seed{s})."""
    return f"results/{d}/{method}" if seed is None else f"results/{d}/{method}/seed{seed}"


def run(d: str, method: str, split: str, seed: int | str | None = None) -> str:
    return f"{run_dir(d, method, seed)}/run.{split}.parquet"


def trec_qrels(d: str, split: str, judged: str = "qrels") -> str:
    """A split's judgements in TREC format beside the TREC runs (judged: qrels, or synthkb's qrels_all)."""
    return f"results/{d}/{judged}.{split}.trec"


def trec_run(d: str, method: str, split: str, seed: int | str | None = None) -> str:
    return f"{run_dir(d, method, seed)}/run.{split}.trec"


def method_metrics(d: str, method: str, seed: int | str | None = None) -> str:
    return f"{run_dir(d, method, seed)}/metrics.json"


def per_query(d: str, method: str, seed: int | str | None = None) -> str:
    """Each query's value of every metric of the metrics.json beside it (evaluate --per-query)."""
    return f"{run_dir(d, method, seed)}/per_query.parquet"


def ar2_info(d: str, method: str, seed: int | str) -> str:
    """The round an AR2 seed's run reports (written by ar2_select)."""
    return f"{run_dir(d, method, seed)}/info.json"


def dataset_metrics(d: str, ext: str = "json") -> str:
    """Every method side by side: metrics.json, .md, .html, .png (a figure)."""
    return f"results/{d}/metrics.{ext}"


def negatives(d: str, source: str) -> str:
    """Mined (bm25) or sieved (sieve_b<β>) candidates, one row per candidate."""
    return f"results/{d}/negatives/{source}.parquet"


def mining_run(d: str, method: str, split: str = "train") -> str:
    """A dense method's ranking of the train queries that mine_dense_negatives mines from."""
    return f"results/{d}/negatives/{method}.run.{split}.parquet"


def train_negatives(d: str, source: str) -> str:
    """The kept negatives of a sieve, in the layout of negatives(d, 'bm25')."""
    return f"results/{d}/negatives/{source}.train.parquet"


def relabel_qrels(d: str, source: str) -> str:
    """The train qrels with the candidates a detector dropped as extra positives (dpr_relabel_<detector>)."""
    return f"results/{d}/negatives/{source}.relabel.qrels.parquet"


def model_dir(d: str, name: str) -> str:
    return f"results/{d}/models/{name}"


def retriever(d: str, name: str) -> str:
    """retriever.json, written last: the model folder is complete once it exists."""
    return f"{model_dir(d, name)}/retriever.json"


def ranker(d: str, name: str) -> str:
    return f"{model_dir(d, name)}/ranker.json"


def embeddings_dir(d: str, model: str) -> str:
    return f"results/{d}/embeddings/{model}"


def embeddings(d: str, model: str) -> str:
    """The gathered embeddings' manifest (the shards sit beside it)."""
    return f"{embeddings_dir(d, model)}/manifest.json"


def embedding_shard(d: str, model: str, shard: int | str, shards: int | str, ext: str) -> str:
    return f"{embeddings_dir(d, model)}/shard{shard}of{shards}.{ext}"


def index_dir(d: str, model: str) -> str:
    return f"results/{d}/index/{model}"


def index(d: str, model: str) -> str:
    return f"{index_dir(d, model)}/index.json"


def sieve_dir(d: str) -> str:
    return f"results/{d}/sieve"


def candidates(d: str, tag: str) -> str:
    """The candidates every filter judges, with their false-negative labels. ``tag``: the sieve
    settings they were drawn with (pipeline.core.methods.sieve_tag; '' at the defaults)."""
    return f"{sieve_dir(d)}/candidates{tag}.parquet"


def dev_candidates(d: str, tag: str) -> str:
    """The dev queries' candidates, drawn as the train ones from the source's dev run: where
    positive_aware_dev picks its margin."""
    return f"{sieve_dir(d)}/candidates{tag}.dev.parquet"


# A filter's files are named by its negatives' name: the filter plus its sieve tag (filter_negatives).
def filter_decisions(d: str, name: str) -> str:
    return f"{sieve_dir(d)}/{name}/decisions.parquet"


def filter_report(d: str, name: str) -> str:
    return f"{sieve_dir(d)}/{name}/report.json"


def sieve_losses(d: str, name: str) -> str:
    return f"{sieve_dir(d)}/{name}/losses.parquet"


def comparison(d: str, ext: str, tag: str) -> str:
    return f"{sieve_dir(d)}/comparison{tag}.{ext}"


def sweep_output(name: str, ext: str) -> str:
    """A sweep over datasets (sweep.smk): results/sweeps/{name}.{json,png}."""
    return f"results/sweeps/{name}.{ext}"


def tradeoff(d: str, ext: str, tag: str) -> str:
    """FN recall vs TN retention of the filters with a continuous score (sieve_tradeoff)."""
    return f"{sieve_dir(d)}/tradeoff{tag}.{ext}"


def figure(d: str, name: str) -> str:
    return f"results/{d}/figures/{name}"


def sieve_figure(d: str, name: str, tag: str) -> str:
    """Figure 1 and the sieve's other figures, per sieve setting (sieve_figures writes them together)."""
    return f"results/{d}/figures{tag}/{name}"


# results/{name}/clean/: a hard-negative dataset of the user's, cleaned (config clean.<name>, docs/clean.md).
def cleaned(name: str, ext: str) -> str:
    """The cleaned dataset, in its source's container (``ext``: jsonl, json, parquet, csv)."""
    return f"results/{name}/clean/cleaned.{ext}"


def clean_file(name: str, ext: str, what: str) -> str:
    """Beside it: ``decisions.parquet`` (every negative's verdict), ``report.json``, ``report.md``."""
    return f"{cleaned(name, ext)}.{what}"


def ar2_seed_dir(d: str, variant: str, seed: int | str) -> str:
    return f"results/{d}/ar2/{variant}/seed{seed}"


def ar2_round_dir(d: str, variant: str, seed: int | str, r: int | str) -> str:
    return f"{ar2_seed_dir(d, variant, seed)}/round{r}"


def ar2_start_file(d: str, name: str) -> str:
    """What every AR2 variant and seed of a dataset shares: DPR's mined train candidates (round 1's
    negatives) and DPR's dev evaluation (round 0)."""
    return f"results/{d}/ar2/start/{name}"


def ar2_trained_ranker(d: str, seed: int | str) -> str:
    """The ranker round 1 starts from with ar2.ranker_init listwise (ar2_train_ranker)."""
    return f"results/{d}/ar2/ranker/seed{seed}/ranker.json"


def ar2_round_json(d: str, variant: str, seed: int | str, r: int | str) -> str:
    """Written last by an AR2 round: the round is complete once it exists."""
    return f"{ar2_seed_dir(d, variant, seed)}/round{r}/round.json"
