"""train_layers: the top layers over cached lower-layer states give the full model's embeddings, train
only the top layers, and resume to the exact weights of an uninterrupted run (tiny model, CPU)."""

from __future__ import annotations

import pytest
import torch

from pipeline.core.config import ConfigError
from pipeline.retrieval.model import Retriever, RetrieverSettings, make_tiny_encoder
from pipeline.training.data import TrainData, TrainInputs
from pipeline.training.frozen_layers import LowerStateCache, freeze_lower, lower_states, run_layers
from pipeline.training.loop import DualEncoder, train

TEXTS = [
    "a short one",
    "a somewhat longer query about rivers and stones",
    "x",
    "the market of the winter garden and its copper lantern near the harbor",
]


@pytest.fixture(scope="module")
def three_layers(tmp_path_factory):
    return make_tiny_encoder(tmp_path_factory.mktemp("tiny3"), seed=2, layers=3)


def _retriever(folder, **kw) -> Retriever:
    settings = RetrieverSettings(
        base=str(folder), temperature=0.1, query_max_len=24, passage_max_len=32, **kw
    )
    r = Retriever.from_pretrained(str(folder), settings)
    r.eval()
    return r


@pytest.mark.parametrize("frozen", [0, 1, 2, 3])
def test_upper_layers_over_lower_states_equal_the_full_forward(three_layers, frozen):
    r = _retriever(three_layers)
    batch = r.tokenize_queries(TEXTS)
    full = r.query_model(**batch).last_hidden_state
    states = lower_states(r.query_model, batch, frozen)
    split = run_layers(r.query_model, states, batch["attention_mask"], frozen)
    mask = batch["attention_mask"].bool()
    assert torch.allclose(full[mask], split[mask], atol=1e-5)


def test_cached_rows_are_repadded_per_batch_and_embed_like_the_model(three_layers):
    r = _retriever(three_layers)
    cache = LowerStateCache(r.query_model, 2, lambda items: r.tokenize_queries(items))
    model = DualEncoder(r, frozen=2)
    hidden, mask = cache.batch(TEXTS, TEXTS, torch.device("cpu"))
    lengths = r.tokenize_queries(TEXTS)["attention_mask"].sum(1).tolist()
    assert len(cache.states) == len(TEXTS) and mask.sum(1).tolist() == lengths
    via_cache = model._upper(r.query_model, {"hidden": hidden, "attention_mask": mask})
    direct = r.embed_queries(r.tokenize_queries(TEXTS))
    assert torch.allclose(via_cache, direct, atol=1e-5)
    # A text's rows do not depend on the batch it first came in (padding is trimmed, then re-padded).
    alone, alone_mask = cache.batch([TEXTS[2]], [TEXTS[2]], torch.device("cpu"))
    assert alone.shape[1] == int(alone_mask.sum())
    single = model._upper(r.query_model, {"hidden": alone, "attention_mask": alone_mask})
    assert torch.allclose(single, direct[2:3], atol=1e-5)


def test_freeze_checks_the_layer_count_and_the_cache_its_cap(three_layers):
    r = _retriever(three_layers)
    with pytest.raises(ConfigError, match="between 1 and the encoder's 3 layers"):
        freeze_lower(r.query_model, 4)
    cache = LowerStateCache(r.query_model, 1, lambda items: r.tokenize_queries(items), max_cache_gb=1e-9)
    with pytest.raises(ConfigError, match="cap"):
        cache.batch(TEXTS, TEXTS, torch.device("cpu"))


@pytest.fixture(scope="module")
def data(tmp_path_factory, make_train_files):
    paths = make_train_files(tmp_path_factory.mktemp("frozen-data"))
    return TrainData(TrainInputs(**paths), depth=5, seed=3)


@pytest.fixture
def frozen_config(resume_config):
    """The resume tests' config with the lower layers frozen (train_layers 1), NCE, no weight decay."""
    return lambda **kw: resume_config(beta=0.0, weight_decay=0.0, train_layers=1, **kw)


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_only_the_top_layers_train(frozen_config, three_layers, data, tmp_path):
    r = _retriever(three_layers)
    start = _weights(r)
    train(r, data, frozen_config(), checkpoint_dir=tmp_path / "ckpt")
    end = _weights(r)
    moved = {name for name in start if not torch.equal(start[name], end[name])}
    assert moved and all(name.startswith("query_model.encoder.layer.2.") for name in moved), sorted(moved)


def test_killed_run_with_train_layers_resumes_to_identical_weights(
    frozen_config, three_layers, data, tmp_path, train_until_crash
):
    reference = _retriever(three_layers)
    train(reference, data, frozen_config(), checkpoint_dir=tmp_path / "ref.ckpt")

    train_until_crash(_retriever(three_layers), data, frozen_config(), tmp_path / "run.ckpt")
    resumed = _retriever(three_layers)  # a new process: a fresh model and an empty cache
    summary = train(resumed, data, frozen_config(), checkpoint_dir=tmp_path / "run.ckpt")
    assert summary["start_step"] == 3
    ref, res = _weights(reference), _weights(resumed)
    for name in ref:
        assert torch.equal(ref[name], res[name]), name
