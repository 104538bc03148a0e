"""The synthkb knowledge base: entities of five types in independent blocks, and their facts.

A block is a self-contained little world (its relations never leave it), so the generator holds one
block at a time: memory does not grow with ``entities``. Which entities a block holds, and every
global index used for names, follow from closed formulas over the block sizes, so block ``b`` can be
built without building blocks ``0..b-1``.

Every relation is functional (one value per subject), so a fact is identified by (subject, relation).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Sequence

from pipeline.synthkb.names import NameSpace, stable_int

BLOCK_SIZE = 200
TYPES = ("country", "city", "org", "person", "work")
# Shares of a block per type (persons take the rest): several persons and organisations per city,
# several cities per country, so the reverse questions ("who was born in X?") have a few answers.
TYPE_SHARES = {"country": 0.04, "city": 0.16, "org": 0.18, "work": 0.22}
TYPE_MINIMUM = {"country": 1, "city": 2, "org": 1, "work": 1, "person": 2}

# relation -> (subject type, object type or None for a literal value)
RELATIONS = {
    "located_in": ("city", "country"),
    "city_year": ("city", None),
    "capital": ("country", "city"),
    "born_in": ("person", "city"),
    "birth_year": ("person", None),
    "died_in": ("person", "city"),
    "death_year": ("person", None),
    "occupation": ("person", None),
    "member_of": ("person", "org"),
    "headquartered_in": ("org", "city"),
    "founded_by": ("org", "person"),
    "founded_year": ("org", None),
    "industry": ("org", None),
    "created_by": ("work", "person"),
    "work_year": ("work", None),
    "genre": ("work", None),
}

# Creative occupations produce works; the genre follows the occupation.
GENRES = {
    "novelist": ["novel", "novella"],
    "poet": ["poem cycle", "verse epic"],
    "playwright": ["play", "tragedy", "comedy"],
    "composer": ["opera", "symphony", "string quartet"],
    "painter": ["painting", "triptych"],
    "historian": ["chronicle", "history"],
    "philosopher": ["treatise", "dialogue"],
}
OTHER_OCCUPATIONS = [
    "architect",
    "engineer",
    "physician",
    "botanist",
    "cartographer",
    "astronomer",
    "merchant",
    "chemist",
    "mathematician",
    "explorer",
    "banker",
    "surveyor",
]
INDUSTRIES = [
    "shipbuilding",
    "textiles",
    "banking",
    "publishing",
    "mining",
    "brewing",
    "glassmaking",
    "printing",
    "shipping",
    "insurance",
    "clockmaking",
    "pottery",
    "tanning",
    "papermaking",
    "ironworking",
    "winemaking",
]
CITY_KINDS = ["town", "city", "port", "market town"]


class Rand:
    """Seeded choices built only on random(), whose stream Python guarantees across versions."""

    def __init__(self, *parts: object):
        self._r = random.Random(stable_int(*parts))

    def random(self) -> float:
        return self._r.random()

    def chance(self, p: float) -> bool:
        return self._r.random() < p

    def below(self, n: int) -> int:
        k = int(self._r.random() * n)
        return k if k < n else n - 1  # r * n can round up to n for huge n

    def between(self, lo: int, hi: int) -> int:
        return lo + self.below(hi - lo + 1)

    def pick(self, seq: Sequence):
        return seq[self.below(len(seq))]

    def shuffle(self, items: list) -> list:
        for i in range(len(items) - 1, 0, -1):
            j = self.below(i + 1)
            items[i], items[j] = items[j], items[i]
        return items

    def sample(self, seq: Sequence, k: int) -> list:
        return self.shuffle(list(seq))[:k]


@dataclass
class Entity:
    idx: int  # index within the block
    gid: int  # global id (pids and qids derive from it)
    type: str
    name: str
    group: int  # distractor group: members share part of their names
    alias: str | None = None
    kind: str | None = None  # city: town/port/...; org: the kind word of its name
    gender: str | None = None
    attrs: dict = field(default_factory=dict)  # relation -> entity idx or literal string

    def answers(self) -> list[str]:
        return [self.name] + ([self.alias] if self.alias else [])


@dataclass(frozen=True)
class Fact:
    fid: int
    subj: int
    rel: str
    obj: int | None  # entity idx (entity-valued relations)
    value: str | None  # literal relations


def composition(n: int) -> dict[str, int]:
    counts = {t: max(TYPE_MINIMUM[t], round(share * n)) for t, share in TYPE_SHARES.items()}
    counts["person"] = n - sum(counts.values())
    if counts["person"] < TYPE_MINIMUM["person"]:
        raise ValueError(f"a block of {n} entities is too small")
    return counts


class Layout:
    """Block sizes (as equal as possible, at most BLOCK_SIZE) and global offsets, in closed form."""

    def __init__(self, entities: int, block_size: int = BLOCK_SIZE):
        if entities < 10:
            raise ValueError("synthkb needs at least 10 entities")
        self.entities = entities
        # At most block_size per block, and never below 10 (the smallest block with every type).
        self.n_blocks = max(1, min(-(-entities // block_size), entities // 10))
        self.small, self.n_large = divmod(entities, self.n_blocks)  # n_large blocks of small+1
        self._comp_small = composition(self.small)
        self._comp_large = composition(self.small + 1)

    def size(self, block: int) -> int:
        return self.small + (1 if block < self.n_large else 0)

    def comp(self, block: int) -> dict[str, int]:
        return self._comp_large if block < self.n_large else self._comp_small

    def _count_before(self, block: int, key) -> int:
        large = min(block, self.n_large)
        return large * key(self._comp_large, self.small + 1) + (block - large) * key(
            self._comp_small, self.small
        )

    def entity_offset(self, block: int) -> int:
        return self._count_before(block, lambda comp, size: size)

    def type_offset(self, block: int, etype: str) -> int:
        return self._count_before(block, lambda comp, size: comp[etype])

    def type_total(self, etype: str) -> int:
        return self.type_offset(self.n_blocks, etype)


def name_space(layout: Layout, seed: int, bynames: bool = False) -> NameSpace:
    """Every name of the KB; ``bynames``: also cities' second names (the paraphrase dial)."""
    cities = layout.type_total("city")
    return NameSpace(
        seed,
        {
            "city": cities,
            "alias": cities,
            "country": layout.type_total("country"),
            "org": layout.type_total("org"),
            "work": layout.type_total("work"),
            "person_group": layout.type_total("person"),
            "byname": layout.entities if bynames else 0,
        },
    )


