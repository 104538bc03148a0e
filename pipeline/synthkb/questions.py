"""Questions of synthkb: generated from facts with paraphrase templates, with exact relevance sets.

A *forward* question asks for the object of one fact ("Where was Varno Keltic born?"); its relevant
passages are the passages that state that fact. A *reverse* question asks for any subject of a
relation with a given object ("Who was born in Kelvar?"); every subject is an answer and every passage
stating one of those facts is relevant. The full relevant set (qrels_all) comes from the generator's
provenance; the annotated positive (qrels) is one passage of it, chosen by ``QuestionKnobs.positive``:

- ``named_article`` (default): the first stating passage of the article the question names (the
  subject's for a forward question, the object's for a reverse one), as an annotator who opens the
  page about the question's entity labels it (NQ's annotators worked on that page; DPR's TriviaQA
  rule takes the best-ranked answer passage). A question whose named article states no answer
  falls back to ``source`` and is counted.
- ``source``: the passage the question was generated from, drawn among every stating passage; 57 % of
  them sit in another entity's article, a labelling that teaches a retriever to leave the article the
  question names (docs/archive/training_experiments.md, "What the numbers show").

The difference between qrels_all and qrels is the set of true false negatives.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.synthkb.lexicon import GENRE_VERBS
from pipeline.synthkb.world import Block, Entity, Rand

FORWARD = {
    "born_in": [
        "Where was {S} born?",
        "What is the place of birth of {S}?",
        "Which town is {S} originally from?",
        "What was the hometown of {S}?",
        "{S} is a native of which place?",
        "In which town did {S} start life?",
    ],
    "birth_year": [
        "In what year was {S} born?",
        "When was {S} born?",
        "What is the birth year of {S}?",
        "In which year did the life of {S} begin?",
        "What year did {S} come into the world?",
    ],
    "died_in": [
        "Where did {S} die?",
        "What was the place of death of {S}?",
        "In which town did the life of {S} end?",
        "Where did {S} pass away?",
        "Which town did {S} die in?",
    ],
    "death_year": [
        "In what year did {S} die?",
        "When did {S} die?",
        "What is the year of death of {S}?",
        "When did {S} pass away?",
        "In which year did the life of {S} end?",
    ],
    "occupation": [
        "What was the occupation of {S}?",
        "What did {S} do for a living?",
        "What profession did {S} practise?",
        "What was {S} by trade?",
        "What was the job of {S}?",
        "How did {S} earn a living?",
    ],
    "member_of": [
        "Which organisation was {S} a member of?",
        "{S} belonged to which organisation?",
        "Which body counted {S} among its members?",
        "What group did {S} join?",
        "Of which society or company was {S} a member?",
    ],
    "headquartered_in": [
        "Where is {S} headquartered?",
        "In which town does {S} have its headquarters?",
        "Where is the head office of {S}?",
        "{S} is based in which city?",
        "Where are the main offices of {S}?",
    ],
    "founded_by": [
        "Who founded {S}?",
        "Who was the founder of {S}?",
        "{S} was established by whom?",
        "Which person set up {S}?",
        "Who started {S}?",
    ],
    "founded_year": [
        "When was {S} founded?",
        "In what year was {S} established?",
        "What is the founding year of {S}?",
        "When did {S} come into existence?",
        "In which year was {S} set up?",
    ],
    "industry": [
        "What industry is {S} active in?",
        "In which trade does {S} work?",
        "What line of business is {S} in?",
        "What sector does {S} operate in?",
        "What does {S} do?",
    ],
    "created_by": [
        "Who {made} {S}?",
        "Who is the creator of {S}?",
        "{S} was {made_pp} by whom?",
        "Which {occ} created {S}?",
        "Whose work is {S}?",
        "Who is the author of {S}?",
    ],
    "work_year": [
        "When was {S} first {released}?",
        "In what year did {S} first appear?",
        "What year is {S} from?",
        "When did {S} come out?",
        "In which year was {S} made public?",
    ],
    "genre": [
        "What kind of work is {S}?",
        "What genre does {S} belong to?",
        "What type of work is {S}?",
        "{S} is what sort of work?",
        "What form does {S} take?",
    ],
    "located_in": [
        "In which country is {S}?",
        "{S} lies in which country?",
        "Which country is {S} located in?",
        "What country does {S} belong to?",
        "{S} is a town of which country?",
    ],
    "city_year": [
        "When was {S} first recorded?",
        "In what year was {S} founded?",
        "What is the date of the earliest record of {S}?",
        "Since which year has {S} existed?",
        "When is {S} first mentioned?",
    ],
    "capital": [
        "What is the capital of {S}?",
        "Which city is the capital of {S}?",
        "Where is the seat of government of {S}?",
        "Which town serves as capital of {S}?",
        "What is the chief city of {S}?",
    ],
}
# Reverse questions name the object ({O}); every subject of the relation is an answer.
REVERSE = {
    "born_in": [
        "Who was born in {O}?",
        "Name a person born in {O}.",
        "Which notable person is a native of {O}?",
        "{O} is the birthplace of which person?",
        "Who comes from {O}?",
    ],
    "died_in": [
        "Who died in {O}?",
        "Name a person who died in {O}.",
        "Which notable person died in {O}?",
        "Whose life ended in {O}?",
    ],
    "headquartered_in": [
        "Which organisation is headquartered in {O}?",
        "Name an organisation based in {O}.",
        "What company or society has its head office in {O}?",
    ],
    "located_in": ["Name a town in {O}.", "Which town lies in {O}?", "What is one of the towns of {O}?"],
    "created_by": [
        "Name a work by {O}.",
        "What did {O} create?",
        "Which work was made by {O}?",
        "What is one of the works of {O}?",
    ],
    "founded_by": [
        "Which organisation did {O} found?",
        "What did {O} establish?",
        "{O} was the founder of which organisation?",
    ],
    "member_of": ["Who was a member of {O}?", "Name a member of {O}.", "Which person belonged to {O}?"],
    "capital": ["{O} is the capital of which country?", "Of which country is {O} the capital?"],
}


@dataclass(frozen=True)
class QuestionKnobs:
    extra_question: float = 0.8  # a fact gets a second question in other words
    reverse_rate: float = 1.0  # a (relation, object) pair gets a reverse question
    reverse_extra: float = 0.5  # ... and a second one
    positive: str = "named_article"  # or "source": which stating passage qrels annotates


@dataclass
class Question:
    qid: str
    text: str
    answers: list[str]
    subject: int  # gid of the entity the question is about (split unit)
    positive: str  # the annotated passage
    relevant: list[str]  # every passage stating an answer fact (positive included)
    reverse: bool = False
    fallback: bool = False  # positive=named_article, but the named article states no answer


def _ref(e: Entity) -> str:
    return f"the {e.name}" if e.type == "org" else e.name


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


POSITIVE_RULES = ("named_article", "source")


def passage_place(pid: str) -> tuple[int, int]:
    """(gid of the entity whose article holds the passage, its index there): pids are "<gid>-<n>"
    (articles.pack)."""
    gid, index = pid.split("-", 1)
    return int(gid), int(index)


def _article_passage(relevant: list[str], gid: int) -> str | None:
    """The first passage of entity ``gid``'s article among ``relevant``."""
    own = [p for p in relevant if passage_place(p)[0] == gid]
    return min(own, key=passage_place) if own else None


