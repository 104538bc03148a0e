"""Sections datasets and recipes: a dataset's reader (format), its source files (a path, a URL or an
archive member) and split, the synthkb generator's settings, and a named recipe's partial sections.
"""

from __future__ import annotations

import posixpath
from typing import Annotated, Any, Literal, Optional, Union
from urllib.parse import unquote, urlparse

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from pipeline.core.settings.base import MAX_ENTITIES, MAX_RUNS, Contract, MethodName, Seed, Share, Unique

# ---- datasets and recipes -----------------------------------------------------------------------


def _file_form(value: Any) -> str:
    if isinstance(value, dict):
        return "file-path" if "path" in value and "url" not in value else "file-url"
    return "file-name"


# What pipeline.data.download can fetch (requests: HTTP only). Checked here, at start-up, because
# the downloader met another scheme only after its retries, with a "run again to resume".
URL_SCHEMES = ("http://", "https://")


def unsupported_url(url: str) -> str | None:
    """Why ``url`` cannot be downloaded, or None when it can."""
    if url.startswith(URL_SCHEMES):
        return None
    scheme = url.partition("://")[0] + "://" if "://" in url else "no scheme"
    return (
        f"{url!r}: {scheme} is not supported; downloads support {' and '.join(URL_SCHEMES)} "
        "(fetch other files yourself and give their local path)"
    )


class UrlFile(Contract):
    url: str = Field(pattern=r"^https?://")
    sha256: Optional[str] = Field(
        None,
        pattern=r"^[0-9a-f]{64}$",
        description="sha256 of the downloaded file (of the archive when member is set)",
    )
    member: Optional[str] = Field(
        None, min_length=1, description="file to extract from the .tar/.tar.gz/.zip archive at url"
    )

    @field_validator("url", mode="before")
    @classmethod
    def _downloadable(cls, url: Any) -> Any:
        # Before the pattern: its message would not say which schemes there are.
        problem = unsupported_url(url) if isinstance(url, str) else None
        if problem:
            raise ValueError(problem)
        return url

    @model_validator(mode="after")
    def _archive_name(self) -> "UrlFile":
        # An archive URL ending in '..' or '.' names no file: surely a typo (it named downloads/<dataset>
        # itself before downloads were keyed by URL; readers.sources.file_name now names it 'download').
        if self.member is not None:
            name = posixpath.basename(unquote(urlparse(self.url).path))
            if name in (".", ".."):
                raise ValueError(
                    f"{self.url!r}: an archive URL must end in a file name, not {name!r} "
                    "(it names the downloaded archive)"
                )
        return self


class PathFile(Contract):
    path: str = Field(min_length=1)
    member: Optional[str] = Field(
        None, min_length=1, description="file to extract from the local .tar/.tar.gz/.zip archive at path"
    )


# A local path (relative to the repository root; plain or gzipped), a URL (downloaded to
# downloads/by-url/<key>/<name>, resumable), or one member of a .tar/.tar.gz/.zip archive. docs/data.md.
FileSpec = Annotated[
    Union[
        Annotated[Annotated[str, Field(min_length=1)], Tag("file-name")],
        Annotated[UrlFile, Tag("file-url")],
        Annotated[PathFile, Tag("file-path")],
    ],
    Discriminator(_file_form),
]
# role -> file (multi-file formats); in the schema not itself a single file spec (no url/path key).
Roles = Annotated[
    dict[Annotated[str, Field(pattern=r"^[a-z_]+$")], FileSpec],
    Field(
        json_schema_extra={
            "additionalProperties": False,
            "not": {"anyOf": [{"required": ["url"]}, {"required": ["path"]}]},
        }
    ),
]


def _source_form(value: Any) -> str:
    if isinstance(value, dict) and "url" not in value and "path" not in value:
        return "file-roles"  # role -> file (multi-file formats)
    return "file-single"


Source = Annotated[
    Union[Annotated[FileSpec, Tag("file-single")], Annotated[Roles, Tag("file-roles")]],
    Discriminator(_source_form),
]


class SplitUnits(Contract):
    """Queries are split by a seeded hash of their unit: the first round(test*n) units are test, the
    next round(dev*n) dev, the rest train (a split with a fraction > 0 gets at least one unit)."""

    by: Literal["article", "entity", "query"] = Field(
        description="unit kept whole within one split (article: squad; entity: synthkb)"
    )
    dev: float = Field(0.0, ge=0, le=1)
    test: float = Field(0.0, ge=0, le=1)
    seed: Seed = 0

    @model_validator(mode="after")
    def _fractions(self) -> "SplitUnits":
        if self.dev + self.test > 1.0 + 1e-9:  # was found only by the job that splits
            raise ValueError(f"dev + test = {self.dev + self.test:g} > 1")
        return self