@dataclass
class Block:
    index: int
    entities: list[Entity]
    facts: list[Fact]
    fid: dict[tuple[int, str], int]  # (subject idx, relation) -> fact id
    inverse: dict[tuple[int, str], list[int]]  # (object idx, relation) -> subject idxs
    by_type: dict[str, list[int]]

    def fact(self, subj: int, rel: str) -> Fact | None:
        fid = self.fid.get((subj, rel))
        return None if fid is None else self.facts[fid]

    def answers(self, fact: Fact) -> list[str]:
        if fact.obj is not None:
            return self.entities[fact.obj].answers()
        return [fact.value]


def build_block(
    layout: Layout, names: NameSpace, seed: int, block: int, distractor_rate: float = 0.6
) -> Block:
    """Entities, attributes and facts of one block; a pure function of its arguments."""
    rng = Rand(seed, "world", block)
    comp = layout.comp(block)
    entities: list[Entity] = []
    by_type: dict[str, list[int]] = {t: [] for t in TYPES}
    gid0 = layout.entity_offset(block)
    for etype in TYPES:
        t0 = layout.type_offset(block, etype)
        members = _groups(comp[etype], distractor_rate, rng)
        for k, (first, member) in enumerate(members):
            group = t0 + first
            ent = Entity(idx=len(entities), gid=gid0 + len(entities), type=etype, name="", group=group)
            if etype == "country":
                ent.name = names.country(t0 + k)
            elif etype == "city":
                ent.name = names.city(group, member)
                ent.alias = names.city_alias(t0 + k) if rng.chance(0.3) else None
                ent.kind = rng.pick(CITY_KINDS)
            elif etype == "org":
                ent.name, ent.kind = names.org(group, member)
            elif etype == "person":
                ent.name = names.person(group, member)
                ent.gender = rng.pick(("he", "she"))
            else:
                ent.name = names.work(group, member)
            by_type[etype].append(ent.idx)
            entities.append(ent)
    _assign_attributes(entities, by_type, rng)
    return _with_facts(block, entities, by_type)


