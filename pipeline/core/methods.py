"""The method table: every method the workflow can build, resolved once from the config into a record.

A method name (an entry of ``methods``, a pair of ``eval.compare``, a target's folder) stands for a
``Method``: what it retrieves with (BM25, a retriever folder, a fusion of two runs, AR2 rounds), what
its retriever was trained on (negatives, CCR β, filter, miner) and whether it is random (one run per
training seed). The rules, the start-up checks and the docs read the records; no rule builds or parses
a method name of its own. The file layout of each record is pipeline/workflow/paths.py's.

    bm25                      BM25 (bm25.smk)
    zeroshot                  the pretrained base, saved as a retriever folder
    dpr                       DPR (NCE) on BM25's negatives
    dpr_ccr                   CCR fine-tuning of dpr at ccr.beta           model dpr_ccr_b<β>
    dpr_rcl                   DPR trained with l_RCL at dpr.rcl.beta        model dpr_rcl_b<β>
                              (paper Table 5, "DPR + CCR"; compare with dpr)
    dpr_sieve                 DPR on the sieve's kept negatives at ccr.beta model dpr_sieve_b<β>
    dpr_<filter>              DPR on what another filter kept (dpr_oracle, dpr_none, ...)
    dpr_gist_<guide>          DPR on dpr_none's negatives, GISTEmbedLoss's masking by models/<guide>
                              (zeroshot, dpr)                             model dpr_gist_<guide>_none
    dpr_relabel_<detector>    DPR on what a filter kept, its dropped candidates as extra positives
                              (multi-positive NCE; dpr_relabel_sieve: the sieve dpr_sieve trains on)
    dpr_mined_<dense>         DPR on the negatives a dense method mined (mining.smk)
    <trained>_wise            a trained dense method's model chosen on dev among WiSE-FT interpolations
                              with the model it started from (alpha 0 keeps the start), by the dev
                              qrels a user has                             model <model>_wise
    <trained>_wise_truth      the same chosen by the true dev labels (qrels_all): a label-reading
                              control                                      model <model>_wise_truth
    hybrid_{rrf,wsum}_<dense> BM25 fused with a dense method's run (hybrid.smk)
    ar2, ar2_sieve, ...       AR2 rounds per seed (ar2.smk)
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Literal

from pipeline.sieve.settings import (
    FILTER_CONTRACTS,
    FILTER_NAMES,
    TRUE_LABEL_FILTERS,
    InjectionSettings,
    SieveSettings,
)

# Filters other than the sieve (whose negatives carry its β): each also cleans the negatives of a
# DPR control dpr_<filter>.
OTHER_FILTERS = tuple(name for name in FILTER_NAMES if name != "sieve")
HYBRID_FUSIONS = ("rrf", "wsum")
# AR2 methods -> their variant folder (results/{dataset}/ar2/{variant}/seed{seed}/).
AR2_VARIANTS = {
    "ar2": "plain",
    "ar2_sieve": "sieve",
    "ar2_simans": "simans",
    "ar2_simans_sieve": "simans_sieve",
}
# AR2 variant folder -> its method (AR2_VARIANTS read the other way).
VARIANT_METHODS = {variant: method for method, variant in AR2_VARIANTS.items()}


def method_of(variant: str) -> str:
    """The AR2 method whose runs live in variant folder ``variant``."""
    try:
        return VARIANT_METHODS[variant]
    except KeyError:
        raise ValueError(f"unknown AR2 variant {variant!r} (known: {', '.join(VARIANT_METHODS)})") from None


# How each AR2 variant draws a step's negatives from its pool.
AR2_SAMPLING = {"plain": "uniform", "sieve": "uniform", "simans": "simans", "simans_sieve": "simans"}
# Methods with nothing random in them: one run, whatever the seeds (a baseline of every seed's pair).
SEED_FREE = ("bm25", "zeroshot")
# What a β tag looks like in a path: the wildcard constraint of every rule with a {beta}.
BETA_RE = r"[0-9]+(\.[0-9]+)?"
# The sieve settings that change which candidates the filters judge (every filter) or what the sieve
# keeps (sieve_b<β>, sieve_no_ccr): a value other than its default is written into the name of what is
# built from them (sieve_tag). Not here: scorer (already in the names: sieve_b<β> vs sieve_no_ccr),
# temperature (reported losses only), batch_size, in_batch and figure_queries (Figure 1), betas and
# filters (which filters, not how), the other filters' own sections.
SIEVE_CANDIDATE_TAG_KEYS = ("source", "candidates", "pool", "max_queries")
SIEVE_DECISION_TAG_KEYS = ("strict", "fallback")
# Besides sieve_b<β>: the filter names that apply the sieve's rule (sieve: the one dpr_sieve trains on;
# sieve_teacher and positive_aware_teacher_sieve: scored by the teacher).
SIEVE_FILTERS = tuple(name for name, c in FILTER_CONTRACTS.items() if c.rule)
# The filters scored by the teacher (sieve.teacher): a teacher other than the default is in their names.
TEACHER_FILTERS = tuple(name for name, c in FILTER_CONTRACTS.items() if c.scorer == "teacher")
# GISTEmbedLoss's guides (dpr_gist_<guide>): the untrained base and the DPR warm-up.
GIST_GUIDES = ("zeroshot", "dpr")
# Model selection on dev (<trained>_wise...): the name's suffix -> the dev labels that choose (dev: the
# annotated qrels a user has; truth: qrels_all, which only synthetic data has). The candidates are the
# start, the WiSE-FT interpolations and the trained model, and with selection.checkpoints > 0 also the
# training's snapshots: the same names, the setting decides what they consider.
SELECTIONS = {"wise": "dev", "wise_truth": "truth"}


def beta_tag(beta: float) -> str:
    """How a CCR β appears in paths: 0 -> '0', 0.5 -> '0.5', 1e-4 -> '0.0001', 1e-7 -> '0.0000001'.

    Positional notation only (the wildcard is digits and one dot) and exact: repr gives the shortest
    decimal that reads back as the same float, so two different β never share a folder.
    """
    text = format(Decimal(repr(float(beta))), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def ccr_model(tag: str) -> str:
    """The CCR model folder name for a β tag (a value of beta_tag, or the wildcard "{beta}")."""
    return f"dpr_ccr_b{tag}"


def rcl_model(tag: str) -> str:
    """The folder of DPR trained with the CCR regulariser in its loss (method dpr_rcl) for a β tag."""
    return f"dpr_rcl_b{tag}"


def sieve_name(tag: str) -> str:
    """The sieve's negatives and filter name for a β tag (a value of beta_tag, or "{beta}")."""
    return f"sieve_b{tag}"


