"""Wording for synthkb articles: fact-stating sentence templates and the words that fill slots.

Fact templates are (format string, relations it states). The article writer records exactly those
relations as stated by the passage that receives the sentence, so provenance never depends on string
matching. Filler prose (which states no fact) is in pipeline.synthkb.filler.

Slots: {S} the subject as the sentence opens (may be a pronoun), {s} the subject mid-sentence (name or
short name, never a pronoun), {sp} mid-sentence and possibly a pronoun, {poss} possessive pronoun,
{N} full name; other slots are named by role.
"""

from __future__ import annotations

# ---- person -----------------------------------------------------------------------------------------
PERSON_LEAD = [
    (
        "{N} ({year}–{dyear}) was a {occ} born in {city}.",
        ("birth_year", "death_year", "occupation", "born_in"),
    ),
    ("{N} ({year}–{dyear}) was a {adj} {occ}.", ("birth_year", "death_year", "occupation")),
    ("{N} was a {occ} born in {city} in {year}.", ("occupation", "born_in", "birth_year")),
    ("{N} (born {year} in {city}) was a {occ}.", ("occupation", "birth_year", "born_in")),
    ("{N}, a native of {city}, was a {occ} born in {year}.", ("occupation", "born_in", "birth_year")),
    ("{N} was a {occ}, born in {year}.", ("occupation", "birth_year")),
    ("{N} (born {year}) was a {adj} {occ}.", ("occupation", "birth_year")),
    ("{N}, a native of {city}, was a {occ}.", ("occupation", "born_in")),
    ("{N} was a {occ} born in {city}.", ("occupation", "born_in")),
    ("{N} was a {adj} {occ}.", ("occupation",)),
    ("{N} was a {occ} whose career spanned several decades.", ("occupation",)),
]
PERSON_BIRTH = [
    ("{S} was born in {city} in {year}.", ("born_in", "birth_year")),
    ("{S} was born in {year} in {city}, where {poss} family kept a {noun}.", ("birth_year", "born_in")),
    ("Born in {city} in {year}, {s} was the {ordinal} child of a {parent}.", ("born_in", "birth_year")),
    ("{S} came into the world in {city} in the year {year}.", ("born_in", "birth_year")),
    ("{city} was the birthplace of {s}, who was born there in {year}.", ("born_in", "birth_year")),
    ("{S} was a native of {city}, born in {year} to a {parent}.", ("born_in", "birth_year")),
]
PERSON_BIRTHPLACE = [
    ("{S} was born in {city}.", ("born_in",)),
    ("{S} was a native of {city}.", ("born_in",)),
    ("{city} was the birthplace of {s}.", ("born_in",)),
]
PERSON_BIRTHYEAR = [
    ("{S} was born in {year}.", ("birth_year",)),
    ("The year of {s}'s birth was {year}.", ("birth_year",)),
]
PERSON_OCCUPATION = [
    ("{S} worked as a {occ} for most of {poss} life.", ("occupation",)),
    ("By profession {s} was a {occ}.", ("occupation",)),
    ("{S} earned {poss} living as a {occ}.", ("occupation",)),
    ("{S} trained as a {occ} and practised for many years.", ("occupation",)),
]
PERSON_MEMBER = [
    ("{S} was a member of the {org}.", ("member_of",)),
    ("{S} joined the {org} in {year2}.", ("member_of",)),
    ("{S} belonged to the {org} for many years.", ("member_of",)),
    ("In {year2} {s} was admitted as a member of the {org}.", ("member_of",)),
]
# The person is the *object* of founded_by: always named in full ({N}).
PERSON_FOUNDED = [
    ("In {fyear} {N} founded the {org}.", ("founded_by", "founded_year")),
    ("{N} established the {org} in {fyear}.", ("founded_by", "founded_year")),
    ("{N} was the founder of the {org}.", ("founded_by",)),
    ("{N} founded the {org}, a {industry} concern, in {fyear}.", ("founded_by", "industry", "founded_year")),
]
# The person is the *object* of created_by: always named in full ({N}).
PERSON_WORK = [
    ("{N} {made} {work} ({wyear}).", ("created_by", "work_year")),
    ("{N}'s {genre} {work} was first {released} in {wyear}.", ("created_by", "genre", "work_year")),
    ("Among the works of {N} is the {genre} {work}.", ("created_by", "genre")),
    ("{work}, a {genre}, was {made_pp} by {N} in {wyear}.", ("genre", "created_by", "work_year")),
    ("{N} {made} the {genre} {work}.", ("created_by", "genre")),
]
GENRE_VERBS = {  # genre -> (made, made_pp, released)
    "novel": ("wrote", "written", "published"),
    "novella": ("wrote", "written", "published"),
    "poem cycle": ("wrote", "written", "published"),
    "verse epic": ("wrote", "written", "published"),
    "play": ("wrote", "written", "performed"),
    "tragedy": ("wrote", "written", "performed"),
    "comedy": ("wrote", "written", "performed"),
    "opera": ("composed", "composed", "performed"),
    "symphony": ("composed", "composed", "performed"),
    "string quartet": ("composed", "composed", "performed"),
    "painting": ("painted", "painted", "exhibited"),
    "triptych": ("painted", "painted", "exhibited"),
    "chronicle": ("wrote", "written", "published"),
    "history": ("wrote", "written", "published"),
    "treatise": ("wrote", "written", "published"),
    "dialogue": ("wrote", "written", "published"),
}
PERSON_DEATH = [
    ("{S} died in {city} in {year}.", ("died_in", "death_year")),
    ("{S} died in {year} in {city}, after a short illness.", ("death_year", "died_in")),
    ("{S} spent {poss} last years in {city}, where {pro} died in {year}.", ("died_in", "death_year")),
    ("Death came to {s} in {city} in {year}.", ("died_in", "death_year")),
    ("{S} passed away in {city} in the year {year}.", ("died_in", "death_year")),
]
PERSON_DEATHPLACE = [
    ("{S} died in {city}.", ("died_in",)),
    ("{city} was the place where {s} died.", ("died_in",)),
]
PERSON_DEATHYEAR = [
    ("{S} died in {year}.", ("death_year",)),
    ("The death of {s} in {year} was widely mourned.", ("death_year",)),
]
# Descriptions, and events that follow a time phrase: "In 1843 she travelled to Kelvar."
# ---- city -------------------------------------------------------------------------------------------
CITY_LEAD = [
    ("{N} is a {kind} in {country}.", ("located_in",)),
    ("{N} is a {kind} located in {country}.", ("located_in",)),
    ("{N} is a {adj} {kind} situated in {country}.", ("located_in",)),
    ("The {kind} of {N} lies in {country}.", ("located_in",)),
]
CITY_CAPITAL = [
    ("{N} is the capital of {country}.", ("capital", "located_in")),
    ("{N} serves as the capital of {country}.", ("capital", "located_in")),
    ("{N}, a {kind} in {country}, is the capital of that country.", ("located_in", "capital")),
]
CITY_YEAR = [
    ("{S} was first recorded in {year}.", ("city_year",)),
    ("The earliest record of {s} dates from {year}.", ("city_year",)),
    ("{S} was founded in {year}.", ("city_year",)),
    ("A charter of {year} is the first mention of {s}.", ("city_year",)),
]
CITY_ALIAS = [
    "{S} is known locally as {alias}.",
    "Older maps call {s} {alias}.",
    "Its inhabitants often call the {kind} {alias}.",
]
# The city is the *object* of born_in / headquartered_in: always named ({N}).
CITY_NATIVES = [
    "Notable people born in {N} include {list}.",
    "{list} {were} born in {N}.",
    "{N} is the birthplace of {list}.",
    "Natives of {N} include {list}.",
]
CITY_DEAD = [
    "People who died in {N} include {list}.",
    "{list} died in {N}.",
    "{N} is where {list} died.",
]
CITY_ORGS = [
    "{N} is home to {list}.",
    "{list} {has} {its} headquarters in {N}.",
    "Organisations based in {N} include {list}.",
    "{list} {is} headquartered in {N}.",
]
# ---- country ----------------------------------------------------------------------------------------
COUNTRY_LEAD = [
    ("{N} is a country whose capital is {capital}.", ("capital",)),
    ("The capital of {N} is {capital}.", ("capital",)),
    ("{N} is a {adj} country; its capital is {capital}.", ("capital",)),
]
COUNTRY_CITIES = [
    "Towns in {N} include {list}.",
    "{list} {lie} in {N}.",
    "Among the towns of {N} {are} {list}.",
]
# ---- organisation -----------------------------------------------------------------------------------
# {N} of an organisation already carries its article ("the Vesk Company").
ORG_LEAD = [
    ("{N} is a {industry} {kind} based in {city}.", ("industry", "headquartered_in")),
    ("{N} is a {kind} active in {industry}.", ("industry",)),
    (
        "{N}, founded in {fyear} by {founder}, is a {industry} {kind}.",
        ("founded_year", "founded_by", "industry"),
    ),
    ("{N} is a {kind} in the {industry} trade, headquartered in {city}.", ("industry", "headquartered_in")),
]
ORG_FOUNDING = [
    ("{N} was founded by {founder} in {fyear}.", ("founded_by", "founded_year")),
    ("{founder} founded {N} in {fyear}.", ("founded_by", "founded_year")),
    ("{S} was established in {fyear} by {founder}.", ("founded_year", "founded_by")),
    ("{founder} set up {N} in {fyear}.", ("founded_by", "founded_year")),
]
ORG_HQ = [
    ("{S} has its headquarters in {city}.", ("headquartered_in",)),
    ("{S} is headquartered in {city}.", ("headquartered_in",)),
    ("The head office of {N} is in {city}.", ("headquartered_in",)),
]
ORG_INDUSTRY = [
    ("{S} made its name in {industry}.", ("industry",)),
    ("Most of the work of {N} is in {industry}.", ("industry",)),
]
# The organisation is the *object* of member_of: always named ({N}).
ORG_MEMBERS = [
    "Members of the {N} have included {list}.",
    "{list} belonged to the {N}.",
    "Among the members of the {N} {were} {list}.",
]
# ---- work -------------------------------------------------------------------------------------------
WORK_LEAD = [
    ("{N} is a {genre} by {author}.", ("genre", "created_by")),
    ("{N} is a {genre} by {author}, first {released} in {year}.", ("genre", "created_by", "work_year")),
    ("{N} is a {genre} {made_pp} by {author} in {year}.", ("genre", "created_by", "work_year")),
    ("{N} is a {adj} {genre} by {author}.", ("genre", "created_by")),
]
# Mentions the author's birthplace and occupation too: a third article stating those facts.
WORK_LEAD_BIO = [
    ("{N} is a {genre} by the {city}-born {occ} {author}.", ("genre", "created_by", "born_in", "occupation")),
    (
        "{N} is a {genre} by {author}, a {occ} born in {city}.",
        ("genre", "created_by", "occupation", "born_in"),
    ),
]
WORK_BACKGROUND = [
    ("{author} {made} {s} over several years.", ("created_by",)),
    ("{S} was {made_pp} by {author} during a stay in {place}.", ("created_by",)),
    ("{S} was first {released} in {year}.", ("work_year",)),
    ("{S} first appeared in {year}.", ("work_year",)),
]
# ---- slot words -------------------------------------------------------------------------------------
ADJECTIVES = [
    "quiet",
    "restless",
    "remarkable",
    "prolific",
    "austere",
    "celebrated",
    "gifted",
    "solitary",
    "ambitious",
    "meticulous",
    "eccentric",
    "influential",
    "modest",
    "pale",
    "bright",
    "sombre",
    "windswept",
    "grey",
    "green",
    "ancient",
]
NOUNS = [
    "garden",
    "library",
    "workshop",
    "boat",
    "bakery",
    "printing press",
    "orchard",
    "forge",
    "lodging house",
    "apothecary",
    "mill",
    "vineyard",
    "bookshop",
    "stable",
]
TRAITS = [
    "patience",
    "wit",
    "stubbornness",
    "generosity",
    "curiosity",
    "restraint",
    "humour",
    "modesty",
    "energy",
    "temper",
    "discipline",
    "warmth",
]
PARENTS = [
    "miller",
    "schoolteacher",
    "ferryman",
    "clerk",
    "weaver",
    "fisherman",
    "carpenter",
    "innkeeper",
    "shopkeeper",
    "farmer",
    "sailor",
    "midwife",
]
ORDINALS = ["first", "second", "third", "fourth", "youngest", "eldest", "only"]
HOBBIES = [
    "astronomy",
    "beekeeping",
    "chess",
    "sailing",
    "old maps",
    "rare birds",
    "gardening",
    "folk songs",
    "clocks",
    "mountain walking",
]
BUILDINGS = [
    "cathedral",
    "clock tower",
    "lighthouse",
    "grain exchange",
    "theatre",
    "town hall",
    "customs house",
    "monastery",
]
TRADES = ["fishing", "wool", "salt", "timber", "the river trade", "cattle", "silver", "flax"]
EMBLEMS = [
    "golden key",
    "ship under sail",
    "pair of scales",
    "lamp and book",
    "red tower",
    "silver anchor",
    "bee hive",
    "crossed oars",
]
QUALITIES = ["structure", "language", "humour", "ambition", "restraint", "imagery", "pacing", "melancholy"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
RELATIVES = [
    "daughter",
    "son",
    "younger brother",
    "elder sister",
    "nephew",
    "cousin",
    "niece",
    "eldest son",
    "only daughter",
]
SKILLS = ["swim", "ride a horse", "dance", "play cards", "cook", "speak a second language"]
DISLIKES = ["large dinners", "long sea voyages", "public speaking", "the cold", "newspapers"]
TOPICS = [
    "botany",
    "mathematics",
    "old coins",
    "navigation",
    "music theory",
    "geology",
    "medicine",
    "astronomy",
    "law",
    "languages",
    "architecture",
    "agriculture",
]
FOODS = ["smoked fish", "rye bread", "plum brandy", "sheep cheese", "honey cakes", "mussels"]
MATERIALS = ["red brick", "grey granite", "timber", "yellow sandstone", "limestone"]
NUMBERS = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "twelve"]
