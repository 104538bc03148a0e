"""The train_dense CLI: --init-only folders, a short training run, CCR continuing from it, bad input."""

import json

import pytest
from stage_args import flags

from pipeline.core.cli import run_main
from pipeline.retrieval.model import Retriever
from pipeline.training.train_dense import main


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, make_train_files, tiny_model_dir):
    root = tmp_path_factory.mktemp("cli")
    paths = make_train_files(root / "data")
    return root, paths, tiny_model_dir(root)


def _data_args(paths):
    return flags(paths, "queries", "qrels", "negatives", "corpus")


def test_init_only_writes_a_retriever_folder(inputs, tmp_path):
    _, _, tiny = inputs
    out = tmp_path / "zeroshot"
    assert main(["--init-only", *flags(base=tiny, similarity="dot", passage_max_len=64, out=out)]) == 0
    model = Retriever.load(out)
    assert model.settings.similarity == "dot" and model.settings.passage_max_len == 64
    assert not (out / "train_log.jsonl").exists()


def test_dpr_then_ccr(inputs, tmp_path):
    _, paths, tiny = inputs
    dpr = tmp_path / "dpr"
    options = flags(
        init=tiny, out=dpr, batch_size=4, max_steps=3, checkpoint_every=2, temperature=0.1, threads=1
    )
    assert main([*_data_args(paths), *options]) == 0
    assert (dpr / "retriever.json").exists() and not (tmp_path / "dpr.ckpt").exists()
    log = [json.loads(line) for line in (dpr / "train_log.jsonl").open()]
    assert [r["step"] for r in log] == [1, 2, 3]
    assert all(r["loss"] == pytest.approx(r["nce"]) for r in log)  # β = 0: the loss is NCE

    ccr = tmp_path / "dpr_ccr_b0.5"
    options = flags(
        init=dpr, out=ccr, batch_size=4, max_steps=2, beta=0.5, hard_negatives=3, similarity="cosine"
    )
    assert main([*_data_args(paths), *options, "--no-in-batch", *flags(temperature=1, threads=1)]) == 0
    model = Retriever.load(ccr)
    assert model.settings.temperature == 1.0 and model.settings.passage_max_len == 128
    info = json.loads((ccr / "train_info.json").read_text())
    assert info["config"]["beta"] == 0.5 and info["config"]["in_batch"] is False
    log = [json.loads(line) for line in (ccr / "train_log.jsonl").open()]
    assert all(r["loss"] == pytest.approx(r["nce"] - 0.5 * r["ccr"], abs=1e-5) for r in log)

    # Each folder says what it is: a model card with the hub's metadata block, the base it started
    # from, its loss, its data and how to load it; the same settings write the same card.
    card = (ccr / "README.md").read_text()
    assert card.startswith("---\nbase_model: ") and "library_name: sentence-transformers" in card
    assert f"Trained from `{dpr}` for 2 optimizer steps with NCE plus contrastive confidence" in card
    assert "beta = 0.5" in card and "contrastive-confidence-regularization" in card
    assert f"- hard negatives: `{paths['negatives']}`" in card
    assert "SentenceTransformer(" in card and "| temperature | 1.0 |" in card
    assert (
        "Trained from" in (dpr / "README.md").read_text()
        and "contrastive NCE" in (dpr / "README.md").read_text()
    )
    again = tmp_path / "again"
    assert (
        main([*_data_args(paths), *options, "--no-in-batch", *flags(temperature=1, threads=1, out=again)])
        == 0
    )
    assert (again / "README.md").read_text() == card


def test_bad_input_exits_2_with_the_file_named(inputs, tmp_path, capsys):
    _, paths, tiny = inputs
    args = ["--init", str(tiny), *_data_args(paths), "--out", str(tmp_path / "m"), "--max-steps", "1"]
    args[args.index("--negatives") + 1] = str(tmp_path / "missing.parquet")
    with pytest.raises(SystemExit) as exc:
        run_main(main, args)
    assert exc.value.code == 2
    assert "missing.parquet" in capsys.readouterr().err


def test_too_few_queries_for_one_step_is_a_config_error(inputs, tmp_path):
    _, paths, tiny = inputs
    with pytest.raises(SystemExit) as exc:
        run_main(
            main,
            ["--init", str(tiny), *_data_args(paths), "--out", str(tmp_path / "m"), "--batch-size", "64"],
        )
    assert exc.value.code == 2


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_non_finite_learning_rate_is_a_config_error_naming_the_flag(inputs, tmp_path, capsys, value):
    # issue 28.2: refused by the settings contract before any input is read, with no traceback
    _, paths, tiny = inputs
    with pytest.raises(SystemExit) as exc:
        run_main(
            main, ["--init", str(tiny), *_data_args(paths), "--out", str(tmp_path / "m"), f"--lr={value}"]
        )
    assert exc.value.code == 2
    assert "config key 'train.lr': Input should be a finite number" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
