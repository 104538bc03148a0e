"""Articles of synthkb entities: what each type's article says and in which order, packed into passages.

``ArticleWriter`` writes an entity's article through a ``draft.Draft``, which records the facts each
sentence states (the rules that keep that provenance exact are in its module), then its echo
passages (``echo``, with the dial's ``Knobs.echo``); ``pack`` cuts the sentences into passages.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.synthkb import filler as fl
from pipeline.synthkb import lexicon as lx
from pipeline.synthkb.draft import Draft, Knobs, Sentence, finish
from pipeline.synthkb.echo import echo_passages
from pipeline.synthkb.paraphrase import Paraphraser
from pipeline.synthkb.world import Block, Entity


@dataclass
class Passage:
    pid: str
    title: str
    text: str
    facts: frozenset[int]


class ArticleWriter:
    """The articles of one block's entities, and their echo passages."""

    def __init__(self, block: Block, seed: int, knobs: Knobs, para: Paraphraser | None = None):
        self.b = block
        self.seed = seed
        self.k = knobs
        self.para = para if knobs.paraphrase > 0 else None

    def article(self, e: Entity) -> list[Sentence]:
        """The sentences of the article of ``e`` (without echoes)."""
        return self._write(e).sentences

    def _write(self, e: Entity) -> Draft:
        art = Draft(self.b, self.seed, self.k, e, self.para)
        getattr(self, f"_{e.type}")(e, art)
        return art

    def passages(self, e: Entity) -> list[Passage]:
        """The article of ``e`` in passages, then its echo passages (``Knobs.echo``), each packed
        alone."""
        art = self._write(e)
        out = pack(e, art.sentences, self.k.max_words)
        for group in echo_passages(art, self.k.echo) if self.k.echo > 0 else ():
            out += pack(e, group, self.k.max_words, start=len(out))
        return out

    def _person(self, e: Entity, art: Draft) -> None:
        a, blk, rng, k = e.attrs, self.b.entities, art.rng, self.k
        born = dict(occ=a["occupation"], year=a["birth_year"], dyear=a["death_year"])
        place, years = rng.chance(k.lead_restate), rng.chance(k.lead_restate)
        lead = [t for t in lx.PERSON_LEAD if ("born_in" in t[1]) == place and ("birth_year" in t[1]) == years]
        art.fact(lead, city=art.city_ref(a["born_in"]), **born)
        art.filler(3, fl.PERSON_FILLER)
        if rng.chance(0.7):
            art.fact(lx.PERSON_BIRTH, city=art.city_ref(a["born_in"]), **born)
        else:
            art.fact(lx.PERSON_BIRTHPLACE, city=art.city_ref(a["born_in"]))
            art.filler(1, fl.PERSON_FILLER, fl.PERSON_EVENTS)
            art.fact(lx.PERSON_BIRTHYEAR, **born)
        art.filler(3, fl.PERSON_FILLER, fl.PERSON_EVENTS)
        if rng.chance(k.restate):
            art.fact(lx.PERSON_OCCUPATION, **born)
        if "member_of" in a:
            art.fact(lx.PERSON_MEMBER, org=blk[a["member_of"]].name)
        for org in self.b.inverse.get((e.idx, "founded_by"), []):
            o = blk[org]
            art.fact(
                lx.PERSON_FOUNDED,
                subject=dict.fromkeys(("founded_by", "founded_year", "industry"), org),
                org=o.name,
                fyear=o.attrs["founded_year"],
                industry=o.attrs["industry"],
            )
        art.filler(3, fl.PERSON_FILLER, fl.PERSON_EVENTS)
        for w in self.b.inverse.get((e.idx, "created_by"), []):
            work = blk[w]
            made, made_pp, released = lx.GENRE_VERBS[work.attrs["genre"]]
            art.fact(
                lx.PERSON_WORK,
                subject=dict.fromkeys(("created_by", "genre", "work_year"), w),
                work=work.name,
                genre=work.attrs["genre"],
                wyear=work.attrs["work_year"],
                made=made,
                made_pp=made_pp,
                released=released,
            )
            art.filler(1, fl.PERSON_FILLER, fl.PERSON_EVENTS)
        art.filler(2, fl.PERSON_FILLER, fl.PERSON_EVENTS)
        death = dict(city=art.city_ref(a["died_in"]), year=a["death_year"])
        if rng.chance(0.7):
            art.fact(lx.PERSON_DEATH, **death)
        else:
            art.fact(lx.PERSON_DEATHPLACE, **death)
            art.filler(1, fl.PERSON_FILLER)
            art.fact(lx.PERSON_DEATHYEAR, **death)
        art.filler(2, fl.PERSON_FILLER)

    def _city(self, e: Entity, art: Draft) -> None:
        a, blk = e.attrs, self.b.entities
        country = blk[a["located_in"]].name
        capital_of = self.b.inverse.get((e.idx, "capital"), [])
        if capital_of:
            art.fact(lx.CITY_CAPITAL, subject={"capital": capital_of[0]}, country=country, kind=e.kind)
        else:
            art.fact(lx.CITY_LEAD, country=country, kind=e.kind)
        if e.alias:
            template = art.rng.pick(lx.CITY_ALIAS)
            art.sentences.append(
                Sentence(finish(template.format(**art.slots(template, {"alias": e.alias}))), ())
            )
        if art.para:  # the second name that paraphrased statements use elsewhere
            art.sentences.append(Sentence(art.para.byname_sentence(), ()))
        art.filler(2, fl.CITY_FILLER)
        art.fact(lx.CITY_YEAR, year=a["city_year"])
        art.filler(3, fl.CITY_FILLER, fl.CITY_EVENTS)
        art.listing(lx.CITY_NATIVES, "born_in", appositive=True)
        art.filler(3, fl.CITY_FILLER, fl.CITY_EVENTS)
        art.listing(lx.CITY_DEAD, "died_in", appositive=True)
        art.filler(2, fl.CITY_FILLER, fl.CITY_EVENTS)
        art.listing(lx.CITY_ORGS, "headquartered_in")
        art.filler(3, fl.CITY_FILLER, fl.CITY_EVENTS)

    def _country(self, e: Entity, art: Draft) -> None:
        art.fact(lx.COUNTRY_LEAD, capital=self.b.entities[e.attrs["capital"]].name)
        art.filler(3, fl.COUNTRY_FILLER)
        art.listing(lx.COUNTRY_CITIES, "located_in")
        art.filler(4, fl.COUNTRY_FILLER)

    def _org(self, e: Entity, art: Draft) -> None:
        a, blk, rng = e.attrs, self.b.entities, art.rng
        slots = dict(
            industry=a["industry"],
            fyear=a["founded_year"],
            kind=e.kind.lower(),
            founder=blk[a["founded_by"]].name,
        )
        lead = art.fact(lx.ORG_LEAD, city=art.city_ref(a["headquartered_in"]), **slots)
        art.filler(3, fl.ORG_FILLER)
        founding = {self.b.fid[(e.idx, "founded_by")], self.b.fid[(e.idx, "founded_year")]}
        if not founding <= set(lead.facts) or rng.chance(self.k.restate):
            art.fact(lx.ORG_FOUNDING, **slots)
        art.filler(3, fl.ORG_FILLER, fl.ORG_EVENTS)
        if self.b.fid[(e.idx, "headquartered_in")] not in lead.facts or rng.chance(self.k.restate):
            art.fact(lx.ORG_HQ, city=art.city_ref(a["headquartered_in"]), **slots)
        if rng.chance(self.k.restate):
            art.fact(lx.ORG_INDUSTRY, **slots)
        art.filler(2, fl.ORG_FILLER, fl.ORG_EVENTS)
        art.listing(lx.ORG_MEMBERS, "member_of", appositive=True)
        art.filler(3, fl.ORG_FILLER, fl.ORG_EVENTS)

    def _work(self, e: Entity, art: Draft) -> None:
        a, blk, rng = e.attrs, self.b.entities, art.rng
        author = blk[a["created_by"]]
        made, made_pp, released = lx.GENRE_VERBS[a["genre"]]
        slots = dict(
            genre=a["genre"],
            author=author.name,
            year=a["work_year"],
            made=made,
            made_pp=made_pp,
            released=released,
            occ=author.attrs["occupation"],
        )
        if rng.chance(self.k.bio_in_work):
            lead = art.fact(
                lx.WORK_LEAD_BIO,
                city=art.city_ref(author.attrs["born_in"]),
                subject={"born_in": author.idx, "occupation": author.idx},
                **slots,
            )
        else:
            lead = art.fact(lx.WORK_LEAD, **slots)
        art.filler(3, fl.WORK_FILLER, fl.WORK_EVENTS)
        if self.b.fid[(e.idx, "work_year")] not in lead.facts:
            art.fact(lx.WORK_BACKGROUND[2:], **slots)
        elif rng.chance(self.k.restate):
            art.fact(lx.WORK_BACKGROUND[:2], **slots)
        art.filler(4, fl.WORK_FILLER, fl.WORK_EVENTS)


def pack(entity: Entity, sentences: list[Sentence], max_words: int, start: int = 0) -> list[Passage]:
    """Greedy packing of whole sentences into passages of at most ``max_words`` words, numbered from
    ``start``."""
    passages: list[Passage] = []
    texts: list[str] = []
    facts: set[int] = set()
    words = 0
    for sent in sentences:
        n = len(sent.text.split())
        if texts and words + n > max_words:
            pid = f"{entity.gid}-{start + len(passages)}"
            passages.append(Passage(pid, entity.name, " ".join(texts), frozenset(facts)))
            texts, facts, words = [], set(), 0
        texts.append(sent.text)
        facts.update(sent.facts)
        words += n
    if texts:
        pid = f"{entity.gid}-{start + len(passages)}"
        passages.append(Passage(pid, entity.name, " ".join(texts), frozenset(facts)))
    return passages
