"""The offline extractor: patterns, no LLM, no network. Precision first: it writes a memory only where the
text says something in a recognisable form, and leaves the rest to episodic memory and search.

- semantic: facts of the form subject + attribute + value ("I live in Paris", "Ann moved to Berlin", "my
  favourite band is Muse"), the subject being the speaker (first person) or a known name (a speaker, the
  user); single-valued attributes (lives_in, works_at, age, ...) carry ``attribute``/``value`` so a newer
  value supersedes an older one (``workers.memory.dynamics``);
- semantic, multi-valued: what a speaker says they do, did or are into, in a handful of verb frames ("I'm
  working on a new routine", "I just launched an ad campaign for my store", "I'm passionate about dancing",
  "I lost my job as a banker", "I used to compete in dance shows"), in the third person ("Jon is working on a
  new routine", "Gina launched an ad campaign for their store");
- procedural: numbered step lists and "first ..., then ..., finally ..." sequences of instructions;
- resource: URLs, file names and, for screenshots, the window seen (title, app, its text);
- core (``human`` block): the facts whose subject is the user, as ``attribute: value`` lines (DigitalLife's
  user profile, rewritten by ``workers.memory.dynamics.merge_block``).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from engram.schemas.extraction import CoreDraft, Extraction, ProceduralDraft, ResourceDraft, SemanticDraft
from engram.workers.extract.base import Extractor, Seen
from engram.workers.extract.statements import statements, turn_fact, turn_worth_parsing
from engram.workers.text.sentences import sentences
from engram.workers.text.values import said_in

_NAME = r"[A-Z][a-z]+(?: [A-Z][a-z]+)?"
_PLACE = r"(?P<value>[A-Z][\w'.&-]*(?:(?:,? |-)[A-Z][\w'.&-]*){0,3})"
_PHRASE = r"(?P<value>[\w'&-]+(?: [\w'&-]+){0,4}?)(?=[,.;:!?)]|\s+(?:and|but|because|since|so|with|now|too)\b|$)"
#: A longer phrase (up to 16 words) for what a speaker does: ends at punctuation or a conjunction, like _PHRASE
_CLAUSE = (
    r"(?P<value>[\w'&-]+(?: [\w'&-]+){0,15}?)(?=[,.;:!?)]|\s+(?:and|but|because|since|so|with|now|too|"
    r"which|who|'cause)\b|$)"
)
_SUBJ = r"(?:(?<=^)|(?<=[\s,;(]))(?P<subj>I|" + _NAME + r")"
_POSS = r"(?:(?<=^)|(?<=[\s,;(]))(?P<subj>[Mm]y|" + _NAME + r"'s)"

#: (attribute, single-valued, summary template, pattern)
FACT_PATTERNS: list[tuple[str, bool, str, re.Pattern]] = [
    (a, single, tpl, re.compile(p))
    for a, single, tpl, p in [
        (
            "lives_in",
            True,
            "{s} lives in {v}",
            _SUBJ + r"(?: now| currently)?(?: live| lives| am living|'m living"
            r"| is living) in " + _PLACE,
        ),
        (
            "lives_in",
            True,
            "{s} lives in {v}",
            _SUBJ + r"(?:'ve|'s)? (?:just |recently |finally )?(?:have |has |had )?"
            r"(?:moved|relocated) to " + _PLACE,
        ),
        (
            "works_at",
            True,
            "{s} works at {v}",
            _SUBJ + r"(?: now| currently)?(?: work| works| am working|'m working|"
            r" is working| started working| got a job) (?:at|for) " + _PLACE,
        ),
        (
            "occupation",
            True,
            "{s} works as {v}",
            _SUBJ + r"(?: now| currently)?(?: work| works| am working|'m working|"
            r" is working) as (?:a|an) " + _PHRASE,
        ),
        (
            "age",
            True,
            "{s} is {v} years old",
            _SUBJ + r"(?: am|'m| is| just turned| turned) (?P<value>\d{1,3}) years old",
        ),
        ("origin", True, "{s} is from {v}", _SUBJ + r"(?: am|'m| is| come| comes) (?:originally )?from " + _PLACE),
        ("origin", True, "{s} is from {v}", _POSS + r" (?:home country|home town|hometown)(?:,| is) " + _PLACE),
        ("grew_up_in", True, "{s} grew up in {v}", _SUBJ + r" grew up in " + _PLACE),
        ("spouse", True, "{s} is married to {v}", _SUBJ + r"(?: am|'m| is| got) married to (?P<value>" + _NAME + r")"),
        (
            "birthday",
            True,
            "{s}'s birthday is {v}",
            _POSS + r" birthday is (?:on )?(?P<value>(?:\d{1,2}(?:st|nd|rd|th)? "
            r"[A-Z][a-z]+|[A-Z][a-z]+ \d{1,2}(?:st|nd|rd|th)?))",
        ),
        (
            "favourite",
            True,
            "{s}'s favourite {w} is {v}",
            _POSS + r" (?:all-time )?favou?rite (?P<what>[a-z]+(?: [a-z]+)?)"
            r" is " + _PHRASE,
        ),
        (
            "studies",
            True,
            "{s} studies {v}",
            _SUBJ + r"(?: study| studies| am studying|'m studying| is studying| major in|"
            r" majored in) " + _PHRASE,
        ),
        (
            "pet",
            False,
            "{s} has a {v}",
            _SUBJ + r" (?:have|has|got|adopted) (?:a|an) (?P<value>(?:\w+ )?(?:dog|cat|puppy|"
            r"kitten|parrot|rabbit|hamster|horse|turtle|fish)(?: named [A-Z][a-z]+)?)",
        ),
        (
            "likes",
            False,
            "{s} likes {v}",
            # not "the things I love makes ...", nor "I love their work" (said of what is seen; "the color": _facts)
            r"(?<!things )(?<!thing )(?<!what )" + _SUBJ + r" (?:really |absolutely |just )?(?:love|loves|enjoy|"
            r"enjoys) (?:to )?(?!(?:their|his|her|its|our|your|all the) )" + _PHRASE,
        ),
        # what a speaker does, did or is into (multi-valued; ``what``: the verb as the summary says it)
        (
            "interest",
            False,
            "{s} is {w} {v}",
            _SUBJ + r"(?:'m| am| is) (?:really |very |so |super |also )?"
            r"(?P<what>passionate about|keen on|into|a (?:big |huge )?fan of) " + _CLAUSE,
        ),
        # who someone is, in their own words ("my own journey as a transgender woman"), and what they aim at
        (
            "identity",
            True,
            "{s} is {v}",
            _POSS + r" (?:own )?(?:journey|path|life|story|experience) as (?P<value>an? "
            r"(?:[a-z]+ ){0,2}(?:woman|man|person|mom|mother|dad|father|parent|student|"
            r"teacher|artist|immigrant|veteran))\b",
        ),
        (
            "goal",
            True,
            "{s}'s goal is to {v}",
            _POSS + r" (?:biggest |main |ultimate |big )?(?:goal|dream) is (?:to )?"
            r"(?P<value>[\w'-]+(?: [\w'&-]+){1,15}?)(?=[,.;:!?)]|$)",
        ),
        (
            "doing",
            False,
            "{s} is {w} {v}",
            _SUBJ + r"(?:'m| am| is|'ve been| have been| has been) (?:currently |still "
            r"|now |also |just |really )?(?P<what>working on|preparing for|getting ready "
            r"for|training for|planning to|planning on|looking for|searching for|on the "
            r"hunt for|starting|opening|learning|taking|volunteering (?:at|with|for)|"
            r"writing|building|organizing|organising|thinking about|thinking of|"
            r"considering|hoping to|trying to) " + _CLAUSE,
        ),
        (
            "did",
            False,
            "{s} {w} {v}",
            _SUBJ + r"(?:'ve| have| has)? (?:just |recently |finally |also |already )?"
            r"(?P<what>launched|started|opened|finished|joined|signed up for|bought|adopted|"
            r"lost|won|visited|attended|took up|quit|graduated from|volunteered (?:at|with|for)|"
            r"used to|went to|ran|painted|wrote|published|created) " + _CLAUSE,
        ),
    ]
]
#: Attributes whose value is a clause in the speaker's own words: its first person is made third ("my store" ->
#: "their store") before it is stored.
_CLAUSE_ATTRIBUTES = {"interest", "doing", "did", "identity", "goal"}
#: What someone does or did, not who they are: semantic facts, but no line of the user's core profile block.
_EVENTS = {"doing", "did"}
#: For each of ``FACT_PATTERNS`` (same order), literals a sentence must contain for the pattern to match
#: there: every group must have one of its literals in the sentence (each pattern's text requires them, e.g.
#: ``lives_in`` needs " live..." or "living in "). Sentences without them skip that pattern's regex, whose
#: look-behind subject makes a scan slow; the drafts are the same (``tests/workers/test_rules_gates.py``).
FACT_GATES: list[tuple[tuple[str, ...], ...]] = [
    ((" live", "living in "),),
    (("moved to ", "relocated to "),),
    (("work", "got a job"), (" at ", " for ")),
    (("work",), (" as a",)),
    ((" years old",),),
    (("from ",),),
    ((" home country", " home town", " hometown"),),
    ((" grew up in ",),),
    ((" married to ",),),
    ((" birthday is ",),),
    (("favourite ", "favorite "), (" is ",)),
    ((" stud", " major"),),
    (("dog", "cat", "puppy", "kitten", "parrot", "rabbit", "hamster", "horse", "turtle", "fish"), (" a ", " an ")),
    (("love", "enjoy"),),
    (("passionate about ", " keen on ", " into ", " fan of "),),
    ((" as a",),),
    ((" goal is ", " dream is "),),
    (
        (
            " working on ",
            " preparing for ",
            " getting ready for ",
            " training for ",
            " planning ",
            " looking for ",
            " searching for ",
            " on the hunt for ",
            " starting ",
            " opening ",
            " learning ",
            " taking ",
            " volunteering ",
            " writing ",
            " building ",
            " organizing ",
            " organising ",
            " thinking ",
            " considering ",
            " hoping to ",
            " trying to ",
        ),
    ),
    (
        (
            " launched ",
            " started ",
            " opened ",
            " finished ",
            " joined ",
            " signed up for ",
            " bought ",
            " adopted ",
            " lost ",
            " won ",
            " visited ",
            " attended ",
            " took up ",
            " quit ",
            " graduated from ",
            " volunteered ",
            " used to ",
            " went to ",
            " ran ",
            " painted ",
            " wrote ",
            " published ",
            " created ",
        ),
    ),
]


#: Occupations "I'm a/an ..." and "as a ..." name: a closed list, so "I'm a huge fan", "I'm a bit tired" name none
_JOBS = (
    r"(?:teacher|nurse|doctor|physician|surgeon|dentist|vet|veterinarian|engineer|manager|developer|programmer|"
    r"designer|writer|author|novelist|screenwriter|journalist|editor|artist|painter|illustrator|musician|singer|"
    r"dancer|actor|actress|chef|baker|cook|lawyer|attorney|accountant|banker|consultant|analyst|scientist|"
    r"researcher|professor|lecturer|firefighter|police officer|officer|soldier|veteran|counselor|counsellor|"
    r"therapist|psychologist|social worker|photographer|mechanic|carpenter|electrician|plumber|pilot|driver|"
    r"farmer|entrepreneur|business owner|shop owner|student|coach|trainer|instructor|librarian|pharmacist|"
    r"paramedic|architect|programmer|streamer|gamer|athlete|player|volunteer|caregiver|stay-at-home mom|"
    r"stay-at-home dad|homemaker|retiree)"
)
_FAMILY = (
    r"(?:wife|husband|partner|boyfriend|girlfriend|fianc[ée]e?|sons?|daughters?|kids|children|sisters?|brothers?|"
    r"twins|grandsons?|granddaughters?|grandkids|grandchildren|stepson|stepdaughter)"
)
_PETS = (
    r"(?:dogs?|cats?|pupp(?:y|ies)|kittens?|parrots?|rabbits?|bunn(?:y|ies)|hamsters?|horses?|turtles?|fish|"
    r"snakes?|lizards?|guinea pigs?|birds?|ferrets?|chickens?)"
)
#: a name after a family member or pet ("my daughter Sara", "my dog, Max", "my cat named Luna")
_CALLED = (
    r"(?:,? (?:named |called )?(?!(?:"
    + "|".join(["The", "Then", "So", "And", "But", "We", "They", "He", "She", "It", "This", "That", "I", "Oh", "Wow"])
    + r")\b)[A-Z][a-z]+)?"
)
#: a job left behind ("Lost my job as a banker", "quitting my job at the bank")
_LEFT = r"(?:[Ll]ost|[Qq]uit|[Ll]eft|[Ll]osing|[Ll]eaving|[Qq]uitting)"
_COUNT = r"(?:two|three|four|five|six|2|3|4|5|6)"
#: Lines of the user's profile (the core ``human`` block) read from the user's own first-person sentences only, with
#: no semantic draft: each says who the user is in a form too bare to be a fact worth searching on its own ("my
#: daughter Sara", "my dog Max", "I'm allergic to cats"), and LoCoMo's annotations say them inside longer facts.
#: (label, literals one of which the sentence must hold, pattern with a ``value`` group). Chosen on the first speakers
#: of LoCoMo conversations 0-4 (``bench/typed.py --facts-only --profiles 0 1 2 3 4``; docs/quality.md).
PROFILE_PATTERNS: list[tuple[str, tuple[str, ...], re.Pattern]] = [
    (label, gate, re.compile(p))
    for label, gate, p in [
        (
            "family",
            ("my ", "My "),
            r"\b[Mm]y (?:(?:little|baby|younger|older|big|eldest|oldest|youngest|twin|teenage|lovely|"
            r"(?:\d+|one|two|three|four|five|six)[- ]years?[- ]old) )?(?P<value>" + _FAMILY + _CALLED + r")\b",
        ),
        ("family", ("the missus",), r"\b(?P<value>the missus)\b"),
        (
            "pets",
            ("my ", "My "),
            r"\b[Mm]y (?:(?:little|new|old|sweet|rescue|furry|" + _COUNT + r") )?(?P<value>" + _PETS + _CALLED + r")"
            r"\b",
        ),
        (  # "Oscar, my guinea pig." (a name then the pet, the sentence ending there: not "Mel, my dog is ...")
            "pets",
            (", my ",),
            r"\b(?P<name>[A-Z][a-z]+), my (?:(?:little|new|old|sweet|rescue|furry) )?(?P<value>" + _PETS + r")"
            r"(?=[.!?]|$)",
        ),
        (
            "pets",
            (" have ", " got ", " adopted "),
            r"\bI (?:have|'ve got|got|adopted) (?P<value>" + _COUNT + " " + _PETS + r")\b",
        ),
        (
            "occupation",
            ("I'm ", "I am "),
            r"\bI(?:'m| am)(?: now| currently| also)? an? (?P<value>(?:[a-z-]+ )?" + _JOBS + r")\b(?! (?:of|at heart))",
        ),
        ("occupation", ("As a", "As an"), r"^As an? (?P<value>(?:[a-z-]+ )?" + _JOBS + r"), (?:I|my)\b"),
        (
            "former job",
            ("job as", "career as", "9-5 as"),
            r"\b" + _LEFT + r" my (?:\w+ )?(?:job|career|9-5) as an? (?P<value>[\w-]+"
            r"(?: [\w-]+){0,2}?)(?=[,.;:!?)]|\s+(?:and|but|because|since|so|yesterday|last|today)\b|$)",
        ),
        (
            "former job",
            ("job at",),
            r"\b" + _LEFT + r" my (?:\w+ )?job at (?P<value>(?:the |a )?[\w&'-]+"
            r"(?: [\w&'-]+){0,3}?)(?=[,.;:!?)]|\s+(?:and|but|because|since|so|yesterday|last|today)\b|$)",
        ),
        (  # "my gym" is where one trains, "my own gym" a business
            "works on",
            ("my ", "My "),
            r"\b[Mm]y (?:own |dream |new |first |latest )*(?P<value>(?:dance |clothing |coffee |online |small |"
            r"photography |art |yoga )?(?:business|studio|shop|store|startup|restaurant|bakery|salon|band|blog|"
            r"(?<=own )gym|podcast|channel|screenplay|script|novel|memoir|album|clothing line|nonprofit|charity))\b"
            r"(?! (?:collection|shelf|club|posts?|account))",
        ),
        (
            "student",
            ("my ", "My "),
            r"\b[Mm]y (?P<value>[A-Z][a-z]+(?: lit| literature)? class|(?:final |midterm )?exams?|studies|semester"
            r"|homework|assignments|thesis|dissertation|major|professors?)\b",
        ),
        (  # "I used to have a dog back in Michigan": where they lived (not "back in March", "back in the day")
            "lived in",
            ("back in ", "back home in "),
            r"\bback (?:home )?in (?!(?:January|February|March|April|May|June|July|August|September|October|"
            r"November|December|High|College|School|The)\b)(?P<value>[A-Z][a-z]+(?: [A-Z][a-z]+)?)\b",
        ),
        (
            "allergic to",
            ("allergic to",),
            r"\bI(?:'m| am)(?: also| really| very| super)? allergic to (?P<value>[\w'-]+(?: [\w'-]+){0,5}?)"
            r"(?=[,.;:!?)]|\s+(?:and so|but|because|since|so|too|as well)\b|$)",
        ),
    ]
]
#: Family words said for one member ("the missus" is a wife)
_PROFILE_VALUES = {"missus": "wife", "children": "kids"}


def _passes(sentence: str, gate: tuple[tuple[str, ...], ...]) -> bool:
    """Whether ``sentence`` holds a literal of every group of ``gate`` (see ``FACT_GATES``)."""
    for group in gate:  # loops, not all(any(...)): this runs ~13 times per sentence of every observation
        for lit in group:
            if lit in sentence:
                break
        else:
            return False
    return True


_NOT_VALUES = {
    "it",
    "that",
    "this",
    "you",
    "them",
    "him",
    "her",
    "those",
    "these",
    "me",
    "us",
    "the",
    "a",
    "an",
    "what",
    "how",
    "when",
    "being",
    "having",
    "doing",
    "seeing",
    "hearing",
    "your",
    "my",
}
#: First words that make a clause no fact ("I'm into it", "I started again", "I went to bed")
_NOT_CLAUSES = {
    "it",
    "that",
    "this",
    "you",
    "them",
    "him",
    "her",
    "those",
    "these",
    "me",
    "us",
    "what",
    "how",
    "when",
    "again",
    "out",
    "up",
    "back",
    "over",
    "there",
    "here",
    "bed",
    "sleep",
    "something",
    "some",
    "anything",
    "everything",
    "things",
    "stuff",
    "one",
    "so",
    "too",
    "really",
    "very",
    "just",
}
_NOT_NAMES = {
    "The",
    "Then",
    "So",
    "And",
    "But",
    "We",
    "They",
    "He",
    "She",
    "It",
    "This",
    "That",
    "Yes",
    "No",
    "Oh",
    "Wow",
    "Well",
    "Also",
    "Now",
    "Today",
    "Yesterday",
    "Thanks",
    "Hey",
    "Hi",
    "Sure",
    "Maybe",
}

_NUMBERED = re.compile(r"^\s*(?:step\s*)?(\d{1,2})[.):]\s+(\S.*)$", re.IGNORECASE | re.MULTILINE)
_SEQUENCE = re.compile(r"\b(?:first(?:ly)?|then|next|after that|afterwards|finally|lastly)\b,?\s*", re.IGNORECASE)
_NOT_IMPERATIVE = {"i", "we", "he", "she", "they", "it", "my", "our", "his", "her", "their", "me", "us"}
#: Verbs a step of a how-to starts with. A numbered list is a procedure when most of its steps start with one
#: (a list of recommendations or facts is not).
IMPERATIVE = set(
    """add adjust apply ask attach bake beat blend boil book bring buy call change check choose chop clean
