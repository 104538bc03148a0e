"""The whole configuration: ``Config`` (every section's contract), the sections whose defaults fill a
config (``SECTIONS``), the JSON schema, and filling and reading sections of a config.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, Optional

from pydantic import Field, ValidationInfo, field_validator

from pipeline.ar2.settings import Ar2Settings
from pipeline.core.settings.base import (
    MAX_RUNS,
    RESERVED_FOLDERS,
    Contract,
    MethodName,
    Name,
    Seed,
    Unique,
)
from pipeline.core.settings.validation import from_dict
from pipeline.data.settings import DatasetSpec, RecipeSpec
from pipeline.evaluation.settings import (
    EvalSettings,
    SelectionSettings,
    SweepSettings,
    TournamentSettings,
)
from pipeline.retrieval.settings import (
    Bm25Settings,
    EncodeSettings,
    HybridSettings,
    IndexSettings,
    ModelSettings,
    SearchSettings,
)
from pipeline.sieve.settings import CleanSpec, SieveSettings
from pipeline.training.settings import CcrSettings, DprSettings


class Config(Contract):
    """The whole configuration (config.yaml deep-merged with overlays)."""

    seed: Seed = Field(0, description="names result folders (-s<seed>, seed<seed>)")
    seeds: Optional[Unique(Seed, 1, MAX_RUNS)] = Field(
        None,
        description="training seeds of every trained method (null = [seed]); datasets.<d>.seeds overrides "
        "per dataset, ar2.seeds for AR2",
    )
    methods: Unique(MethodName) = Field(
        description="methods that results/{dataset}/metrics.json builds and gathers"
    )
    recipes: dict[Name, RecipeSpec] = Field(
        {"demo": {}}, description="named training recipes (docs/recipes.md)"
    )
    datasets: Annotated[dict[Name, DatasetSpec], Field(min_length=1)]
    clean: dict[Name, CleanSpec] = Field(
        {}, description="hard-negative datasets of your own to clean: results/<name>/clean/ (docs/clean.md)"
    )
    eval: EvalSettings = EvalSettings()
    bm25: Bm25Settings = Bm25Settings()
    model: ModelSettings = ModelSettings()
    dpr: DprSettings = DprSettings()
    ccr: CcrSettings = CcrSettings()
    encode: EncodeSettings = EncodeSettings()
    index: IndexSettings = IndexSettings()
    search: SearchSettings = SearchSettings()
    hybrid: HybridSettings = HybridSettings()
    selection: SelectionSettings = SelectionSettings()
    sweep: SweepSettings = SweepSettings()
    tournament: TournamentSettings = TournamentSettings()
    sieve: SieveSettings = SieveSettings()
    ar2: Ar2Settings = Ar2Settings()

    @field_validator("datasets", "clean")
    @classmethod
    def _not_a_shared_folder(cls, named: dict, info: ValidationInfo) -> dict:
        # resources/<name>/ and results/<name>/ are a dataset's; these folders beside them belong to
        # the workflow (fetched models, prefetch summaries, content fingerprints, the sweeps).
        taken = sorted(set(named) & RESERVED_FOLDERS)
        if taken:
            raise ValueError(
                f"{', '.join(map(repr, taken))} names a folder the workflow keeps beside the datasets' "
                f"under resources/ and results/ ({', '.join(sorted(RESERVED_FOLDERS))}): choose another name"
            )
        return named

    @field_validator("index")
    @classmethod
    def _index_parts(cls, index: IndexSettings, info: ValidationInfo) -> IndexSettings:
        # An index part is a group of embedding shards: more parts than shards stopped build_index after
        # the corpus had been encoded.
        encode = info.data.get("encode")
        if encode is not None and index.shards > encode.shards:
            raise ValueError(
                f"shards {index.shards} is more than encode.shards {encode.shards}: an index part is a "
                "group of embedding shards; lower index.shards or raise encode.shards"
            )
        return index


# Config section -> its contract (the sections whose defaults fill every config).
SECTIONS: dict[str, type[Contract]] = {
    name: Config.model_fields[name].annotation
    for name in (
        "eval",
        "bm25",
        "model",
        "dpr",
        "ccr",
        "encode",
        "index",
        "search",
        "hybrid",
        "selection",
        "sweep",
        "tournament",
        "sieve",
        "ar2",
    )
}
TOP_LEVEL_DEFAULTS: dict[str, Any] = {
    key: Config.model_fields[key].default for key in ("seed", "seeds", "recipes", "clean")
}


def config_schema() -> dict:
    """The JSON schema of a config (workflow/schemas/config.schema.json is this, committed)."""
    schema = Config.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def defaults(cls: type[Contract]) -> dict[str, Any]:
    """The defaults of a section as plain config data (nested sections as dicts)."""
    return cls().model_dump()


def apply_defaults(config: dict) -> dict:
    """Fill, in place, every key of every section that the config leaves out; return ``config``.

    Values already present win, as given (an overlay's choice is never overwritten or converted);
    nested sections merge.
    """
    for key, value in TOP_LEVEL_DEFAULTS.items():
        config.setdefault(key, copy.deepcopy(value))
    for name, cls in SECTIONS.items():
        current = config.get(name, {})
        if isinstance(current, dict):  # anything else is left for validation to reject
            config[name] = _merge_defaults(defaults(cls), current)
    return config


def _merge_defaults(default: dict, given: dict) -> dict:
    out = dict(given)
    for key, value in default.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = _merge_defaults(value, out[key])
    return out


def section(config: dict, name: str) -> Contract:
    """The section ``name`` of a (defaults-filled) config as its contract."""
    return from_dict(SECTIONS[name], config.get(name) or {}, name)