def _tag_part(key: str, value: object) -> str:
    if isinstance(value, bool):
        return key if value else f"no{key}"
    if isinstance(value, str):
        return f"{key}_{value}"
    return f"{key}{beta_tag(value) if isinstance(value, float) else value}"


def applies_sieve_rule(filter_name: str) -> bool:
    """Whether filter ``filter_name`` decides by the sieve's rule (its names carry the decision keys)."""
    return filter_name in SIEVE_FILTERS or filter_name.startswith(sieve_name(""))


def sieve_tag(
    sieve: dict,
    source_run: str | None = None,
    decision: bool = False,
    teacher_model: str | None = None,
) -> str:
    """What tells two sieve settings apart in a path: '' at the contract's defaults, else '_' + each
    setting that differs, in SIEVE_CANDIDATE_TAG_KEYS order, then injection.fraction, then (with
    ``decision``: the names of the sieve's own negatives) SIEVE_DECISION_TAG_KEYS, so the candidates'
    tag is a prefix of the sieve's. A number reads key+value (``_candidates50_pool200``), a bool its
    key or no+key (``_strict``), a text key_value (``_fallback_none``). ``source_run``: the run folder
    the source method resolves to, so a mined source carries its β. The candidates, every filter's
    negatives, the DPRs trained on them and their runs carry it: a second sieve setting builds beside
    the first instead of over it."""
    defaults = SieveSettings()
    parts = []
    for key in SIEVE_CANDIDATE_TAG_KEYS:
        if sieve[key] != getattr(defaults, key):
            parts.append(_tag_part(key, (source_run or sieve[key]) if key == "source" else sieve[key]))
    fraction = float(sieve["injection"]["fraction"])
    if fraction != InjectionSettings().fraction:
        parts.append(_tag_part("injection", fraction))
    for key in SIEVE_DECISION_TAG_KEYS if decision else ():
        if sieve[key] != getattr(defaults, key):
            parts.append(_tag_part(key, sieve[key]))
    if teacher_model is not None and sieve["teacher"] != defaults.teacher:
        parts.append(_tag_part("teacher", teacher_model))
    return "".join(f"_{part}" for part in parts)