Split = Annotated[
    Union[Annotated[Literal["none"], Tag("split-none")], Annotated[SplitUnits, Tag("split-units")]],
    Discriminator(lambda v: "split-units" if isinstance(v, dict) else "split-none"),
]
SYNTHKB_ONLY = ("entities", "seed", "positive", "fn_share", "fn_paraphrase")
SPLIT_UNITS = {"squad": ("article", "query"), "synthkb": ("entity", "query")}  # formats split by rule


class DatasetSpec(Contract):
    """One dataset: its reader (format) and source, or the synthkb generator's settings."""

    format: Literal["dpr", "msmarco", "squad", "beir", "synthkb"]
    source: Optional[Source] = None
    split: Split = Field(
        "none",
        description="none: every query is a test query; synthkb's default: "
        "{by: entity, dev: 0.1, test: 0.2, seed: 0}",
    )
    entities: Optional[int] = Field(
        None, ge=10, le=MAX_ENTITIES, description="synthkb only: number of entities (~7.2 passages each)"
    )
    seed: Seed = Field(0, description="synthkb only: generator seed")
    positive: Literal["named_article", "source"] = Field(
        "named_article", description="synthkb only: the stating passage qrels annotates (docs/synthkb.md)"
    )
    fn_share: Optional[Share] = Field(
        None,
        description="synthkb only: the false-negative dial; null = the generator's own restatement rates",
    )
    fn_paraphrase: Share = Field(
        0.0, description="synthkb only: share of false negatives without the answer string"
    )
    eval_split: Optional[Literal["train", "dev", "test"]] = Field(None, description="null = eval.split")
    # Seeds are a budget per dataset: one NQ training takes what 2,000 synthkb trainings take, and a
    # comparison adds seeds where its intervals overlap, not everywhere.
    seeds: Optional[Unique(Seed, 1, MAX_RUNS)] = Field(
        None, description="training seeds of this dataset's trained methods; null = the top-level seeds"
    )
    recipe: str = Field(
        "demo", description="the recipe (config recipes.<name>) that sets its training settings"
    )
    empty_positives: Literal["error", "drop"] = Field(
        "error",
        description="a DPR/Tevatron record without positives: error stops the preparation; drop leaves it out",
    )

    @model_validator(mode="after")
    def _format_keys(self) -> "DatasetSpec":
        given = self.model_fields_set
        # Which formats split by rule, and by what, was known only to the job that splits (prepare,
        # the generator): `snakemake -n` passed a DPR dataset with a split or synthkb split by article.
        units = SPLIT_UNITS.get(self.format, ())
        if isinstance(self.split, SplitUnits) and self.split.by not in units:
            if not units:
                raise ValueError(
                    f"split: only squad and synthkb datasets are split by rule; {self.format} takes "
                    "its splits from its files (split: none)"
                )
            raise ValueError(
                f"split.by: a {self.format} dataset splits by {' or '.join(map(repr, units))}, "
                f"not {self.split.by!r}"
            )
        if self.format == "synthkb":
            if "source" in given:
                raise ValueError("format synthkb is generated: it takes no 'source'")
            if self.entities is None:
                raise ValueError("format synthkb needs 'entities'")
        else:
            if self.source is None:
                raise ValueError(f"format {self.format} needs a 'source'")
            wrong = [key for key in SYNTHKB_ONLY if key in given]
            if wrong:
                raise ValueError(
                    f"{', '.join(map(repr, wrong))}: synthkb-only key(s) on a {self.format} dataset"
                )
        return self


RECIPE_SECTIONS = ("model", "bm25", "dpr", "ccr", "sieve", "ar2", "hybrid")


class RecipeSpec(Contract):
    """A named recipe: partial sections deep-merged over the top-level ones for the datasets that
    declare it (pipeline/core/recipes.py); they are validated, merged, as the top-level sections."""

    extends: Optional[str] = Field(
        None, description="parent recipe: its settings first, this one's over them"
    )
    description: Optional[str] = None
    methods: Optional[Unique(MethodName)] = None
    model: Optional[dict] = None
    bm25: Optional[dict] = None
    dpr: Optional[dict] = None
    ccr: Optional[dict] = None
    sieve: Optional[dict] = None
    ar2: Optional[dict] = None
    hybrid: Optional[dict] = None
