"""Echo passages: extra passages of an entity's article that restate its facts (the dial's upper range).

With ``Knobs.echo`` = m > 0, the article of every entity gets on average m more passages after its
own (``int(m)``, plus one with probability ``m - int(m)``), each restating a random subset of the
entity's facts (each with probability ``ECHO_COVER``) amid filler of the article's kind. They carry
the article's title and continue its passage numbers, so the article's own passages, the questions
and the ``named_article`` positives are those of the dataset without echoes: only ``qrels_all`` and
the corpus grow. The echo sentences continue the article's random stream after its last sentence,
and passage j of an entity is the same whatever m, so a larger m adds passages and changes none.
"""

from __future__ import annotations

from pipeline.synthkb import filler as fl
from pipeline.synthkb import lexicon as lx
from pipeline.synthkb.draft import Draft, Sentence
from pipeline.synthkb.world import Rand

ECHO_COVER = 0.8  # each fact of the entity is restated in an echo passage with this probability
ECHO_FILLER = 2  # filler sentences after the first facts of an echo passage

# One relation per template (the lexicon's, and a few for relations it states only in pairs).
TEMPLATES = {
    "born_in": lx.PERSON_BIRTHPLACE,
    "birth_year": lx.PERSON_BIRTHYEAR,
    "died_in": lx.PERSON_DEATHPLACE,
    "death_year": lx.PERSON_DEATHYEAR,
    "occupation": lx.PERSON_OCCUPATION,
    "member_of": lx.PERSON_MEMBER,
    "headquartered_in": lx.ORG_HQ,
    "industry": lx.ORG_INDUSTRY,
    "founded_by": [
        ("{S} was founded by {founder}.", ("founded_by",)),
        ("{founder} was the founder of {N}.", ("founded_by",)),
        ("{N} owes its existence to {founder}.", ("founded_by",)),
    ],
    "founded_year": [
        ("{S} was founded in {fyear}.", ("founded_year",)),
        ("{N} dates from {fyear}.", ("founded_year",)),
        ("The founding of {N} took place in {fyear}.", ("founded_year",)),
    ],
    "created_by": lx.WORK_BACKGROUND[:2],
    "work_year": lx.WORK_BACKGROUND[2:],
    "genre": [
        ("{S} is a {genre}.", ("genre",)),
        ("{N} takes the form of a {genre}.", ("genre",)),
        ("In form, {s} is a {genre}.", ("genre",)),
    ],
    "located_in": [
        ("{S} lies in {country}.", ("located_in",)),
        ("{N} is a {kind} in {country}.", ("located_in",)),
        ("{N} belongs to {country}.", ("located_in",)),
    ],
    "city_year": lx.CITY_YEAR,
    "capital": [
        ("The capital of {N} is {capital}.", ("capital",)),
        ("{capital} is the capital of {s}.", ("capital",)),
        ("The seat of government of {N} is {capital}.", ("capital",)),
    ],
}
FILLER = {
    "person": (fl.PERSON_FILLER, fl.PERSON_EVENTS),
    "city": (fl.CITY_FILLER, fl.CITY_EVENTS),
    "org": (fl.ORG_FILLER, fl.ORG_EVENTS),
    "work": (fl.WORK_FILLER, fl.WORK_EVENTS),
    "country": (fl.COUNTRY_FILLER, ()),
}


def echo_count(rate: float, seed: int, gid: int) -> int:
    """Echo passages of entity ``gid``: one uniform per entity, so the count grows with ``rate``."""
    whole = int(rate)
    return whole + (Rand(seed, "echo", gid).random() < rate - whole)


def _values(art: Draft, rel: str) -> dict[str, str]:
    a, blk = art.e.attrs, art.b.entities
    if rel in ("born_in", "died_in", "headquartered_in"):
        return {"city": art.city_ref(a[rel])}
    if rel in ("birth_year", "death_year", "city_year"):
        return {"year": a[rel]}
    if rel in ("created_by", "work_year"):
        made, made_pp, released = lx.GENRE_VERBS[a["genre"]]
        return {
            "author": blk[a["created_by"]].name,
            "year": a["work_year"],
            "made": made,
            "made_pp": made_pp,
            "released": released,
        }
    if rel in ("member_of", "founded_by", "located_in", "capital"):
        slot = {"member_of": "org", "founded_by": "founder", "located_in": "country", "capital": "capital"}[
            rel
        ]
        return {slot: blk[a[rel]].name}
    return {{"occupation": "occ", "founded_year": "fyear"}.get(rel, rel): a[rel]}


def echo_passages(art: Draft, rate: float) -> list[list[Sentence]]:
    """The sentences of each echo passage of ``art``'s entity, after its article was written."""
    e, rng = art.e, art.rng
    descriptions, events = FILLER[e.type]
    groups = []
    for _ in range(echo_count(rate, art.seed, e.gid)):
        start = len(art.sentences)
        rels = [rel for rel in rng.shuffle(list(e.attrs)) if rng.chance(ECHO_COVER)]
        for i, rel in enumerate(rels or [rng.pick(list(e.attrs))]):
            art.fact(TEMPLATES[rel], **_values(art, rel))
            if i < ECHO_FILLER:
                art.filler_sentence(descriptions, events)
        groups.append(art.sentences[start:])
    return groups
