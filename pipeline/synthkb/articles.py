"""Articles of synthkb entities: sentences that record which facts they state, packed into passages.

Two rules keep the provenance exact and every relevant passage answer-bearing:

* a sentence states a fact only through a template of ``synthkb_lexicon`` that declares it;
* the *object* of a stated fact is always named in the sentence (its name, or a city's alias); only the
  article's own entity, when it is the fact's *subject*, may appear as a pronoun or short name, and the
  passage title then names it.
"""
from __future__ import annotations

import functools
import re
import string
from dataclasses import dataclass

from pipeline.synthkb import filler as fl
from pipeline.synthkb import lexicon as lx
from pipeline.synthkb.echo import echo_passages
from pipeline.synthkb.paraphrase import Paraphraser
from pipeline.synthkb.world import GENRES, OTHER_OCCUPATIONS, RELATIONS, Block, Entity, Rand

MAX_WORDS = 80
OCCUPATIONS = list(GENRES) + OTHER_OCCUPATIONS
# Filler per article type, relative: persons get the longest articles, like the people of an
# encyclopedia, so that their own passages compete with each other for their questions.
TYPE_FILLER = {"person": 2.0, "city": 1.2, "org": 1.0, "work": 0.8, "country": 1.0}
_A_AN = re.compile(r"\b([Aa]) (?=[aeiouAEIOU])")


@dataclass(frozen=True)
class Knobs:
    """How often facts are stated again, and how much filler surrounds them."""
    lead_restate: float = 0.35       # a person's lead also gives birth place / years
    list_mention: float = 1.0        # an object's article lists the subject (natives, members ...)
    list_appositive: float = 0.3     # a listed person is given with occupation ("the painter X")
    bio_in_work: float = 0.25        # a work's lead names its author's birthplace and occupation
    restate: float = 0.5             # a section repeats a fact the lead already gave
    alias_rate: float = 0.15         # a city object is named by its alias
    cross_bio: float = 0.5           # a person mentioned in filler comes with a recorded appositive
    filler: float = 2.5              # scales the number of filler sentences
    max_words: int = MAX_WORDS
    echo: float = 0.0                # dial.py: extra passages per entity restating its facts (echo.py)
    paraphrase: float = 0.0          # dial.py: a restatement gives its answer in another form


@dataclass
class Sentence:
    text: str
    facts: tuple[int, ...]


@dataclass
class Passage:
    pid: str
    title: str
    text: str
    facts: frozenset[int]


def _finish(text: str) -> str:
    text = _A_AN.sub(r"\1n ", text)
    return text[:1].upper() + text[1:]


_WORD_SLOTS = {
    "adj": lx.ADJECTIVES, "adj2": lx.ADJECTIVES, "noun": lx.NOUNS, "trait": lx.TRAITS,
    "trait2": lx.TRAITS, "parent": lx.PARENTS, "ordinal": lx.ORDINALS, "hobby": lx.HOBBIES,
    "building": lx.BUILDINGS, "trade": lx.TRADES, "emblem": lx.EMBLEMS, "quality": lx.QUALITIES,
    "quality2": lx.QUALITIES, "weekday": lx.WEEKDAYS, "num": lx.NUMBERS, "skill": lx.SKILLS,
    "dislike": lx.DISLIKES, "topic": lx.TOPICS, "food": lx.FOODS, "material": lx.MATERIALS,
    "relative": lx.RELATIVES,
}
_YEAR_OFFSETS = {"year1": (-10, 25), "year2": (15, 60), "year3": (45, 85)}
# Filler slots naming another entity of the block (see _Article.mention).
_MENTIONS = {"other": "person", "org_any": "org", "work_any": "work"}


@functools.lru_cache(maxsize=None)
def _fields(template: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f for _, f, _, _ in string.Formatter().parse(template) if f))