# The sieve settings an AR2 round's own sieve reads (its candidates are the retriever's top-k, not sieve.source).
AR2_SIEVE_TAG_KEYS = ("candidates", "pool", *SIEVE_DECISION_TAG_KEYS)


def ar2_sieve_tag(config: dict) -> str:
    """What tells two AR2 sieve runs apart in their folders: the scoring model (``_b<β>``: the CCR
    model at ccr.beta; ``_no_ccr``: models/dpr, sieve.scorer dpr; ``_b<β>_warm`` / ``_b<β>_current``:
    CCR retrained each round from the warm-up DPR / from the round's retriever, ar2.sieve_init) and the sieve settings of AR2_SIEVE_TAG_KEYS
    that differ from their defaults (as sieve_tag writes them)."""
    sieve, defaults = config["sieve"], SieveSettings()
    if config["ar2"]["sieve_init"] in ("warm", "current"):
        scorer = f"_b{beta_tag(float(config['ccr']['beta']))}_{config['ar2']['sieve_init']}"
    else:
        scorer = f"_b{beta_tag(float(config['ccr']['beta']))}" if sieve["scorer"] == "ccr" else "_no_ccr"
    parts = [_tag_part(key, sieve[key]) for key in AR2_SIEVE_TAG_KEYS if sieve[key] != getattr(defaults, key)]
    return scorer + "".join(f"_{part}" for part in parts)


def filter_negatives(
    filter_name: str, sieve: dict, source_run: str | None = None, teacher_model: str | None = None
) -> str:
    """The name of a filter's negatives (and, with dpr_on, of the DPR trained on them) under these
    sieve settings: the filter plus the sieve_tag of what it depends on (``teacher_model``, the model
    folder of sieve.teacher, for a teacher-scored filter)."""
    teacher = teacher_model if filter_name in TEACHER_FILTERS else None
    return f"{filter_name}{sieve_tag(sieve, source_run, applies_sieve_rule(filter_name), teacher)}"


def dpr_on(negatives: str) -> str:
    """The model folder of DPR trained on negatives/<negatives>.train.parquet."""
    return f"dpr_{negatives}"


def gist_model(guide: str, negatives: str) -> str:
    """The model folder of DPR trained on ``negatives`` with GISTEmbedLoss's masking by ``guide``."""
    return f"dpr_gist_{guide}_{negatives}"


def selected_model(model: str, labels: str) -> str:
    """The folder of ``model``'s selection on dev by ``labels`` (dev or truth; SELECTIONS)."""
    suffix = {kind: name for name, kind in SELECTIONS.items()}[labels]
    return f"{model}_{suffix}"


def relabel_model(negatives: str) -> str:
    """The model folder of DPR trained on a detector's kept ``negatives`` with its dropped candidates
    as extra positives (the qrels relabel_qrels writes beside them)."""
    return f"dpr_relabel_{negatives}"


@dataclass(frozen=True)
class Method:
    """One method: how its run is made. ``run`` is its run folder (results/{dataset}/<run>/): the name
    plus every setting that tells two runs apart, so a method at two β keeps two runs side by side.
    ``model`` is the retriever folder a dense method searches with (results/{dataset}/models/<model>/);
    ``base`` the dense method a hybrid fuses with BM25."""

    name: str
    kind: Literal["bm25", "dense", "hybrid", "ar2"]
    run: str
    model: str | None = None
    trains: Literal["dpr", "ccr", "rcl"] | None = None  # dense: its retriever's training (rcl: dpr_rcl)
    negatives: str | None = None  # dense: what it trains on (bm25, sieve_b<β>, <filter>, a miner's run)
    filter: str | None = None  # dense: the filter that chose its negatives from the sieve's candidates
    guide: str | None = None  # dpr_gist_<guide>: the method whose model masks its negatives in the loss
    relabel: bool = False  # dpr_relabel_<filter>: the filter's dropped candidates are extra positives
    beta: float | None = None  # dpr_ccr, dpr_rcl: its β; dpr_sieve: the β of the sieve's model
    miner: str | None = None  # dpr_mined_<m>: the dense run whose mined negatives it trains on
    fusion: Literal["rrf", "wsum"] | None = None
    base: str | None = None  # hybrid: the dense method's run
    variant: str | None = None  # ar2: the variant (plain, sieve, simans, simans_sieve)
    variant_dir: str | None = (
        None  # ar2: its folder results/{dataset}/ar2/<variant_dir>/ (variant + sieve tag)
    )
    selects: str | None = None  # <trained>_wise*: the model folder it selects from (with its start)
    labels: Literal["dev", "truth"] | None = None  # <trained>_wise*: the dev labels that choose
    teacher: str | None = None  # dense, its filter scored by sieve.teacher: the teacher's model folder

    @property
    def random(self) -> bool:
        """Trained (or fused with something trained): one run per training seed when there are several."""
        return self.run not in SEED_FREE and (self.kind != "hybrid" or self.base not in SEED_FREE)