def make_questions(
    block: Block, passages_of: dict[int, list[str]], seed: int, knobs: QuestionKnobs
) -> list[Question]:
    """All questions of one block, in a deterministic order."""
    ents = block.entities
    counter: dict[int, int] = {}
    out: list[Question] = []

    if knobs.positive not in POSITIVE_RULES:
        raise ValueError(f"positive must be one of {POSITIVE_RULES}, got {knobs.positive!r}")

    def emit(
        subject: Entity,
        text: str,
        answers: list[str],
        source: str,
        relevant: list[str],
        reverse: bool = False,
    ) -> None:
        # The source passage is drawn either way, so both rules give the same questions and qrels_all.
        positive, fallback = source, False
        if knobs.positive == "named_article":
            named = _article_passage(relevant, subject.gid)
            positive, fallback = (named, False) if named else (source, True)
        k = counter.get(subject.gid, 0)
        counter[subject.gid] = k + 1
        out.append(
            Question(
                f"q{subject.gid}-{k}", _cap(text), answers, subject.gid, positive, relevant, reverse, fallback
            )
        )

    for fact in block.facts:
        rng = Rand(seed, "question", block.index, fact.fid)
        subj = ents[fact.subj]
        slots = {"S": _ref(subj)}
        if subj.type == "work":
            made, made_pp, released = GENRE_VERBS[subj.attrs["genre"]]
            author = ents[subj.attrs["created_by"]]
            slots.update(made=made, made_pp=made_pp, released=released, occ=author.attrs["occupation"])
        n = 2 if rng.chance(knobs.extra_question) else 1
        relevant = passages_of[fact.fid]
        for template in rng.sample(FORWARD[fact.rel], n):
            emit(subj, template.format(**slots), block.answers(fact), rng.pick(relevant), relevant)

    for (obj, rel), subjects in sorted(block.inverse.items()):
        rng = Rand(seed, "reverse", block.index, obj, rel)
        if not rng.chance(knobs.reverse_rate):
            continue
        n = 2 if rng.chance(knobs.reverse_extra) else 1
        target = ents[obj]
        for template in rng.sample(REVERSE[rel], n):
            source = rng.pick(subjects)
            ordered = [source] + [s for s in subjects if s != source]
            answers: list[str] = []
            relevant: list[str] = []
            for s in ordered:
                answers += [a for a in ents[s].answers() if a not in answers]
                relevant += [p for p in passages_of[block.fid[(s, rel)]] if p not in relevant]
            positive = rng.pick(passages_of[block.fid[(source, rel)]])
            emit(target, template.format(O=_ref(target)), answers, positive, relevant, True)
    return out