class _Article:
    """Per-article state: the random stream and filler decks (no filler repeats within an article)."""

    def __init__(self, writer: "ArticleWriter", e: Entity):
        self.w, self.e = writer, e
        self.rng = Rand(writer.seed, "article", e.gid)
        self._decks: dict[int, list] = {}
        self.sentences: list[Sentence] = []
        self.pronoun = e.gender if e.type == "person" else "it"
        self.named, self.short = writer.named(e), writer.short(e)
        poss = {"he": "his", "she": "her"}.get(self.pronoun, "its")
        self.fixed = dict(pro=self.pronoun, poss=poss, Poss=poss, N=self.named, kind=self.short[4:],
                          genre=e.attrs.get("genre", ""))
        # Around the years of a life, a work or an organisation; places get the era of the people
        # and works that their filler mentions.
        year = next((e.attrs[k] for k in ("birth_year", "work_year", "founded_year") if k in e.attrs),
                    None)
        self.base_year = int(year) if year else self.rng.between(1700, 1850)
        # "worked briefly as a {occ2}" must never restate the entity's own occupation unrecorded.
        self._occ2 = [o for o in OCCUPATIONS if o != e.attrs.get("occupation")]
        self.para = writer.para.start(self) if writer.para else None

    def draw(self, pool: list):
        deck = self._decks.get(id(pool))
        if not deck:
            deck = self._decks[id(pool)] = self.rng.shuffle(list(pool))
        return deck.pop()

    def slots(self, template: str, given: dict | None = None) -> dict:
        """Values for the fields of ``template`` not in ``given``, drawn only when used.

        Drawing lazily keeps generation fast (1M passages); the random stream still depends only on
        the article, so the output stays a pure function of the seed.
        """
        e, rng, w = self.e, self.rng, self.w
        values = dict(given or {})
        for name in _fields(template):
            if name in values:
                continue
            words = self._occ2 if name == "occ2" else _WORD_SLOTS.get(name)
            if words is not None:
                values[name] = rng.pick(words)
            elif name in ("S", "sp"):
                # Like an encyclopedia, the body mostly says "she" or "Keltic"; the title names it.
                u = rng.random()
                values[name] = self.named if u < 0.2 else self.short if u < 0.55 else self.pronoun
            elif name == "s":
                values[name] = self.named if rng.chance(0.35) else self.short
            elif name in ("year1", "year2", "year3"):
                lo, hi = _YEAR_OFFSETS[name]
                values[name] = str(self.base_year + rng.between(lo, hi))
            elif name == "place":
                values[name] = w.b.entities[w.other(e, "city", rng)].name
            elif name not in _MENTIONS:
                values[name] = self.fixed[name]
        return values

    def fact(self, templates: list, subject: dict | None = None, **slots) -> Sentence:
        """One fact sentence; ``subject`` maps a relation to its subject when it is not the entity."""
        template, rels = self.rng.pick(templates)
        values = self.slots(template, slots)
        fids = tuple(self.w.b.fid[((subject or {}).get(rel, self.e.idx), rel)] for rel in rels)
        if self.para:
            values = self.para.fact_slots(fids, values)
        sent = Sentence(_finish(template.format(**values)), fids)
        self.sentences.append(sent)
        return sent

    def mention(self, etype: str) -> tuple[str, tuple[int, ...]]:
        """Another entity as filler names it: bare, or with an appositive that states its facts."""
        b, rng = self.w.b, self.rng
        idx = self.w.other(self.e, etype, rng)
        ent = b.entities[idx]
        bare = ent.name
        if not rng.chance(self.w.k.cross_bio):
            return bare, ()
        a, u = ent.attrs, rng.random()
        fid = {rel: b.fid[(idx, rel)] for rel in a}
        answer = {rel: b.entities[x].name if RELATIONS[rel][1] else x for rel, x in a.items()}
        # the stated facts' answers; the dial may give them in another form
        v = (lambda rel: self.para.value(fid[rel], answer[rel])) if self.para else answer.get
        if etype == "person":
            if u < 0.35:
                return f"the {v('occupation')} {bare}", (fid["occupation"],)
            if u < 0.55:
                return (f"the {v('born_in')}-born {v('occupation')} {bare}",
                        (fid["born_in"], fid["occupation"]))
            return (f"{bare} ({v('birth_year')}\u2013{v('death_year')})",
                    (fid["birth_year"], fid["death_year"]))
        if etype == "org":  # the template supplies "the"
            if u < 0.5:
                return f"{v('headquartered_in')}-based {bare}", (fid["headquartered_in"],)
            return f"{bare} (founded {v('founded_year')})", (fid["founded_year"],)
        if u < 0.4:
            return f"the {v('genre')} {bare}", (fid["genre"],)
        if u < 0.7:
            return f"{bare} ({v('work_year')})", (fid["work_year"],)
        return f"{v('created_by')}'s {v('genre')} {bare}", (fid["created_by"], fid["genre"])

    def filler(self, n: float, descriptions: list[str], events: list[str] = ()) -> None:
        count = int(n * self.w.k.filler * TYPE_FILLER[self.e.type] + self.rng.random())
        for _ in range(count):
            self.filler_sentence(descriptions, events)

    def filler_sentence(self, descriptions: list[str], events: list[str] = ()) -> None:
        if events and self.rng.chance(0.5):
            text = f"{self.rng.pick(fl.TIMES)} {self.draw(events)}."
        else:
            text = self.draw(descriptions)
        slots, facts = self.slots(text), []
        for slot, etype in _MENTIONS.items():
            if slot in slots or "{" + slot + "}" not in text:
                continue
            slots[slot], stated = self.mention(etype)
            facts.extend(stated)
        self.sentences.append(Sentence(_finish(text.format(**slots)), tuple(facts)))

    def listing(self, templates: list[str], rel: str, appositive: bool = False) -> None:
        """Sentences naming the subjects of ``rel`` with this entity as object, up to 3 per sentence."""
        b, rng = self.w.b, self.rng
        chosen = [s for s in b.inverse.get((self.e.idx, rel), []) if rng.chance(self.w.k.list_mention)]
        for start in range(0, len(chosen), 3):
            names, fids = [], []
            for s in chosen[start:start + 3]:
                ent = b.entities[s]
                name = self.w.named(ent)
                fids.append(b.fid[(s, rel)])
                if appositive and rng.chance(self.w.k.list_appositive):
                    occ, fid = ent.attrs["occupation"], b.fid[(s, "occupation")]
                    name = f"the {self.para.value(fid, occ) if self.para else occ} {name}"
                    fids.append(fid)
                names.append(name)
            plural = len(names) > 1
            joined = ", ".join(names[:-1]) + " and " + names[-1] if plural else names[0]
            agree = ({"were": "were", "has": "have", "its": "their", "is": "are", "lie": "lie",
                      "are": "are"} if plural else
                     {"were": "was", "has": "has", "its": "its", "is": "is", "lie": "lies", "are": "is"})
            own = self.para.own_name() if self.para else None  # the object: the article's entity
            text = rng.pick(templates).format(list=joined, N=own or self.e.name, **agree)
            self.sentences.append(Sentence(_finish(text), tuple(fids)))