def _dense(name: str, **fields) -> Method:
    return Method(name, "dense", run=fields.pop("run", name), **fields)


def method_table(config: dict) -> dict[str, Method]:
    """Every method the rules can build under ``config`` (defaults filled), by name.

    ``dpr_ccr`` and ``dpr_sieve`` stand for their run at ccr.beta (dpr_ccr_b<β>, dpr_sieve_b<β>; with
    sieve.scorer dpr, dpr_sieve is dpr_sieve_no_ccr, the sieve scored by models/dpr); each β
    of sieve.betas (the β sweep) is a method of its own under that name, so ``methods: [dpr_ccr_b0.5,
    dpr_ccr_b6]`` (with both in sieve.betas) compares two β side by side.
    """
    table = _methods(config, None)
    # A teacher-scored filter's records name the teacher's model folder, known once the table is where
    # the teacher is a later method (a mined DPR, a selection): a second pass then. The teacher is never
    # one of the filtered DPRs whose names it changes (check_sources refuses those).
    teacher = config["sieve"]["teacher"]
    m = table.get(teacher)
    folder = m.model if m is not None and m.model else teacher
    if any(x.teacher not in (None, folder) for x in table.values()):
        table = _methods(config, folder)
    return table


def _methods(config: dict, teacher_model: str | None) -> dict[str, Method]:
    """method_table's records; ``teacher_model``: the folder of sieve.teacher where it is not one of the
    untrained or BM25-trained models resolved here."""
    betas = ccr_betas(config)
    main = beta_tag(float(config["ccr"]["beta"]))
    rcl_beta = float(config["dpr"]["rcl"]["beta"])
    rcl = rcl_model(beta_tag(rcl_beta))
    dense = [
        _dense("zeroshot", model="zeroshot"),
        _dense("dpr", model="dpr", trains="dpr", negatives="bm25"),
        _dense("dpr_rcl", run=rcl, model=rcl, trains="rcl", negatives="bm25", beta=rcl_beta),
    ]
    for tag, beta in betas.items():
        ccr = dict(run=ccr_model(tag), model=ccr_model(tag), trains="ccr", negatives="bm25", beta=beta)
        dense.append(_dense(f"dpr_ccr_b{tag}", **ccr))
        if tag == main:
            dense.append(_dense("dpr_ccr", **ccr))
    # Everything built from the sieve's candidates carries the sieve's settings (a source method by its run).
    source = config["sieve"]["source"]
    source_run = {m.name: m.run for m in dense}.get(source, source)
    teacher = config["sieve"]["teacher"]
    teacher_model = {m.name: m.model for m in dense}.get(teacher, teacher_model or teacher)

    def filtered(name: str, filter_name: str, **fields) -> Method:
        scorer = teacher_model if filter_name in TEACHER_FILTERS else None
        negs = filter_negatives(filter_name, config["sieve"], source_run, scorer)
        return _dense(
            name,
            run=dpr_on(negs),
            model=dpr_on(negs),
            trains="dpr",
            negatives=negs,
            filter=filter_name,
            teacher=scorer,
            **fields,
        )

    def relabelled(name: str, filter_name: str, **fields) -> Method:
        m = filtered(name, filter_name, **fields)
        model = relabel_model(m.negatives)
        return replace(m, run=model, model=model, relabel=True)

    dense += [filtered(dpr_on(f), f) for f in OTHER_FILTERS]
    dense += [relabelled(f"dpr_relabel_{f}", f) for f in OTHER_FILTERS if f != "none"]
    for guide in GIST_GUIDES:
        negs = filter_negatives("none", config["sieve"], source_run)
        model = gist_model(guide, negs)
        dense.append(_dense(f"dpr_gist_{guide}", run=model, model=model, trains="dpr", negatives=negs,
                            filter="none", guide=guide))  # fmt: skip
    for tag, beta in betas.items():
        sieve = sieve_name(tag)
        dense.append(filtered(f"dpr_sieve_b{tag}", sieve, beta=beta))
        dense.append(relabelled(f"dpr_relabel_sieve_b{tag}", sieve, beta=beta))
        if tag == main and config["sieve"]["scorer"] == "ccr":
            dense.append(filtered("dpr_sieve", sieve, beta=beta))
            dense.append(relabelled("dpr_relabel_sieve", sieve, beta=beta))
    if config["sieve"]["scorer"] == "dpr":  # the sieve without CCR: dpr_sieve is dpr_sieve_no_ccr
        dense.append(filtered("dpr_sieve", "sieve_no_ccr"))
        dense.append(relabelled("dpr_relabel_sieve", "sieve_no_ccr"))
    # DPR trained on the negatives another dense method mined: dpr_mined_dpr is RocketQA/ANCE's round 2.
    dense += [
        _dense(
            f"dpr_mined_{m.name}",
            run=f"dpr_mined_{m.run}",
            model=f"dpr_mined_{m.run}",
            trains="dpr",
            negatives=m.run,
            miner=m.run,
        )
        for m in list(dense)
    ]
    # Model selection on dev between each trained model and the one it started from (opt-in).
    dense += [
        replace(
            m,
            name=f"{m.name}_{suffix}",
            run=selected_model(m.run, labels),
            model=selected_model(m.model, labels),
            selects=m.model,
            labels=labels,
        )
        for m in list(dense)
        if m.trains is not None
        for suffix, labels in SELECTIONS.items()
    ]
    hybrids = [
        Method(
            f"hybrid_{fusion}_{m.name}", "hybrid", run=f"hybrid_{fusion}_{m.run}", fusion=fusion, base=m.run
        )
        for fusion in HYBRID_FUSIONS
        for m in dense
    ]
    ar2 = []
    for name, variant in AR2_VARIANTS.items():
        tag = ar2_sieve_tag(config) if variant.endswith("sieve") else ""
        ar2.append(Method(name, "ar2", run=f"{name}{tag}", variant=variant, variant_dir=f"{variant}{tag}"))
    return {m.name: m for m in [Method("bm25", "bm25", run="bm25"), *dense, *hybrids, *ar2]}


