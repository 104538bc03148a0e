"""An article being written: its sentences, each recording which facts it states.

``Draft`` holds one article's random stream and writes its sentences; ``articles.ArticleWriter``
decides what each type of article says and in which order, ``echo`` adds restatements after it.
Two rules keep the provenance exact and every relevant passage answer-bearing:

* a sentence states a fact only through a template of ``synthkb_lexicon`` that declares it;
* the *object* of a stated fact is always named in the sentence (its name, or a city's alias); only the
  article's own entity, when it is the fact's *subject*, may appear as a pronoun or short name, and the
  passage title then names it.

With the dial's paraphrase rate on (``Knobs.paraphrase``), the draft's ``paraphrase.ArticleParaphrase``
may give a stated fact's answer in another form; the fact is recorded all the same. ``Knobs``, the
writer's settings, live here because the draft reads most of them (how often facts are mentioned
again in filler and listings, how much filler).
"""

from __future__ import annotations

import functools
import re
import string
from dataclasses import dataclass

from pipeline.synthkb import filler as fl
from pipeline.synthkb import lexicon as lx
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

    lead_restate: float = 0.35  # a person's lead also gives birth place / years
    list_mention: float = 1.0  # an object's article lists the subject (natives, members ...)
    list_appositive: float = 0.3  # a listed person is given with occupation ("the painter X")
    bio_in_work: float = 0.25  # a work's lead names its author's birthplace and occupation
    restate: float = 0.5  # a section repeats a fact the lead already gave
    alias_rate: float = 0.15  # a city object is named by its alias
    cross_bio: float = 0.5  # a person mentioned in filler comes with a recorded appositive
    filler: float = 2.5  # scales the number of filler sentences
    max_words: int = MAX_WORDS
    echo: float = 0.0  # dial.py: extra passages per entity restating its facts (echo.py)
    paraphrase: float = 0.0  # dial.py: a restatement gives its answer in another form


@dataclass
class Sentence:
    text: str
    facts: tuple[int, ...]


def finish(text: str) -> str:
    """``text`` as a sentence: "a" before a vowel made "an", the first letter capitalised."""
    text = _A_AN.sub(r"\1n ", text)
    return text[:1].upper() + text[1:]


def named(e: Entity) -> str:
    """``e`` as a sentence names it in full."""
    return f"the {e.name}" if e.type == "org" else e.name


def short(e: Entity) -> str:
    """``e``'s short reference: a person's surname, "the company", "the novel", "the port" ..."""
    if e.type == "person":
        return e.name.split(" ", 1)[1]
    if e.type == "org":
        return f"the {e.kind.lower()}"
    if e.type == "work":
        return f"the {e.attrs['genre']}"
    if e.type == "city":
        return f"the {e.kind}"
    return "the country"


_WORD_SLOTS = {
    "adj": lx.ADJECTIVES,
    "adj2": lx.ADJECTIVES,
    "noun": lx.NOUNS,
    "trait": lx.TRAITS,
    "trait2": lx.TRAITS,
    "parent": lx.PARENTS,
    "ordinal": lx.ORDINALS,
    "hobby": lx.HOBBIES,
    "building": lx.BUILDINGS,
    "trade": lx.TRADES,
    "emblem": lx.EMBLEMS,
    "quality": lx.QUALITIES,
    "quality2": lx.QUALITIES,
    "weekday": lx.WEEKDAYS,
    "num": lx.NUMBERS,
    "skill": lx.SKILLS,
    "dislike": lx.DISLIKES,
    "topic": lx.TOPICS,
    "food": lx.FOODS,
    "material": lx.MATERIALS,
    "relative": lx.RELATIVES,
}
_YEAR_OFFSETS = {"year1": (-10, 25), "year2": (15, 60), "year3": (45, 85)}
# Filler slots naming another entity of the block (see Draft.mention).
_MENTIONS = {"other": "person", "org_any": "org", "work_any": "work"}


@functools.lru_cache(maxsize=None)
def _fields(template: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f for _, f, _, _ in string.Formatter().parse(template) if f))


