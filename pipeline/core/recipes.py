"""Training recipes: named sets of settings that a dataset declares (``datasets.<name>.recipe``).

A recipe (config ``recipes.<name>``) holds partial sections (``model``, ``bm25``, ``dpr``, ``ccr``,
``sieve``, ``ar2``, ``hybrid``) and optionally ``methods``; ``extends`` names a parent recipe. The
settings in force for a dataset are the top-level sections deep-merged with its recipe chain, root
first: so ``nq`` (recipe ``paper``) trains BERT-base for 40 epochs while ``synthkb`` (recipe ``demo``,
empty) trains with the top-level demo sections, in one run. An overlay changes a recipe where it is
declared (``recipes: {paper: {dpr: {max_steps: 100}}}``) or switches a dataset's recipe
(``datasets: {nq: {recipe: demo}}``). Sections a recipe cannot set (eval, encode, index, search,
sweep) are the same for every dataset: comparable metrics, and infrastructure a site sizes in its
profile. The training seeds are the dataset's own (``datasets.<d>.seeds``, else the top-level
``seeds``). docs/recipes.md.
"""

from __future__ import annotations

import copy
from typing import Callable, Collection

from pipeline.core.config import deep_merge, validate_config
from pipeline.core.settings.base import RESOURCE_KEYS, ConfigError
from pipeline.data.settings import RECIPE_SECTIONS

# The sections a recipe may set, and its other keys.
DEFAULT_RECIPE = "demo"


def _without_resources(value):
    if isinstance(value, dict):
        return {k: copy.deepcopy(v) for k, v in value.items() if k not in RESOURCE_KEYS}
    return copy.deepcopy(value)


def dataset_recipe(config: dict, dataset: str) -> str:
    """The recipe a dataset declares (default: demo)."""
    return config["datasets"][dataset].get("recipe") or DEFAULT_RECIPE


def declared_recipes(config: dict) -> dict:
    """``recipes`` of the config; ``demo`` (empty: the top-level sections) exists even if undeclared."""
    return {DEFAULT_RECIPE: {}, **(config.get("recipes") or {})}


def recipe_chain(recipes: dict, name: str, where: str) -> list[str]:
    """``name`` and its ancestors by ``extends``, root first; ``where`` names the referring key."""
    chain: list[str] = []
    current, referrer = name, where
    while current is not None:
        if current not in recipes:
            known = ", ".join(sorted(recipes)) or "none"
            raise ConfigError(
                f"config key '{referrer}': unknown recipe {current!r} (declared under 'recipes': {known})"
            )
        if current in chain:
            loop = " -> ".join([*reversed(chain), current])
            raise ConfigError(
                f"config key 'recipes.{current}.extends': recipes extend each other in a cycle ({loop})"
            )
        chain.append(current)
        referrer = f"recipes.{current}.extends"
        current = recipes[current].get("extends")
    return list(reversed(chain))


def recipe_overrides(config: dict, name: str, where: str) -> dict:
    """What a recipe sets (its chain merged, root first): ``methods`` and partial sections."""
    recipes = declared_recipes(config)
    merged: dict = {}
    for link in recipe_chain(recipes, name, where):
        merged = deep_merge(
            merged, {k: v for k, v in recipes[link].items() if k in ("methods", *RECIPE_SECTIONS)}
        )
    return merged


def dataset_config(
    config: dict, dataset: str, *, methods: Callable[[dict], Collection[str]] | None = None
) -> dict:
    """The whole config as ``dataset`` sees it: top-level sections with its recipe merged in,
    defaults filled and validated (errors name the recipe and the dataset). ``methods(config)``: the
    method names the workflow can build under that config (they depend on ccr.beta, say)."""
    name = dataset_recipe(config, dataset)
    where = f"datasets.{dataset}.recipe"
    out = deep_merge(config, recipe_overrides(config, name, where))
    try:
        validate_config(out, methods=(lambda: methods(out)) if methods else None)
    except ConfigError as err:
        raise ConfigError(
            f"recipe {name!r} of dataset {dataset!r} ({where}; keys below are under "
            f"recipes.{name} or the top-level sections): {err}"
        ) from None
    return out


def dataset_configs(
    config: dict, *, methods: Callable[[dict], Collection[str]] | None = None
) -> dict[str, dict]:
    """dataset -> its config (``dataset_config``); a dataset with the empty demo recipe shares ``config``."""
    out = {}
    for dataset in config["datasets"]:
        name = dataset_recipe(config, dataset)
        overrides = recipe_overrides(config, name, f"datasets.{dataset}.recipe")
        out[dataset] = dataset_config(config, dataset, methods=methods) if overrides else config
    return out


def recipe_record(config: dict, dataset: str) -> dict:
    """What metrics.json records: the recipe's name, chain and the settings in force (without what a
    job reserves: threads, memory and GPUs change no result)."""
    name = dataset_recipe(config, dataset)
    recipes = declared_recipes(config)
    effective = dataset_config(config, dataset)
    return {
        "dataset": dataset,
        "recipe": name,
        "chain": recipe_chain(recipes, name, f"datasets.{dataset}.recipe"),
        "description": recipes.get(name, {}).get("description"),
        "settings": {key: _without_resources(effective[key]) for key in ("methods", *RECIPE_SECTIONS)},
    }
