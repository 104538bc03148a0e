"""A saved retriever folder loads in sentence-transformers and transformers as it is and gives the
pipeline's embeddings: ``SentenceTransformer(folder).encode_query(queries)`` /
``.encode_document([(title, text), ...])`` equal ``Retriever.encode_queries`` / ``encode_passages`` and
the corpus encoder (``encode_buffer``), with the pipeline's pooling, normalisation, per-side max lengths
and shared or separate towers; ``AutoModel``/``AutoTokenizer.from_pretrained(folder)`` give the query
tower (``passage_encoder/`` the passage tower). Folders of the old layout (``query_encoder/``) still
load, and saving over one leaves no copy of it behind."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer

from pipeline.retrieval.encode import encode_buffer
from pipeline.retrieval.hf_folders import recorded_names, save_encoder
from pipeline.retrieval.model import LEGACY_QUERY_TOWER, Retriever, RetrieverSettings, pool

TOL = 1e-5
LONG = " ".join(["the river market of the old stone bridge in winter"] * 6)  # > every max length here
QUERIES = ["who built the copper lantern?", "violin", LONG, "what is the capital of topic 3 " * 3]
TITLES = ["Article 1", "", None, "A rather long title about the harbor forest and its engine"]
TEXTS = ["The lantern was made of copper by a smith.", "A violin in the harbor.", LONG, "Short text."]


def _retriever(model_dir, settings: RetrieverSettings) -> Retriever:
    retriever = Retriever.from_pretrained(str(model_dir), settings)
    if retriever.passage_model is not None:
        # Separate towers start as copies of one encoder: make them differ, so a passage embedding
        # computed by the query tower (a wrong route) cannot pass.
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for param in retriever.passage_model.parameters():
                param.add_(0.05 * torch.randn(param.shape, generator=generator))
    return retriever


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())


@pytest.mark.parametrize(
    "pooling, similarity, shared",
    [
        ("mean", "cosine", True),  # the pipeline's default
        ("cls", "dot", False),  # the other pooling, unnormalised, a Router over two towers
        ("cls", "cosine", False),
    ],
)
def test_sentence_transformer_gives_the_pipeline_embeddings(
    tmp_path, tiny_model_dir, pooling, similarity, shared
):
    settings = RetrieverSettings(
        base="tiny",
        pooling=pooling,
        similarity=similarity,
        shared_towers=shared,
        query_max_len=8,
        passage_max_len=24,
    )
    folder = tmp_path / "retriever"
    _retriever(tiny_model_dir(tmp_path), settings).save(folder)
    # No weight written twice: one weights file per tower, where Retriever.save put it.
    weights = sorted(p.relative_to(folder).parent.as_posix() for p in folder.rglob("*.safetensors"))
    assert weights == (["."] if shared else [".", "passage_encoder"])
    assert (
        json.loads((folder / "config_sentence_transformers.json").read_text())["similarity_fn_name"]
        == similarity
    )

    pipeline = Retriever.load(folder).eval()  # as pipeline.retrieval.encode.load_retriever does
    model = SentenceTransformer(str(folder), device="cpu")
    assert model.similarity_fn_name == similarity

    queries_ref = pipeline.encode_queries(QUERIES)
    passages_ref = pipeline.encode_passages(TITLES, TEXTS)
    corpus_ref = encode_buffer(
        pipeline, TEXTS, TITLES, batch_size=3, device=torch.device("cpu"), amp=False, dtype=torch.float32
    )
    queries_st = model.encode_query(QUERIES, batch_size=3)
    pairs = [(title or "", text) for title, text in zip(TITLES, TEXTS)]
    passages_st = model.encode_document(pairs, batch_size=3)

    diffs = {
        "queries": _max_diff(queries_st, queries_ref),
        "passages": _max_diff(passages_st, passages_ref),
        "corpus encoder": _max_diff(passages_st, corpus_ref),
        "encode() = encode_document()": _max_diff(model.encode(pairs, batch_size=3), passages_ref),
    }
    print(f"max |ST - pipeline| ({pooling}, {similarity}, shared={shared}):", diffs)
    assert all(d < TOL for d in diffs.values()), diffs

    # The checks can fail: the same strings as documents (longer limit, and the passage tower when
    # separate) are not the queries' embeddings, and plain strings are not the (title, text) pairs.
    assert _max_diff(model.encode_document(QUERIES), queries_ref) > 1e-3
    assert _max_diff(model.encode_document(TEXTS), passages_ref) > 1e-3
    if similarity == "cosine":
        assert np.allclose(np.linalg.norm(queries_st, axis=1), 1.0, atol=1e-5)


def test_resaving_with_other_settings_leaves_no_stale_modules(tmp_path, tiny_model_dir):
    folder = tmp_path / "retriever"
    base = tiny_model_dir(tmp_path)
    _retriever(base, RetrieverSettings(similarity="cosine", shared_towers=False)).save(folder)
    assert (folder / "router_config.json").exists() and (folder / "2_Normalize").exists()
    _retriever(base, RetrieverSettings(similarity="dot", shared_towers=True)).save(folder)
    assert not (folder / "router_config.json").exists()
    assert not (folder / "2_Normalize" / "config.json").exists()
    assert not (folder / "passage_encoder").exists()  # the separate tower's weights
    paths = [m["path"] for m in json.loads((folder / "modules.json").read_text())]
    assert paths == ["", "1_Pooling"]
    model = SentenceTransformer(str(folder), device="cpu")
    reference = Retriever.load(folder).encode_queries(QUERIES)
    assert _max_diff(model.encode_query(QUERIES), reference) < TOL


# ---- the root is a Hugging Face model folder ---------------------------------------------------------


def _hf_embed(folder, texts, pairs=None, max_length=None, pooling="mean", normalize=True) -> np.ndarray:
    """Embeddings computed with transformers alone (AutoTokenizer + AutoModel on ``folder``)."""
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder)).eval()
    args = (texts,) if pairs is None else (pairs, texts)
    batch = tokenizer(*args, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        emb = pool(model(**batch).last_hidden_state, batch["attention_mask"], pooling)
    return (torch.nn.functional.normalize(emb, dim=-1) if normalize else emb).numpy()


@pytest.mark.parametrize("shared", [True, False])
def test_transformers_load_the_folder_root_as_the_query_tower(tmp_path, tiny_model_dir, shared):
    settings = RetrieverSettings(base="tiny", shared_towers=shared, query_max_len=8, passage_max_len=24)
    folder = tmp_path / "retriever"
    _retriever(tiny_model_dir(tmp_path), settings).save(folder)
    pipeline = Retriever.load(folder).eval()
    titles = [t or "" for t in TITLES]

    queries = _hf_embed(folder, QUERIES, max_length=settings.query_max_len)
    assert _max_diff(queries, pipeline.encode_queries(QUERIES)) < TOL
    tower = folder if shared else folder / "passage_encoder"  # the passage tower, as docs/training.md
    passages = _hf_embed(tower, TEXTS, pairs=titles, max_length=settings.passage_max_len)
    assert _max_diff(passages, pipeline.encode_passages(TITLES, TEXTS)) < TOL
    corpus = encode_buffer(
        pipeline, TEXTS, TITLES, batch_size=3, device=torch.device("cpu"), amp=False, dtype=torch.float32
    )
    assert _max_diff(passages, corpus) < TOL
    if not shared:  # the root is the query tower, not the passage tower
        wrong = _hf_embed(folder, TEXTS, pairs=titles, max_length=settings.passage_max_len)
        assert _max_diff(wrong, passages) > 1e-3

    # The root's digests cover exactly the encoder's files, not the settings, ST files or logs.
    assert recorded_names(folder) == {
        p.name for p in folder.iterdir() if p.name.startswith(("config.json", "model.", "tokenizer"))
    }


def _to_old_layout(folder) -> None:
    """Turn a saved folder into what Retriever.save wrote before the root layout: the query tower, its
    checksums.json and sentence_bert_config.json in query_encoder/, the ST modules pointing there."""
    old = folder / LEGACY_QUERY_TOWER
    old.mkdir()
    for name in sorted(recorded_names(folder)) + ["checksums.json", "sentence_bert_config.json"]:
        shutil.move(folder / name, old / name)
    modules = json.loads((folder / "modules.json").read_text())
    router = folder / "router_config.json"
    if router.exists():
        config = json.loads(router.read_text())
        config["types"] = {k if k != "." else LEGACY_QUERY_TOWER: v for k, v in config["types"].items()}
        config["structure"]["query"] = [LEGACY_QUERY_TOWER]
        router.write_text(json.dumps(config))
    else:
        modules[0]["path"] = LEGACY_QUERY_TOWER
    (folder / "modules.json").write_text(json.dumps(modules))
    assert not (folder / "config.json").exists()


@pytest.mark.parametrize("shared", [True, False])
def test_an_old_layout_folder_loads_and_saving_over_it_converts_it(tmp_path, tiny_model_dir, shared):
    folder = tmp_path / "retriever"
    _retriever(tiny_model_dir(tmp_path), RetrieverSettings(shared_towers=shared)).save(folder)
    reference = Retriever.load(folder)
    queries, passages = reference.encode_queries(QUERIES), reference.encode_passages(TITLES, TEXTS)
    _to_old_layout(folder)

    old = Retriever.load(folder)
    assert _max_diff(old.encode_queries(QUERIES), queries) == 0
    assert _max_diff(old.encode_passages(TITLES, TEXTS), passages) == 0
    model = SentenceTransformer(str(folder), device="cpu")  # its ST files as they were written
    assert _max_diff(model.encode_query(QUERIES), queries) < TOL

    old.save(folder)  # in place: the root layout, query_encoder/ gone (no second copy of the weights)
    assert not (folder / LEGACY_QUERY_TOWER).exists()
    weights = sorted(p.relative_to(folder).parent.as_posix() for p in folder.rglob("*.safetensors"))
    assert weights == (["."] if shared else [".", "passage_encoder"])
    assert _max_diff(_hf_embed(folder, QUERIES, max_length=32), queries) < TOL
    assert _max_diff(SentenceTransformer(str(folder), device="cpu").encode_query(QUERIES), queries) < TOL
    assert _max_diff(Retriever.load(folder).encode_passages(TITLES, TEXTS), passages) == 0


def test_saving_an_encoder_removes_the_files_of_the_one_saved_there_before(tmp_path, tiny_model_dir):
    folder = tmp_path / "retriever"
    retriever = _retriever(tiny_model_dir(tmp_path), RetrieverSettings())
    retriever.save(folder)
    # As if an earlier save had written sharded weights (recorded with their digests) and a log.
    shard = folder / "model-00001-of-00002.safetensors"
    shard.write_bytes(b"stale")
    checksums = json.loads((folder / "checksums.json").read_text())
    checksums["sha256"][shard.name] = "0" * 64
    (folder / "checksums.json").write_text(json.dumps(checksums))
    (folder / "train_log.jsonl").write_text("{}\n")
    (folder / ".encoder.abcdefgh.tmp").mkdir()  # a killed save's staging folder
    names = save_encoder(folder, retriever.query_model, retriever.tokenizer)
    assert not shard.exists() and shard.name not in recorded_names(folder)
    assert (folder / "train_log.jsonl").exists() and recorded_names(folder) == set(names)
    assert not list(folder.glob(".encoder.*"))


def test_a_saved_tokenizer_does_not_record_how_it_was_loaded(tmp_path, tiny_model_dir):
    # Cluster jobs load offline (HF_HUB_OFFLINE), a hand run may not: both must save the same bytes.
    source = tiny_model_dir(tmp_path)
    saved = {}
    for offline in (True, False):
        tokenizer = AutoTokenizer.from_pretrained(str(source), local_files_only=offline)
        model = AutoModel.from_pretrained(str(source))
        folder = tmp_path / f"offline_{offline}"
        save_encoder(folder, model, tokenizer)
        saved[offline] = (folder / "tokenizer_config.json").read_bytes()
        assert "local_files_only" not in json.loads(saved[offline])
        assert tokenizer.init_kwargs.get("local_files_only") == offline  # the live tokenizer untouched
    assert saved[True] == saved[False]
