"""Made-up names for synthkb: unique by construction, with deliberate near-duplicates.

Every name is a pure function of (seed, global index), so blocks of entities can be generated one at a
time without remembering the names already used: an affine permutation of a fixed name space maps
distinct indices to distinct names. Names of different entity types have different shapes (persons:
vowel-final first name + surname; cities: consonant-final root, optionally with a form word; countries:
root + "ia"; organisations: root + kind word; works: "The <Noun> of <root>"), so no two entities can
share a full name.

Hard distractors come from *groups*: the members of a group share a name part and differ in another
("Varno Keltic" / "Varno Kelton", "Vesk Company" / "Vesk Guild", "Kelvar" / "Port Kelvar").
"""

from __future__ import annotations

import hashlib
import math

from pipeline.core.config import ConfigError

# Roots: two syllables, each onset + vowel + non-empty coda, so every root ends in a consonant.
ONSETS = [
    "b",
    "d",
    "f",
    "g",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "dr",
    "gr",
    "kr",
    "st",
    "th",
]
VOWELS = ["a", "e", "i", "o", "u"]
CODAS = ["l", "n", "r", "s", "m", "k", "rn", "ld", "st", "nd", "sk", "th"]
SYLLABLES = [o + v + c for o in ONSETS for v in VOWELS for c in CODAS]
ROOT_SPACE = len(SYLLABLES) ** 2

# First names always end in a vowel (roots never do), so a person's name never equals a place's.
_FIRST_HEADS = [
    "Va",
    "De",
    "Mi",
    "To",
    "Ka",
    "Si",
    "Lo",
    "Ne",
    "Ri",
    "Be",
    "Fa",
    "Ge",
    "Ze",
    "Ha",
    "Ma",
    "Ti",
]
_FIRST_MIDS = ["rn", "ls", "ss", "r", "l", "n", "v", "d", "st", "lv", "nd", "m"]
_FIRST_ENDS = ["a", "o", "e", "i"]
FIRST_NAMES = [h + m + e for h in _FIRST_HEADS for m in _FIRST_MIDS for e in _FIRST_ENDS]
SURNAME_SUFFIXES = ["ic", "on", "ard", "en", "ow", "is", "ey", "ick", "an", "el"]
PERSON_GROUP_SPACE = len(FIRST_NAMES) * len(SYLLABLES)

CITY_FORMS = [
    "{r}",
    "Port {r}",
    "{r}holm",
    "Upper {r}",
    "{r} Falls",
    "{r}wick",
    "New {r}",
    "{r}stead",
    "Lower {r}",
    "{r} Bridge",
]
ORG_KINDS = [
    "Company",
    "Society",
    "Guild",
    "Consortium",
    "Union",
    "Institute",
    "Foundation",
    "Trust",
    "Syndicate",
    "Academy",
    "Brotherhood",
    "Cooperative",
]
WORK_NOUNS = [
    "Lantern",
    "Orchard",
    "Harbour",
    "Winter",
    "Tide",
    "Crown",
    "Mirror",
    "Garden",
    "Bell",
    "Ember",
    "Voyage",
    "Silence",
    "Tower",
    "Feast",
    "Pilgrim",
    "Shadow",
    "Archive",
    "Compass",
    "Meadow",
    "Comet",
    "Anchor",
    "Falcon",
    "Requiem",
    "Threshold",
    "Furnace",
    "Orphan",
    "Tapestry",
    "Vigil",
    "Quarry",
    "Lighthouse",
    "Salt",
    "Ferryman",
    "Heron",
    "Glacier",
    "Spindle",
    "Cathedral",
    "Nightingale",
    "Ledger",
    "Sextant",
    "Bonfire",
]

# Root namespace: disjoint index ranges per use, then one permutation of the whole space. A use added
# last moves no earlier range: "byname" (a city's second name, by entity gid) exists only when the
# false-negative dial paraphrases (cap 0 otherwise), and every other name stays what it was.
ROOT_USES = ("city", "alias", "country", "org", "work", "byname")


