"""Config loading and validation: overlays deep-merge; unknown or mistyped keys name the key path."""

from __future__ import annotations

import pytest
import yaml

from pipeline.core.config import ConfigError, deep_merge, load_config, validate_config


def test_default_config_is_valid():
    config = load_config()
    assert "synthkb" in config["datasets"]
    assert config["bm25"]["k1"] == 0.9


def test_overlay_deep_merges(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "bm25": {"k1": 1.2},
                "datasets": {
                    "squad36": {
                        "format": "squad",
                        "source": "../shared/data/squad/x.json.gz",
                        "split": "none",
                    }
                },
            }
        )
    )
    config = load_config([overlay])
    assert config["bm25"]["k1"] == 1.2 and config["bm25"]["b"] == 0.4  # sibling kept
    assert "synthkb" in config["datasets"] and "squad36" in config["datasets"]


def test_deep_merge_does_not_mutate_inputs():
    base = {"a": {"b": 1}}
    merged = deep_merge(base, {"a": {"c": 2}})
    assert merged == {"a": {"b": 1, "c": 2}} and base == {"a": {"b": 1}}


def test_unknown_key_is_named_with_its_path():
    config = load_config()
    config["bm25"]["k3"] = 1.0
    with pytest.raises(ConfigError) as err:
        validate_config(config)
    assert "bm25" in str(err.value) and "'k3'" in str(err.value) and "k1" in str(err.value)


def test_unknown_top_level_key():
    config = load_config()
    config["bm52"] = {}
    with pytest.raises(ConfigError, match="bm52"):
        validate_config(config)


def test_wrong_type_names_the_key():
    config = load_config()
    config["bm25"]["b"] = "high"
    with pytest.raises(ConfigError, match=r"bm25\.b"):
        validate_config(config)


def test_an_unknown_hybrid_select_split_is_refused_at_validation():
    # issue 39.11: `hybrid.select_split: foo` passed validation and surfaced at DAG building as a
    # MissingInputException for queries.foo.parquet
    config = load_config()
    config["hybrid"]["select_split"] = "foo"
    with pytest.raises(ConfigError, match=r"hybrid\.select_split"):
        validate_config(config)


def test_dataset_needs_a_known_format_and_a_source():
    config = load_config()
    config["datasets"]["mine"] = {"format": "csv", "source": "x"}
    with pytest.raises(ConfigError, match=r"datasets\.mine\.format"):
        validate_config(config)
    config["datasets"]["mine"] = {"format": "squad"}
    with pytest.raises(ConfigError, match="source"):
        validate_config(config)


def test_bad_yaml_names_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("bm25: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_config([bad])


@pytest.mark.parametrize(
    "text, where",
    [
        ("seed: 1\nbm25: [unclosed\n", "line 3, column 1"),
        ('{"seed": 1,\n "bm25": {"k1" 1}}\n', "line 2, column"),
        # a key repeated in one mapping is refused, not silently overwritten (YAML and JSON)
        ("eval:\n  ks: [1, 5]\n  depth: 50\n  ks: [10]\n", "line 4, column 3: key 'ks' given twice"),
        ('{"dpr": {"lr": 0.5}, "dpr": {"max_steps": 3}}', "key 'dpr' given twice in one object"),
    ],
)
def test_a_config_parser_error_is_one_line_with_its_position(tmp_path, text, where):
    # issue 28.11: PyYAML's message spans lines with excerpts of the text (JSON overlays too)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config([bad])
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{bad}: {where}"), message


@pytest.mark.parametrize(
    "source, key",
    [
        ({"url": "ftp://ftp.example.org/dev.json"}, "datasets.mine.source.url"),
        ({"corpus": {"url": "file:///data/c.tsv"}, "test": "t.qa.csv"}, "datasets.mine.source.corpus.url"),
    ],
)
def test_a_url_the_downloader_cannot_fetch_is_refused_naming_the_key_and_the_schemes(source, key):
    # issue 28.7: ftp:// passed the schema, then the downloader retried 5 times (71 s) and gave up
    config = load_config()
    config["datasets"]["mine"] = {"format": "dpr" if "corpus" in source else "squad", "source": source}
    with pytest.raises(ConfigError) as err:
        validate_config(config)
    message = str(err.value)
    assert f"config key '{key}'" in message and "http://" in message and "https://" in message, message


@pytest.mark.parametrize("imported_first", [True, False])
def test_a_stage_logs_no_weight_loading_bar(tmp_path, imported_first):
    """issue 27.3: each model load drew a "Loading weights" tqdm bar, one line each in a job's log;
    whether the stage imported transformers before start_stage (most do) or after."""
    import subprocess
    import sys

    from pipeline.retrieval.model import make_tiny_encoder

    folder = make_tiny_encoder(tmp_path / "tiny")
    code = (
        ("import transformers\n" if imported_first else "")
        + "from pipeline.core.cli import start_stage\n"
        + "start_stage(None)\n"
        + "from transformers import AutoModel\n"
        + f"AutoModel.from_pretrained({str(folder)!r})\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Loading weights" not in proc.stdout + proc.stderr


def test_a_library_logger_at_debug_does_not_reach_the_stage_log(tmp_path, capsys):
    """issue 27.3: bm25s sets its own logger to DEBUG; its records printed through the stage's handlers."""
    import logging

    from pipeline.core.cli import setup_logging

    root = logging.getLogger()
    saved, saved_level = root.handlers[:], root.level
    try:
        setup_logging(str(tmp_path / "stage.log"))
        chatty = logging.getLogger("some_library")
        chatty.setLevel(logging.DEBUG)
        chatty.debug("Building index from IDs")
        logging.getLogger("sieve.test").info("indexed")
        for handler in root.handlers:
            handler.flush()
        text = (tmp_path / "stage.log").read_text() + capsys.readouterr().out
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
            handler.close()
        root.handlers[:] = saved
        root.setLevel(saved_level)
    assert "indexed" in text and "Building index" not in text