def runs(table: dict[str, Method]) -> dict[str, Method]:
    """The table by run folder (a name and its β alias share one run: the same record bar the name)."""
    return {m.run: m for m in table.values()}


def ccr_betas(config: dict) -> dict[str, float]:
    """β tag -> β of every CCR model the config asks for: ccr.beta's (dpr_ccr) and each of sieve.betas
    (the sieve's β sweep). train_ccr looks its β up here by the tag of its path: the number is never
    parsed back out of a folder name."""
    betas = [float(config["ccr"]["beta"]), *(float(b) for b in config["sieve"]["betas"])]
    return {beta_tag(b): b for b in betas}


def filtered_candidates(table: dict[str, Method], name: str) -> bool:
    """Whether method ``name`` trains on negatives that a filter chose from the sieve's candidates
    (directly, or mined by such a method): it cannot be the sieve's own source (a cycle)."""
    m = table.get(name) or runs(table).get(name)
    if m is None or m.negatives is None:
        return False
    return m.filter is not None or filtered_candidates(table, m.negatives)


def closest(name: str, known: list[str] | tuple[str, ...] | set[str], n: int = 3) -> str:
    """ "did you mean" text: the ``n`` known names closest to ``name`` (or all when none is close)."""
    near = difflib.get_close_matches(name, sorted(known), n=n, cutoff=0.5)
    return f"closest: {', '.join(near)}" if near else f"known: {', '.join(sorted(known))}"


# ---- what a method is, in words (metrics.md, the README's results) -------------------------------------


def reads_true_labels(m: Method) -> bool:
    """Whether ``m``'s training reads the true false-negative labels (qrels_all): an oracle, which a
    user's own data cannot run (dpr_oracle, dpr_relabel_oracle), or its model is chosen by them
    (<trained>_wise_truth)."""
    return m.filter in TRUE_LABEL_FILTERS or m.labels == "truth"


def control_reason(m: Method) -> str | None:
    """Why ``m`` is a control (a method that isolates an effect, not a candidate for "best"), or None.
    dpr_oracle uses the dataset's true false-negative labels, which real data does not have; dpr_none
    trains on the filters' candidate pool with nothing dropped; a β-0 run (dpr_ccr_b0, dpr_sieve_b0) is
    the same training without CCR's regulariser."""
    if m.labels == "truth":
        return "chosen by the true dev labels (qrels_all), which real data does not have"
    if reads_true_labels(m):
        return "uses the true false-negative labels (qrels_all), which real data does not have"
    if m.filter == "none" and m.guide is None:
        return "the filters' candidate pool with nothing dropped: isolates the filter from the pool"
    if m.beta == 0 and m.trains == "ccr":
        return "the same CCR fine-tune at β 0 (no regulariser): isolates β"
    if m.beta == 0 and m.filter is not None:
        return "the sieve scored by the CCR model at β 0: isolates β"
    return None


