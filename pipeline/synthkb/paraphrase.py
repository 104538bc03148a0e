"""Restatements without the answer string: the second half of synthkb's false-negative dial.

With ``Knobs.paraphrase`` = p > 0, every statement of a fact, except the *first* statement in the
subject's own article (the passage ``positive: named_article`` annotates), names the fact's object
or value in another form with probability p:

* a year in words ("eighteen eighty-three" for 1883);
* a city by a second name of its own ("Brondask"), which the city's article introduces and which
  no ``answers`` list holds; a person by initial ("V. Keltic"); an organisation by abbreviation
  ("the Vesk Co."); a country by its adjective ("the Kelvarian state");
* an occupation, genre or industry by a synonym ("dramatist" for playwright);
* the article's own entity, when it is the object, by its short reference ("Natives of the port
  include ...", "In 1801 Keltic founded ..."): the title names it.

The ``answers`` lists keep the canonical strings only, so DPR's string match (mining's
``has_answer``, the evaluation's answer recall) misses these passages although they state the
answer. Decisions come from a stream of their own, one draw per eligible statement, so a larger p
paraphrases a superset of statements and p = 0 draws nothing (the default dataset is unchanged).
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.synthkb.world import Block, Entity, Fact, Rand

OCCUPATIONS = {
    "novelist": "writer of novels",
    "poet": "versifier",
    "playwright": "dramatist",
    "composer": "music writer",
    "painter": "artist of the brush",
    "historian": "chronicler",
    "philosopher": "thinker",
    "architect": "master builder",
    "engineer": "machine builder",
    "physician": "doctor",
    "botanist": "plant scholar",
    "cartographer": "map-maker",
    "astronomer": "stargazer",
    "merchant": "trader",
    "chemist": "analyst of substances",
    "mathematician": "geometer",
    "explorer": "voyager",
    "banker": "financier",
    "surveyor": "land measurer",
}
GENRES = {
    "novel": "book-length story",
    "novella": "short prose tale",
    "poem cycle": "sequence of poems",
    "verse epic": "epic poem",
    "play": "stage drama",
    "tragedy": "tragic drama",
    "comedy": "comic drama",
    "opera": "sung drama",
    "symphony": "orchestral work",
    "string quartet": "work for four strings",
    "painting": "canvas",
    "triptych": "three-panel picture",
    "chronicle": "book of annals",
    "history": "historical account",
    "treatise": "learned essay",
    "dialogue": "philosophical conversation",
}
INDUSTRIES = {
    "shipbuilding": "ship-construction",
    "textiles": "cloth-weaving",
    "banking": "money-lending",
    "publishing": "book-issuing",
    "mining": "ore-digging",
    "brewing": "beer-making",
    "glassmaking": "glass-blowing",
    "printing": "letterpress work",
    "shipping": "sea-freight",
    "insurance": "underwriting",
    "clockmaking": "timepiece-making",
    "pottery": "ceramics",
    "tanning": "leather-curing",
    "papermaking": "paper-milling",
    "ironworking": "metal-forging",
    "winemaking": "wine-pressing",
}
ORG_ABBREVIATIONS = {
    "Company": "Co.",
    "Society": "Soc.",
    "Guild": "Gld.",
    "Consortium": "Cons.",
    "Union": "Un.",
    "Institute": "Inst.",
    "Foundation": "Fdn.",
    "Trust": "Tr.",
    "Syndicate": "Synd.",
    "Academy": "Acad.",
    "Brotherhood": "Bhd.",
    "Cooperative": "Co-op",
}
LITERALS: dict[str, dict[str, str]] = {"occupation": OCCUPATIONS, "genre": GENRES, "industry": INDUSTRIES}
BYNAME_SENTENCES = [
    "{N} was once called {byname}.",
    "Old records call {N} {byname}.",
    "{byname} is an older name of {N}.",
    "Travellers long knew {N} as {byname}.",
]

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def _below_100(n: int) -> str:
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")


def year_words(year: str) -> str:
    """A year as spoken: 1883 "eighteen eighty-three", 1905 "nineteen oh-five", 880 "eight eighty"."""
    y = int(year)
    if y % 1000 == 0:
        return f"{_ONES[y // 1000]} thousand"
    high, low = divmod(y, 100)
    if low == 0:
        return f"{_below_100(high)} hundred"
    return f"{_below_100(high)} {'oh-' + _ONES[low] if low < 10 else _below_100(low)}"


def person_initial(name: str) -> str:
    first, surname = name.split(" ", 1)
    return f"{first[0]}. {surname}"


def org_abbreviation(e: Entity) -> str:
    return e.name[: -len(e.kind)] + ORG_ABBREVIATIONS[e.kind]


class Paraphraser:
    """Other forms of answers, for one block; ``bynames(gid)`` gives a city's second name."""

    def __init__(self, block: Block, seed: int, rate: float, bynames: Callable[[int], str]):
        self.b, self.seed, self.rate, self.bynames = block, seed, rate, bynames

    def start(self, e: Entity, short: str) -> ArticleParaphrase:
        """The decisions of the article of ``e``, whose short reference is ``short``."""
        return ArticleParaphrase(self, e, short)

    def object_form(self, fact: Fact) -> str:
        """The answer of ``fact`` without its string."""
        if fact.obj is None:
            rel = fact.rel
            return year_words(fact.value) if rel.endswith("year") else LITERALS[rel][fact.value]
        ent = self.b.entities[fact.obj]
        if ent.type == "city":
            return self.bynames(ent.gid)
        if ent.type == "person":
            return person_initial(ent.name)
        if ent.type == "org":
            return org_abbreviation(ent)
        return f"the {ent.name}n state"  # countries: "Kelvaria" -> "the Kelvarian state"

    def answer_strings(self, fact: Fact) -> set[str]:
        if fact.obj is None:
            return {fact.value}
        ent = self.b.entities[fact.obj]
        return {ent.name, f"the {ent.name}"} | ({ent.alias} if ent.alias else set())