def stable_int(*parts: object) -> int:
    """A 64-bit integer from the parts, identical on every platform and Python version."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class AffinePermutation:
    """i -> (a*i + c) mod m with gcd(a, m) = 1: a bijection of range(m), chosen by the seed."""

    def __init__(self, m: int, seed: int, tag: str):
        self.m = m
        a = stable_int(seed, tag, "a") % m
        while math.gcd(a, m) != 1 or a < 2:
            a = (a + 1) % m
        self.a = a
        self.c = stable_int(seed, tag, "c") % m

    def __call__(self, i: int) -> int:
        if not 0 <= i < self.m:
            raise IndexError(f"index {i} outside the name space of size {self.m}")
        return (self.a * i + self.c) % self.m


class NameSpace:
    """All names of one generated KB. ``caps`` bounds how many indices each use may take."""

    def __init__(self, seed: int, caps: dict[str, int]):
        self.caps = {"byname": 0, **caps}
        caps = self.caps
        need_roots = sum(caps[u] for u in ROOT_USES)
        if need_roots > ROOT_SPACE or caps["person_group"] > PERSON_GROUP_SPACE:
            raise ConfigError(
                f"synthkb: too many entities for the name space (needs {need_roots:,} roots of "
                f"{ROOT_SPACE:,} and {caps['person_group']:,} person groups of "
                f"{PERSON_GROUP_SPACE:,}); lower datasets.<name>.entities"
            )
        self._offsets: dict[str, int] = {}
        offset = 0
        for use in ROOT_USES:
            self._offsets[use] = offset
            offset += caps[use]
        self._roots = AffinePermutation(ROOT_SPACE, seed, "roots")
        self._persons = AffinePermutation(PERSON_GROUP_SPACE, seed, "persons")
        self.seed = seed

    def root(self, use: str, index: int) -> str:
        if not 0 <= index < self.caps[use]:
            raise IndexError(f"{use} root index {index} outside 0..{self.caps[use] - 1}")
        r = self._roots(self._offsets[use] + index)
        first, second = divmod(r, len(SYLLABLES))
        return (SYLLABLES[first] + SYLLABLES[second]).capitalize()

    def person_group(self, group: int) -> tuple[str, str]:
        """(first name, surname stem) shared by the members of a person group."""
        if not 0 <= group < self.caps["person_group"]:
            raise IndexError(f"person group {group} outside 0..{self.caps['person_group'] - 1}")
        first, stem = divmod(self._persons(group), len(SYLLABLES))
        return FIRST_NAMES[first], SYLLABLES[stem].capitalize()

    def person(self, group: int, member: int) -> str:
        first, stem = self.person_group(group)
        suffixes = _rotated(SURNAME_SUFFIXES, stable_int(self.seed, "surname", group))
        return f"{first} {stem}{suffixes[member % len(suffixes)]}"

    def city(self, group: int, member: int) -> str:
        root = self.root("city", group)
        if member == 0:
            return root
        forms = _rotated(CITY_FORMS[1:], stable_int(self.seed, "cityform", group))
        return forms[(member - 1) % len(forms)].format(r=root)

    def city_alias(self, city_index: int) -> str:
        return self.root("alias", city_index)

    def byname(self, gid: int) -> str:
        """The second name of the city with global id ``gid`` (pipeline.synthkb.paraphrase)."""
        return self.root("byname", gid)

    def country(self, index: int) -> str:
        return self.root("country", index) + "ia"

    def org(self, group: int, member: int) -> tuple[str, str]:
        """(name, kind word) of an organisation."""
        kinds = _rotated(ORG_KINDS, stable_int(self.seed, "orgkind", group))
        kind = kinds[member % len(kinds)]
        return f"{self.root('org', group)} {kind}", kind

    def work(self, group: int, member: int) -> str:
        nouns = _rotated(WORK_NOUNS, stable_int(self.seed, "worknoun", group))
        return f"The {nouns[member % len(nouns)]} of {self.root('work', group)}"


def _rotated(items: list[str], k: int) -> list[str]:
    k %= len(items)
    return items[k:] + items[:k]