def started_from(m: Method) -> str | None:
    """The run of the model ``m``'s retriever was trained from: the pretrained base (``zeroshot``) for
    every DPR trained from scratch (dpr, dpr_rcl, the filters' and miners' DPRs), ``dpr`` for a CCR
    fine-tune and for AR2 (its rounds start from models/dpr); None for what is not trained."""
    if m.kind == "ar2" or m.trains == "ccr":
        return "dpr"
    if m.trains in ("dpr", "rcl"):
        return "zeroshot"
    return None


def _scorer(m: Method) -> str:
    """What scored the sieve whose negatives ``m`` (a filtered DPR) trains on."""
    if m.teacher is not None:
        return f"scored by the teacher models/{m.teacher} (sieve.teacher)"
    if m.filter is not None and m.filter.startswith("sieve_no_ccr"):
        return "scored by models/dpr (sieve.scorer dpr: no CCR)"
    return f"scored by models/{ccr_model(beta_tag(m.beta))} (CCR at β {beta_tag(m.beta)})"


def describe(m: Method) -> str:
    """What ``m`` is, in one line: its training and, for a DPR on filtered negatives, what chose them."""
    if m.selects is not None:
        labels = "the true dev labels (qrels_all)" if m.labels == "truth" else "the dev qrels"
        trained = replace(m, selects=None, labels=None)
        return (
            f"models/{m.selects} or a WiSE-FT interpolation with models/{started_from(m)} it started from, "
            f"chosen by {labels} (trained: {describe(trained)})"
        )
    if m.kind == "bm25":
        return "BM25 (no training)"
    if m.kind == "hybrid":
        return f"BM25 fused ({m.fusion}) with the run of {m.base}"
    if m.kind == "ar2":
        sieve = ", the sieve dropping each round's negatives" if m.variant.endswith("sieve") else ""
        return f"AR2 rounds (retriever + ranker, {AR2_SAMPLING[m.variant]} negatives) from models/dpr{sieve}"
    if m.trains is None:
        return "the pretrained base model, not trained here"
    if m.trains == "ccr":
        return f"CCR fine-tuning of models/dpr at β {beta_tag(m.beta)}"
    if m.trains == "rcl":
        return f"DPR with CCR's regulariser in its own loss (β {beta_tag(m.beta)})"
    if m.miner is not None:
        return f"DPR from the base on the negatives the run of {m.miner} mined"
    if m.filter is None:
        return "DPR (NCE) from the base on BM25's negatives"
    if m.guide is not None:
        return (
            f"DPR from the base on the sieve's candidate pool, every negative models/{m.guide} scores above "
            "the positive masked out of the softmax (GISTEmbedLoss)"
        )
    if m.relabel:
        if reads_true_labels(m):
            return (
                "DPR from the base, the true false negatives turned into extra positives (multi-positive NCE)"
            )
        return f"DPR from the base, the candidates filter {m.filter} dropped turned into extra positives" + (
            f", {_scorer(m)}" if m.teacher is not None else ""
        )
    if m.teacher is not None:
        return f"DPR from the base on the negatives filter {m.filter} kept, {_scorer(m)}"
    if m.filter.startswith(("sieve_b", "sieve_no_ccr")):
        return f"DPR from the base on the negatives the sieve kept, {_scorer(m)}"
    if reads_true_labels(m):
        return "DPR from the base on the candidates without the true false negatives"
    if m.filter == "none":
        return "DPR from the base on the sieve's candidate pool, nothing dropped"
    return f"DPR from the base on the negatives filter {m.filter} kept"


def folders(m: Method, dataset: str) -> str:
    """Where ``m``'s files are: its run folder (metrics.json, run.*.parquet), and its model or AR2 folder."""
    run = f"results/{dataset}/{m.run}/"
    if m.model is not None:
        return f"{run}, model results/{dataset}/models/{m.model}/"
    if m.kind == "ar2":
        return f"{run} (a folder per seed), rounds results/{dataset}/ar2/{m.variant_dir}/"
    return run