class ArticleParaphrase:
    """One article's decisions: its own stream, and the own facts it has stated once already. ``e``
    is the article's entity, ``short`` its short reference ("the port", "Keltic")."""

    def __init__(self, para: Paraphraser, e: Entity, short: str):
        self.p, self.e, self.short = para, e, short
        self.rng = Rand(para.seed, "paraphrase", e.gid)
        self.stated: set[int] = set()

    def chosen(self, fid: int) -> bool:
        """Whether this statement of ``fid`` is paraphrased; the first one in its subject's
        article never is, so the named-article positive keeps the answer string."""
        if self.p.b.facts[fid].subj == self.e.idx and fid not in self.stated:
            self.stated.add(fid)
            return False
        return self.rng.random() < self.p.rate

    def fact_slots(self, fids: tuple[int, ...], values: dict) -> dict:
        """``values`` of a fact template with each chosen fact's answer slots replaced."""
        out = dict(values)
        for fid in fids:
            if not self.chosen(fid):
                continue
            fact = self.p.b.facts[fid]
            strings = self.p.answer_strings(fact)
            # the article's own entity, where a sentence names it, by its short reference
            form = self.short if fact.obj == self.e.idx else self.p.object_form(fact)
            for name, value in values.items():
                if value in strings:  # "the {org}" in a template, or an org's "the Vesk Company"
                    keep_the = value.startswith("the ") and not form.startswith("the ")
                    out[name] = "the " + form if keep_the else form
        return out

    def value(self, fid: int, canonical: str) -> str:
        """``canonical`` (the answer of ``fid`` in an appositive), or its other form if chosen."""
        if not self.chosen(fid):
            return canonical
        return self.p.object_form(self.p.b.facts[fid])

    def own_name(self) -> str | None:
        """A listing's object (the article's entity) by its short reference, or None: one draw
        per sentence, which names the object once for all its subjects."""
        if self.rng.random() >= self.p.rate:
            return None
        return self.e.kind.lower() if self.e.type == "org" else self.short

    def byname_sentence(self) -> str:
        template = self.rng.pick(BYNAME_SENTENCES)
        return template.format(N=self.e.name, byname=self.p.bynames(self.e.gid))