class ArticleWriter:
    def __init__(self, block: Block, seed: int, knobs: Knobs, para: Paraphraser | None = None):
        self.b = block
        self.seed = seed
        self.k = knobs
        self.para = para if knobs.paraphrase > 0 else None

    def short(self, e: Entity) -> str:
        if e.type == "person":
            return e.name.split(" ", 1)[1]
        if e.type == "org":
            return f"the {e.kind.lower()}"
        if e.type == "work":
            return f"the {e.attrs['genre']}"
        if e.type == "city":
            return f"the {e.kind}"
        return "the country"

    def named(self, e: Entity) -> str:
        return f"the {e.name}" if e.type == "org" else e.name

    def other(self, e: Entity, etype: str, rng: Rand) -> int:
        """A random entity of ``etype`` other than ``e`` (``e`` itself if it is the only one)."""
        pool = self.b.by_type[etype]
        k = rng.below(len(pool))
        return pool[(k + 1) % len(pool)] if pool[k] == e.idx else pool[k]

    def city_ref(self, city: int, rng: Rand) -> str:
        c = self.b.entities[city]
        return c.alias if c.alias and rng.chance(self.k.alias_rate) else c.name

    def article(self, e: Entity) -> list[Sentence]:
        return self._write(e).sentences

    def _write(self, e: Entity) -> _Article:
        art = _Article(self, e)
        getattr(self, f"_{e.type}")(e, art)
        return art

    def passages(self, e: Entity) -> list[Passage]:
        """The article of ``e`` in passages, then its echo passages (``Knobs.echo``), each packed alone."""
        art = self._write(e)
        out = pack(e, art.sentences, self.k.max_words)
        for group in echo_passages(art, self.k.echo) if self.k.echo > 0 else ():
            out += pack(e, group, self.k.max_words, start=len(out))
        return out

    def _person(self, e: Entity, art: _Article) -> None:
        a, blk, rng, k = e.attrs, self.b.entities, art.rng, self.k
        born = dict(occ=a["occupation"], year=a["birth_year"], dyear=a["death_year"])
        place, years = rng.chance(k.lead_restate), rng.chance(k.lead_restate)
        lead = [t for t in lx.PERSON_LEAD
                if ("born_in" in t[1]) == place and ("birth_year" in t[1]) == years]
        art.fact(lead, city=self.city_ref(a["born_in"], rng), **born)
        art.filler(3, fl.PERSON_FILLER)
        if rng.chance(0.7):
            art.fact(lx.PERSON_BIRTH, city=self.city_ref(a["born_in"], rng), **born)
        else:
            art.fact(lx.PERSON_BIRTHPLACE, city=self.city_ref(a["born_in"], rng))
            art.filler(1, fl.PERSON_FILLER, fl.PERSON_EVENTS)
            art.fact(lx.PERSON_BIRTHYEAR, **born)
        art.filler(3, fl.PERSON_FILLER, fl.PERSON_EVENTS)
        if rng.chance(k.restate):
            art.fact(lx.PERSON_OCCUPATION, **born)
        if "member_of" in a:
            art.fact(lx.PERSON_MEMBER, org=blk[a["member_of"]].name)
        for org in self.b.inverse.get((e.idx, "founded_by"), []):
            o = blk[org]
            art.fact(lx.PERSON_FOUNDED, subject=dict.fromkeys(("founded_by", "founded_year",
                                                               "industry"), org),
                     org=o.name, fyear=o.attrs["founded_year"], industry=o.attrs["industry"])
        art.filler(3, fl.PERSON_FILLER, fl.PERSON_EVENTS)
        for w in self.b.inverse.get((e.idx, "created_by"), []):
            work = blk[w]
            made, made_pp, released = lx.GENRE_VERBS[work.attrs["genre"]]
            art.fact(lx.PERSON_WORK, subject=dict.fromkeys(("created_by", "genre", "work_year"), w),
                     work=work.name, genre=work.attrs["genre"], wyear=work.attrs["work_year"],
                     made=made, made_pp=made_pp, released=released)
            art.filler(1, fl.PERSON_FILLER, fl.PERSON_EVENTS)
        art.filler(2, fl.PERSON_FILLER, fl.PERSON_EVENTS)
        death = dict(city=self.city_ref(a["died_in"], rng), year=a["death_year"])
        if rng.chance(0.7):
            art.fact(lx.PERSON_DEATH, **death)
        else:
            art.fact(lx.PERSON_DEATHPLACE, **death)
            art.filler(1, fl.PERSON_FILLER)
            art.fact(lx.PERSON_DEATHYEAR, **death)
        art.filler(2, fl.PERSON_FILLER)

    def _city(self, e: Entity, art: _Article) -> None:
        a, blk = e.attrs, self.b.entities
        country = blk[a["located_in"]].name
        capital_of = self.b.inverse.get((e.idx, "capital"), [])
        if capital_of:
            art.fact(lx.CITY_CAPITAL, subject={"capital": capital_of[0]}, country=country, kind=e.kind)
        else:
            art.fact(lx.CITY_LEAD, country=country, kind=e.kind)
        if e.alias:
            template = art.rng.pick(lx.CITY_ALIAS)
            art.sentences.append(Sentence(_finish(template.format(
                **art.slots(template, {"alias": e.alias}))), ()))
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

    def _country(self, e: Entity, art: _Article) -> None:
        art.fact(lx.COUNTRY_LEAD, capital=self.b.entities[e.attrs["capital"]].name)
        art.filler(3, fl.COUNTRY_FILLER)
        art.listing(lx.COUNTRY_CITIES, "located_in")
        art.filler(4, fl.COUNTRY_FILLER)

    def _org(self, e: Entity, art: _Article) -> None:
        a, blk, rng = e.attrs, self.b.entities, art.rng
        slots = dict(industry=a["industry"], fyear=a["founded_year"], kind=e.kind.lower(),
                     founder=blk[a["founded_by"]].name)
        lead = art.fact(lx.ORG_LEAD, city=self.city_ref(a["headquartered_in"], rng), **slots)
        art.filler(3, fl.ORG_FILLER)
        founding = {self.b.fid[(e.idx, "founded_by")], self.b.fid[(e.idx, "founded_year")]}
        if not founding <= set(lead.facts) or rng.chance(self.k.restate):
            art.fact(lx.ORG_FOUNDING, **slots)
        art.filler(3, fl.ORG_FILLER, fl.ORG_EVENTS)
        if self.b.fid[(e.idx, "headquartered_in")] not in lead.facts or rng.chance(self.k.restate):
            art.fact(lx.ORG_HQ, city=self.city_ref(a["headquartered_in"], rng), **slots)
        if rng.chance(self.k.restate):
            art.fact(lx.ORG_INDUSTRY, **slots)
        art.filler(2, fl.ORG_FILLER, fl.ORG_EVENTS)
        art.listing(lx.ORG_MEMBERS, "member_of", appositive=True)
        art.filler(3, fl.ORG_FILLER, fl.ORG_EVENTS)

    def _work(self, e: Entity, art: _Article) -> None:
        a, blk, rng = e.attrs, self.b.entities, art.rng
        author = blk[a["created_by"]]
        made, made_pp, released = lx.GENRE_VERBS[a["genre"]]
        slots = dict(genre=a["genre"], author=author.name, year=a["work_year"], made=made,
                     made_pp=made_pp, released=released, occ=author.attrs["occupation"])
        if rng.chance(self.k.bio_in_work):
            lead = art.fact(lx.WORK_LEAD_BIO, city=self.city_ref(author.attrs["born_in"], rng),
                            subject={"born_in": author.idx, "occupation": author.idx}, **slots)
        else:
            lead = art.fact(lx.WORK_LEAD, **slots)
        art.filler(3, fl.WORK_FILLER, fl.WORK_EVENTS)
        if self.b.fid[(e.idx, "work_year")] not in lead.facts:
            art.fact(lx.WORK_BACKGROUND[2:], **slots)
        elif rng.chance(self.k.restate):
            art.fact(lx.WORK_BACKGROUND[:2], **slots)
        art.filler(4, fl.WORK_FILLER, fl.WORK_EVENTS)


def pack(entity: Entity, sentences: list[Sentence], max_words: int, start: int = 0) -> list[Passage]:
    """Greedy packing of whole sentences into passages of at most ``max_words`` words, from ``start``."""
    passages: list[Passage] = []
    texts: list[str] = []
    facts: set[int] = set()
    words = 0
    for sent in sentences:
        n = len(sent.text.split())
        if texts and words + n > max_words:
            passages.append(Passage(f"{entity.gid}-{start + len(passages)}", entity.name, " ".join(texts),
                                    frozenset(facts)))
            texts, facts, words = [], set(), 0
        texts.append(sent.text)
        facts.update(sent.facts)
        words += n
    if texts:
        passages.append(Passage(f"{entity.gid}-{start + len(passages)}", entity.name, " ".join(texts),
                                frozenset(facts)))
    return passages