class Draft:
    """The article of ``e`` being written: its sentences so far, its random stream and filler decks
    (no filler repeats within an article)."""

    def __init__(self, block: Block, seed: int, knobs: Knobs, e: Entity, para: Paraphraser | None = None):
        self.b, self.seed, self.k, self.e = block, seed, knobs, e
        self.rng = Rand(seed, "article", e.gid)
        self._decks: dict[int, list] = {}
        self.sentences: list[Sentence] = []
        self.pronoun = e.gender if e.type == "person" else "it"
        self.named, self.short = named(e), short(e)
        poss = {"he": "his", "she": "her"}.get(self.pronoun, "its")
        self.fixed = dict(
            pro=self.pronoun,
            poss=poss,
            Poss=poss,
            N=self.named,
            kind=self.short[4:],
            genre=e.attrs.get("genre", ""),
        )
        # Around the years of a life, a work or an organisation; places get the era of the people
        # and works that their filler mentions.
        year = next((e.attrs[k] for k in ("birth_year", "work_year", "founded_year") if k in e.attrs), None)
        self.base_year = int(year) if year else self.rng.between(1700, 1850)
        # "worked briefly as a {occ2}" must never restate the entity's own occupation unrecorded.
        self._occ2 = [o for o in OCCUPATIONS if o != e.attrs.get("occupation")]
        self.para = para.start(e, self.short) if para else None

    # ---- the block, as this article refers to it ----------------------------------------------------

    def other(self, etype: str) -> int:
        """A random entity of ``etype`` other than the article's (itself if it is the only one)."""
        pool = self.b.by_type[etype]
        k = self.rng.below(len(pool))
        return pool[(k + 1) % len(pool)] if pool[k] == self.e.idx else pool[k]

    def city_ref(self, city: int) -> str:
        """How the article names ``city``: by its name, or now and then by its alias."""
        c = self.b.entities[city]
        return c.alias if c.alias and self.rng.chance(self.k.alias_rate) else c.name

    def answer(self, fid: int, canonical: str) -> str:
        """The answer of fact ``fid`` as a sentence gives it: ``canonical``, or with the dial's
        paraphrase rate on, maybe another form of it."""
        return self.para.value(fid, canonical) if self.para else canonical

    # ---- sentences ----------------------------------------------------------------------------------

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
        rng = self.rng
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
                values[name] = self.b.entities[self.other("city")].name
            elif name not in _MENTIONS:
                values[name] = self.fixed[name]
        return values

    def fact(self, templates: list, subject: dict | None = None, **slots) -> Sentence:
        """One fact sentence; ``subject`` maps a relation to its subject when it is not the entity."""
        template, rels = self.rng.pick(templates)
        values = self.slots(template, slots)
        fids = tuple(self.b.fid[((subject or {}).get(rel, self.e.idx), rel)] for rel in rels)
        if self.para:
            values = self.para.fact_slots(fids, values)
        sent = Sentence(finish(template.format(**values)), fids)
        self.sentences.append(sent)
        return sent

    def mention(self, etype: str) -> tuple[str, tuple[int, ...]]:
        """Another entity as filler names it: bare, or with an appositive that states its facts."""
        b, rng = self.b, self.rng
        idx = self.other(etype)
        ent = b.entities[idx]
        bare = ent.name
        if not rng.chance(self.k.cross_bio):
            return bare, ()
        u = rng.random()
        fid = {rel: b.fid[(idx, rel)] for rel in ent.attrs}
        answer = {rel: b.entities[x].name if RELATIONS[rel][1] else x for rel, x in ent.attrs.items()}

        def v(rel: str) -> str:  # the answer of the stated fact ``rel``, as the sentence gives it
            return self.answer(fid[rel], answer[rel])

        if etype == "person":
            if u < 0.35:
                return f"the {v('occupation')} {bare}", (fid["occupation"],)
            if u < 0.55:
                return (
                    f"the {v('born_in')}-born {v('occupation')} {bare}",
                    (fid["born_in"], fid["occupation"]),
                )
            return (
                f"{bare} ({v('birth_year')}\u2013{v('death_year')})",
                (fid["birth_year"], fid["death_year"]),
            )
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
        """About ``n`` filler sentences (scaled by ``Knobs.filler`` and the article's type)."""
        count = int(n * self.k.filler * TYPE_FILLER[self.e.type] + self.rng.random())
        for _ in range(count):
            self.filler_sentence(descriptions, events)

    def filler_sentence(self, descriptions: list[str], events: list[str] = ()) -> None:
        """A description, or half the time (if ``events``) an event; facts only in mentions."""
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
        self.sentences.append(Sentence(finish(text.format(**slots)), tuple(facts)))

    def listing(self, templates: list[str], rel: str, appositive: bool = False) -> None:
        """Sentences naming the subjects of ``rel`` with this entity as object, up to 3 per sentence."""
        b, rng = self.b, self.rng
        chosen = [s for s in b.inverse.get((self.e.idx, rel), []) if rng.chance(self.k.list_mention)]
        for start in range(0, len(chosen), 3):
            names, fids = [], []
            for s in chosen[start : start + 3]:
                ent = b.entities[s]
                name = named(ent)
                fids.append(b.fid[(s, rel)])
                if appositive and rng.chance(self.k.list_appositive):
                    fid = b.fid[(s, "occupation")]
                    name = f"the {self.answer(fid, ent.attrs['occupation'])} {name}"
                    fids.append(fid)
                names.append(name)
            plural = len(names) > 1
            joined = ", ".join(names[:-1]) + " and " + names[-1] if plural else names[0]
            agree = (
                {"were": "were", "has": "have", "its": "their", "is": "are", "lie": "lie", "are": "are"}
                if plural
                else {"were": "was", "has": "has", "its": "its", "is": "is", "lie": "lies", "are": "is"}
            )
            # the object is the article's own entity: by name, or (paraphrased) its short reference
            own = self.para.own_name() if self.para else None
            text = rng.pick(templates).format(list=joined, N=own or self.e.name, **agree)
            self.sentences.append(Sentence(finish(text), tuple(fids)))