click close combine configure connect copy cover create cut decide define deploy download drag drain drain drink
edit enable enter fill find fold follow gather get go grab heat hold install keep knead launch leave let log look
make measure melt mix move navigate note open order pack paste pay pick place plan plug pour prepare preheat press
print pull push put read register reinstall remove repeat replace reset restart return review rinse roll run save
scroll search season select send serve set share sign simmer slice soak sort spread start stir stop store submit
switch take tap test tighten toggle transfer try turn type unplug update upload use verify visit wait wash watch
whisk wipe write""".split()
)


def _imperative(step: str) -> bool:
    words = re.sub(r"[*_`#>\[\]]", " ", step).split()
    return bool(words) and words[0].lower().strip(":,.") in IMPERATIVE


_URL = re.compile(r"\b(?:https?://|www\.)[^\s<>\"'()\[\]{}]+")
_FILE = re.compile(
    r"(?<![\w/.@-])([\w][\w.-]{0,80}\.(pdf|docx?|xlsx?|pptx?|csv|zip|png|jpe?g|mp4|mov|odt|ods|txt"
    r"|py|ipynb|js|ts|json|ya?ml|md|sql|sh))\b"
)
_FILE_TYPES = {
    "pdf": "document",
    "doc": "document",
    "docx": "document",
    "odt": "document",
    "txt": "document",
    "md": "document",
    "xls": "spreadsheet",
    "xlsx": "spreadsheet",
    "ods": "spreadsheet",
    "csv": "spreadsheet",
    "ppt": "presentation",
    "pptx": "presentation",
    "png": "image",
    "jpg": "image",
    "jpeg": "image",
    "mp4": "video",
    "mov": "video",
    "zip": "archive",
}
#: The ``.<extension>`` every ``_FILE`` match ends with: a text without one has no file name (a fast scan
#: before the slow one).
_FILE_EXT = re.compile(
    r"\.(?:pdf|docx?|xlsx?|pptx?|csv|zip|png|jpe?g|mp4|mov|odt|ods|txt|py|ipynb|js|ts|json|ya?ml"
    r"|md|sql|sh)\b"
)
_BROWSERS = ("chrome", "firefox", "safari", "edge", "brave", "opera", "arc", "chromium", "vivaldi")


_WORDS = re.compile(r"[\w']+")
#: words that point at something in the conversation; a profile value ending in one names nothing on its own
_DEICTIC = {"this", "that", "these", "those"}
#: Words inside a like that point at what only the chat shows ("making this cake", "making him happy"). Not "that":
#: "songs that rhyme" reads alone, and a tag-free pattern cannot tell it from "that world"
_POINTING = frozenset({"this", "these", "those", "him", "them"})


def _unreadable_line(line: str, inside: bool) -> bool:
    """Whether a profile line, read alone, points at what only the conversation shows: it ends in a deictic word
    ("a big fan of scents like this"), or, with ``inside`` (a like: a thing, not a plan such as a goal's "for these
    kids"), holds one of ``_POINTING`` before its last word."""
    words = line.lower().split()
    return bool(words) and (words[-1] in _DEICTIC or (inside and not _POINTING.isdisjoint(words[:-1])))


#: Speakers whose "I" is a program's, not a person's: no statements read from their turns
_NOT_PEOPLE = {"assistant", "system", "bot", "ai"}


def _clean_value(value: str) -> str:
    return value.strip(" ,.;:!?'\"").removeprefix("the ").strip()


_FIRST_PERSON = {
    "my": "their",
    "me": "them",
    "myself": "themselves",
    "mine": "theirs",
    "i": "they",
    "i'm": "they're",
    "i've": "they've",
    "our": "their",
    "we": "they",
    "us": "them",
}


def _third_person(value: str) -> str:
    """``value`` with its first-person words made third person ("my team" -> "their team")."""
    return " ".join(_FIRST_PERSON.get(w.lower(), w) for w in value.split(" "))


class RulesExtractor(Extractor):
    """The offline default extractor (see the module docstring). Stateless; safe to share between threads."""

    name = "rules"

    def extract(self, seen: list[Seen], user_id: str) -> Extraction:
        """Drafts of every observation of ``seen``, each citing the one observation it was read from."""
        names = {s.speaker.lower() for s in seen if s.speaker} | {user_id.lower()}
        out = Extraction()
        asked: list[tuple[str, str]] = []  # (sentence, speaker) of every sentence a speaker said
        owner: list[int] = []
        for i, obs in enumerate(seen):
            text = obs.own_text()
            sents = obs.own_sentences()
            for sentence in sents:
                self._facts(sentence, i, obs, names, user_id, out)
                if obs.about_user and obs.speaker:
                    out.core.extend(profile_lines(sentence, i, names))
            if obs.speaker and obs.speaker.lower() not in _NOT_PEOPLE and turn_worth_parsing(sents):
                asked.extend((sentence, user_id if obs.about_user else obs.speaker) for sentence in sents)
                owner.extend([i] * len(sents))
            out.procedural.extend(procedures(text, i, sents))
            out.resource.extend(resources(obs, i))
        self._statements(asked, owner, seen, user_id, out)
        return out

    @staticmethod
    def _statements(
        asked: list[tuple[str, str]], owner: list[int], seen: list[Seen], user_id: str, out: Extraction
    ) -> None:
        """One semantic draft per turn from what its speaker says about themselves (``extract.statements``); a
        multi-valued pattern draft of the same turn that it says in full ("Gina launched an ad campaign ...") is
        dropped for it."""
        by_turn: dict[int, list] = {}
        for i, found in zip(owner, statements(asked), strict=True):
            by_turn.setdefault(i, []).extend(found)
        said: dict[int, set[str]] = {}
        made = []
        for i, found in by_turn.items():
            if fact := turn_fact(found):
                obs = seen[i]
                name = user_id if obs.about_user else obs.speaker or user_id
                made.append(SemanticDraft(name=name, summary=fact[:1000], details=obs.own_text()[:4000], sources=[i]))
                said[i] = set(_WORDS.findall(fact.lower()))
        out.semantic = [
            d
            for d in out.semantic
            if d.attribute
            or d.sources[0] not in said
            or not set(_WORDS.findall(d.summary.lower())) <= said[d.sources[0]]
        ] + made

    def _facts(self, sentence: str, i: int, obs: Seen, names: set[str], user_id: str, out: Extraction) -> None:
        for (attribute, single, template, pattern), gate in zip(FACT_PATTERNS, FACT_GATES, strict=True):
            if not _passes(sentence, gate):
                continue
            for m in pattern.finditer(sentence):
                subj = m.group("subj")
                first_person = subj in ("I", "My", "my")
                if first_person:
                    if not obs.speaker:
                        continue  # a transcript's or a screen's "I" is not known to be anyone
                    subject = user_id if obs.about_user else obs.speaker
                else:
                    subject = subj.removesuffix("'s")
                    if subject in _NOT_NAMES or subject.lower() not in names:
                        continue
                    if subject.lower() == user_id.lower():
                        subject = user_id
                value = _clean_value(m.group("value"))
                if attribute in _CLAUSE_ATTRIBUTES:  # "a dance studio", "the business" are values here
                    value = _third_person(value)
                    if not value or value.lower().split()[0] in _NOT_CLAUSES:
                        continue
                elif not value or value.lower().split()[0] in _NOT_VALUES:
                    continue
                shown = False  # "I love the color", "the tech": mostly said of what the other shows, no profile line
                if attribute == "likes":
                    if " " in value and value.split()[-1].lower() in names:  # a name called out: "the thought Nate!"
                        value = value.rpartition(" ")[0]
                    shown = m.group("value").startswith("the ") and " " not in value
                    value = _third_person(value)  # "running my own studio" -> "running their own studio"
                line = value.split(" - ")[0]  # a dash starts another thought: "counseling - I'd love to ..."
                shown = shown or _unreadable_line(line, inside=attribute == "likes")
                what = m.groupdict().get("what") or ""
                clause = attribute in _CLAUSE_ATTRIBUTES  # its verb is part of the value: "interest: into jazz"
                attr = f"{attribute}_{what.replace(' ', '_')}" if what and not clause else attribute
                summary = template.format(s=subject, v=value, w=what)
                out.semantic.append(
                    SemanticDraft(
                        name=subject,
                        summary=summary,
                        details=sentence[:4000],
                        sources=[i],
                        attribute=attr if single else "",
                        value=value if single else "",
                    )
                )
                if (first_person and obs.about_user or subject == user_id) and attribute not in _EVENTS and not shown:
                    label = "pets" if attr == "pet" else attr.replace("_", " ")  # one line with PROFILE_PATTERNS'
                    fact = f"{label}: {what} {line}".replace(":  ", ": ") if clause else f"{label}: {line}"
                    out.core.append(CoreDraft(label="human", sources=[i], facts=[fact]))


def profile_lines(sentence: str, i: int, names: set[str]) -> list[CoreDraft]:
    """The lines of the user's profile block that ``sentence``, said by the user, gives (``PROFILE_PATTERNS``);
    ``names``: the speakers' names, lower-cased (no pet or family member's name: "Mel, my dog ...")."""
    found: list[tuple[str, str]] = []
    for label, gate, pattern in PROFILE_PATTERNS:
        if not _passes(sentence, (gate,)):
            continue
        for m in pattern.finditer(sentence):
            value = _clean_value(m.group("value"))
            value = _PROFILE_VALUES.get(value.lower(), value)
            if name := m.groupdict().get("name"):
                if name.lower() in names or name in _NOT_NAMES:
                    continue
                value = f"{value} {name}"
            if value and value.lower().split()[0] not in _NOT_VALUES:
                found.append((label, value))
    # no line a longer one of its label says in full ("pets: guinea pig" beside "pets: guinea pig Oscar")
    return [
        CoreDraft(label="human", sources=[i], facts=[f"{label}: {value}"])
        for label, value in found
        if not any(k == label and v != value and said_in(value, v) for k, v in found)
    ]


def procedures(text: str, i: int, sents: list[str] | None = None) -> list[ProceduralDraft]:
    """Step lists in ``text``: numbered lines (1., 2., ... in order) most of which start with an imperative
    verb, and "first ..., then ..., finally ..." sequences whose steps read as instructions (not "I went ...,
    then we ..."). ``sents``: ``sentences(text)`` when the caller has them."""
    out = []
    matches = list(_NUMBERED.finditer(text))
    run: list[re.Match] = []
    for m in [*matches, None]:
        if m is not None and (not run and m.group(1) == "1" or run and int(m.group(1)) == int(run[-1].group(1)) + 1):
            run.append(m)
            continue
        if 2 <= len(run) <= 30 and sum(map(_imperative, (r.group(2) for r in run))) * 2 > len(run):
            line_no = text[: run[0].start()].count("\n") + (1 if text[run[0].start()] == "\n" else 0)
            lines = text.splitlines()
            heading = next((ln.strip().rstrip(":") for ln in reversed(lines[:line_no]) if ln.strip()), "")
            steps = [r.group(2).strip() for r in run]
            out.append(
                ProceduralDraft(entry_type="guide", summary=(heading or steps[0])[:500], steps=steps, sources=[i])
            )
        run = [m] if m is not None and m.group(1) == "1" else []
    for sentence in sentences(text) if sents is None else sents:
        low = sentence.lower()
        if (
            "first" not in low
            or not re.search(r"\bfirst(?:ly)?\b", low)  # the substring test first: cheaper
            or not re.search(r"\b(?:then|next|finally|lastly)\b", low)
        ):
            continue
        parts = _SEQUENCE.split(sentence)
        head, steps = parts[0].strip(" ,:;-"), [p.strip(" ,;.") for p in parts[1:] if p.strip(" ,;.")]
        steps = [re.sub(r"^(?:and|you)\s+", "", s, flags=re.IGNORECASE) for s in steps]
        if len(steps) < 2 or any(len(s.split()) < 2 or s.split()[0].lower() in _NOT_IMPERATIVE for s in steps):
            continue
        summary = head if len(head.split()) >= 2 else f"{steps[0]} … {steps[-1]}"
        out.append(ProceduralDraft(entry_type="workflow", summary=summary[:500], steps=steps, sources=[i]))
    return out


def resources(obs: Seen, i: int) -> list[ResourceDraft]:
    """URLs and file names in the text, and the window of a screenshot."""
    text = obs.text
    out: list[ResourceDraft] = []
    where = f"shared by {obs.speaker}" if obs.speaker else f"seen on {obs.kind}"
    spans = []
    for m in _URL.finditer(text) if "http" in text or "www." in text else ():  # a URL holds one of these
        url = m.group(0).rstrip(".,;:!?")
        spans.append((m.start(), m.end()))
        host = urlsplit(url if "://" in url else f"http://{url}").hostname or url
        out.append(
            ResourceDraft(
                title=url[:500],
                resource_type="url",
                summary=f"link to {host} {where}"[:1000],
                content=_around(text, m.start(), m.end()),
                sources=[i],
            )
        )
    for m in _FILE.finditer(text) if _FILE_EXT.search(text) else ():  # a file name holds a .<extension>
        if any(a <= m.start() < b for a, b in spans):
            continue
        name, ext = m.group(1), m.group(2).lower()
        base = name[: -len(ext) - 1]
        if ext in ("js", "ts", "md", "json", "py", "sh", "sql", "yml", "yaml", "txt") and not (
            base.islower() or any(c in base for c in "_-0123456789")
        ):
            continue  # "Node.js" names a technology, "notes.md" a file
        out.append(
            ResourceDraft(
                title=name,
                resource_type=_FILE_TYPES.get(ext, "code"),
                summary=f"file {name} {where}",
                content=_around(text, m.start(), m.end()),
                sources=[i],
            )
        )
    if obs.kind == "screenshot" and (obs.window or obs.app):
        title = obs.window or obs.app or ""
        kind = "page" if any(b in (obs.app or "").lower() for b in _BROWSERS) else "window"
        summary = " — ".join(x for x in (obs.app, obs.window) if x)
        out.append(
            ResourceDraft(
                title=title[:500],
                resource_type=kind,
                summary=f"{summary} (on screen)"[:1000],
                content=text[:8000],
                sources=[i],
            )
        )
    return out


def _around(text: str, start: int, end: int, width: int = 300) -> str:
    """The text around ``[start, end)``, about ``width`` characters either side."""
    return text[max(0, start - width) : end + width].strip()