def _groups(n: int, distractor_rate: float, rng: Rand) -> list[tuple[int, int]]:
    """(first index of its group, member number) for n entities; groups of 1-3 members."""
    out: list[tuple[int, int]] = []
    while len(out) < n:
        size = 1
        if rng.chance(distractor_rate):
            size = 2 if rng.chance(0.7) else 3
        first = len(out)
        out.extend((first, m) for m in range(min(size, n - first)))
    return out


def _assign_attributes(ents: list[Entity], by_type: dict[str, list[int]], rng: Rand) -> None:
    countries, cities = by_type["country"], by_type["city"]
    orgs, persons, works = by_type["org"], by_type["person"], by_type["work"]
    for k, c in enumerate(cities):
        # Every country gets at least one city, so every country has a capital.
        ents[c].attrs["located_in"] = countries[k] if k < len(countries) else rng.pick(countries)
        ents[c].attrs["city_year"] = str(rng.between(880, 1720))
    for country in countries:
        mine = [c for c in cities if ents[c].attrs["located_in"] == country]
        ents[country].attrs["capital"] = rng.pick(mine)
    creative = list(GENRES)
    for k, p in enumerate(persons):
        ents[p].attrs["born_in"] = rng.pick(cities)
        ents[p].attrs["birth_year"] = str(rng.between(1700, 1900))
        ents[p].attrs["died_in"] = rng.pick(cities)
        ents[p].attrs["death_year"] = str(int(ents[p].attrs["birth_year"]) + rng.between(35, 90))
        # The first person is always creative so that every block can have works.
        pool = creative if k == 0 or rng.chance(0.6) else OTHER_OCCUPATIONS
        ents[p].attrs["occupation"] = rng.pick(pool)
    founders = (
        rng.sample(persons, len(orgs)) if len(persons) >= len(orgs) else [rng.pick(persons) for _ in orgs]
    )
    for o, founder in zip(orgs, founders):
        ents[o].attrs["headquartered_in"] = rng.pick(cities)
        ents[o].attrs["founded_by"] = founder
        ents[o].attrs["founded_year"] = str(int(ents[founder].attrs["birth_year"]) + rng.between(22, 55))
        ents[o].attrs["industry"] = rng.pick(INDUSTRIES)
    for p in persons:
        born = int(ents[p].attrs["birth_year"])
        open_orgs = [o for o in orgs if int(ents[o].attrs["founded_year"]) <= born + 50]
        if open_orgs and rng.chance(0.7):
            ents[p].attrs["member_of"] = rng.pick(open_orgs)
    authors = [p for p in persons if ents[p].attrs["occupation"] in GENRES]
    for w in works:
        author = rng.pick(authors)
        ents[w].attrs["created_by"] = author
        ents[w].attrs["genre"] = rng.pick(GENRES[ents[author].attrs["occupation"]])
        ents[w].attrs["work_year"] = str(int(ents[author].attrs["birth_year"]) + rng.between(20, 60))


def _with_facts(block: int, ents: list[Entity], by_type: dict[str, list[int]]) -> Block:
    facts: list[Fact] = []
    fid: dict[tuple[int, str], int] = {}
    inverse: dict[tuple[int, str], list[int]] = {}
    for ent in ents:
        for rel, value in ent.attrs.items():
            obj_type = RELATIONS[rel][1]
            fact = Fact(len(facts), ent.idx, rel, value if obj_type else None, None if obj_type else value)
            facts.append(fact)
            fid[(ent.idx, rel)] = fact.fid
            if obj_type:
                inverse.setdefault((value, rel), []).append(ent.idx)
    return Block(block, ents, facts, fid, inverse, by_type)
