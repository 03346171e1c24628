"""Secrets in text: API keys and tokens (detect-secrets' plugins), private keys, passwords told in words, card
numbers (Luhn), IBANs and phone numbers (python-stdnum, phonenumbers), each with its span, so perceive can redact
them before anything is stored (the secret itself goes encrypted to the knowledge vault, ``memory.vault``).

What was heard and what OCR split are read as typed text is: a password, PIN or door code told after a cue ("the
WiFi password is blue Falcon 77", "my PIN is four five one two", "the door code is 4512") is the clause after the
cue, cut by syntok's tokenizer and segmenter at a comma, "and", a function word or the sentence's end; a token that
OCR wrapped over two lines is found in the lines joined (``_wrap_cuts``), and a token with a known prefix that a
window's edge (or OCR) cut short is kept as a partial one (``Finding.partial``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

import phonenumbers
from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.cloudant import CloudantDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.softlayer import SoftlayerDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector
from stdnum import iban, luhn

#: The placeholder redaction leaves where a secret was: ``[vault:<entry id> <entry type>]`` (``memory.vault``).
PLACEHOLDER = re.compile(r"\[vault:([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}) ([a-z_]+)\]")


@dataclass(frozen=True)
class Finding:
    """One secret in a text: its type, span ``[start, end)`` in characters, value and sensitivity."""

    entry_type: str
    start: int
    end: int
    secret: str
    sensitivity: str
    partial: bool = False  # a token with a known prefix but not its whole shape (cut at an edge, misread)


LABELS = {
    "aws_access_key": "AWS access key id",
    "aws_secret_key": "AWS secret access key",
    "api_key": "API key or token",
    "password": "password",
    "credit_card": "payment card number",
    "iban": "bank account (IBAN)",
    "phone_number": "phone number",
    "email": "e-mail address",
    "address": "street address",
    "private_key": "private key",
    "jwt": "JSON web token",
    "webhook": "webhook URL",
    "pin": "PIN or access code",
}


SENSITIVITY = {
    "aws_access_key": "high",
    "aws_secret_key": "high",
    "api_key": "high",
    "password": "high",
    "credit_card": "high",
    "iban": "high",
    "phone_number": "medium",
    "address": "medium",
    "email": "low",
    "private_key": "high",
    "jwt": "high",
    "webhook": "high",
    "pin": "high",
}


# (entry type, pattern, group holding the secret, a cheap test the text must pass first), tried in this
# order; earlier spans win overlaps
_DIGIT_RUN = re.compile(r"\d[\d \t().-]{5,}\d")


_DIGIT = re.compile(r"\d")  # the address pattern needs a \d: one regex scan instead of a Python loop per character


_PATTERNS: list[tuple[str, re.Pattern, int, Callable[[str, str], bool]]] = [
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), 0, lambda t, low: "AKIA" in t or "ASIA" in t),
    (
        "aws_secret_key",
        re.compile(
            r"(?i)aws_?secret_?(?:access_?)?key\s*[:=]\s*[\"']?"
            r"([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
        ),
        1,
        lambda t, low: "secret" in low,
    ),
    (
        "api_key",
        re.compile(
            r"\b(?:sk-(?:[a-z]+-)?[A-Za-z0-9_-]{20,}|sk_(?:live|test)_[A-Za-z0-9]{16,}"
            r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,}|xox[abprs]-[A-Za-z0-9-]{10,}"
            r"|AIza[0-9A-Za-z_-]{35}|glpat-[A-Za-z0-9_-]{20,})"
        ),
        0,
        lambda t, low: any(x in t for x in ("sk-", "sk_", "_", "xox", "AIza", "glpat-")),
    ),
    (
        "api_key",
        re.compile(
            r"(?i)\b(?:api[_ -]?key|access[_ -]?token|secret[_ -]?key|auth[_ -]?token)\b\s*[:=]\s*"
            r"[\"']?((?=[A-Za-z0-9_./+-]*\d)(?=[A-Za-z0-9_./+-]*[A-Za-z])[A-Za-z0-9_./+-]{16,})"
        ),
        1,
        lambda t, low: "key" in low or "token" in low,
    ),
    ("api_key", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{16,}=*)"), 1, lambda t, low: "bearer" in low),
    (
        "password",
        re.compile(
            r"(?i)(?<![\w-])(?:password|passwd|passcode|passphrase|passwort|kennwort|pwd|pw)"
            r"\s*(?:[:=]\s*[\"']?(?P<v1>[^\s\"']{4,})"
            r"|(?:is|ist|lautet)\s+[\"']?(?P<v2>(?=[^\s\"']*[^A-Za-z\s\"'.,;:!?])[^\s\"']{4,}))"
        ),
        -1,
        lambda t, low: "pass" in low or "pw" in low or "wort" in low,
    ),
    (
        "iban",
        re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b"),
        0,
        lambda t, low: _DIGIT_RUN.search(t) is not None,
    ),
    (
        "credit_card",
        re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])"),
        0,
        lambda t, low: _DIGIT_RUN.search(t) is not None,
    ),
    (
        "email",
        re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"),
        0,
        lambda t, low: "@" in t,
    ),
    (
        "address",
        re.compile(
            r"\b\d{1,5}[ \t]+(?:[A-Z][a-z]+[ \t]+){1,3}"
            r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Way|Place|Pl"
            r"|Terrace)\b\.?(?:,?\s*(?:Apt|Suite|Unit)\.?\s*\w+)?"
            r"(?:,\s*[A-Z][a-z]+(?:\s[A-Z][a-z]+)*)?(?:,\s*[A-Z]{2}\s+\d{5})?"
        ),
        0,
        lambda t, low: _DIGIT.search(t) is not None,
    ),
]


_TRAILING = ".,;:!?)]}>'\""


def _valid(entry_type: str, secret: str) -> bool:
    digits = re.sub(r"\D", "", secret)
    match entry_type:
        case "credit_card":
            return 13 <= len(digits) <= 19 and digits[0] in "23456" and len(set(digits)) > 1 and luhn.is_valid(digits)
        case "iban":
            return iban.is_valid(secret)
        case "password":  # not a masked field, nor a template's stand-in ("your_password", "<password>"), nor a
            low = secret.lower()  # word saying something about the password ("Password: required")
            stand_in = "password" in low or low.startswith(("your", "<", "{", "$", "%"))
            return not (set(secret) <= set("*•●·x.") or stand_in or low in _NOT_A_PASSWORD or low in _FUNCTION_WORDS)
    return True


_PHONE_WORDS = re.compile(r"(?i)\b(?:phone|call|tel|mobile|cell|number|text me|whatsapp|fax)\b")


# an id's label right before a number: an order or ticket number written like a phone number is not one
_ID_LABEL = re.compile(
    r"(?i)\b(?:order|invoice|tracking|reference|ref|booking|confirmation|ticket|case|serial|item"
    r"|sku|part|receipt|transaction|shipment|parcel|model)\b(?:[ \t]*(?:no\.?|nr\.?|number|id|#))?"
    r"[ \t]*[:#]?[ \t]*\Z"
)


def _phone_shaped(raw: str, before: str) -> bool:
    """Written as a phone number is: international (``+``), with an area code in parentheses, or in groups of
    at most four digits; a bare digit run only after a word such as "call" or "phone"; never right after an
    id's label ("order #", "ticket no."). Keeps table cells, decimals and ids out."""
    if _ID_LABEL.search(before):
        return False
    groups = re.findall(r"\d+", raw)
    if raw.startswith("+") or (raw.startswith("(") and max(map(len, groups)) <= 4):
        return True
    if len(groups) >= 3 and max(map(len, groups)) <= 4 and not re.search(r"\d\.\d{5}", raw):
        return True
    return len(groups) == 1 and bool(_PHONE_WORDS.search(before))


def detect(text: str, phone_region: str = "US") -> list[Finding]:
    """The secrets in ``text``, by start, without overlaps. Pure: no I/O, never logs the text.

    Results are memoised per (text, region) in this process (``_detect``, an LRU of ``DETECT_CACHE_SIZE``
    texts): a chat turn is read as its own text and again as up to four neighbours' context, and a turn
    at a batch edge by two perceive tasks, so each distinct text is searched once. The memo holds texts
    that may contain secrets, in this process's memory only (as the task's own variables do)."""
    return list(_detect(text, phone_region))


DETECT_CACHE_SIZE = 4096


# detect-secrets' regex plugins (``analyze_string`` yields each raw value) and the entry type each one's
# values get; its entropy, keyword and public-IP plugins are left out (noisy on prose), its private-key
# plugin only finds the BEGIN line (the whole block is ours: ``_PRIVATE_KEY``)
_SCANNERS = [
    (plugin(), entry_type)
    for plugin, entry_type in [
        (AWSKeyDetector, "aws_access_key"),
        (JwtTokenDetector, "jwt"),
        (BasicAuthDetector, "password"),
        (SlackDetector, "api_key"),
        (GitHubTokenDetector, "api_key"),
        (GitLabTokenDetector, "api_key"),
        (OpenAIDetector, "api_key"),
        (StripeDetector, "api_key"),
        (ArtifactoryDetector, "api_key"),
        (AzureStorageKeyDetector, "api_key"),
        (CloudantDetector, "api_key"),
        (DiscordBotTokenDetector, "api_key"),
        (IbmCloudIamDetector, "api_key"),
        (IbmCosHmacDetector, "api_key"),
        (MailchimpDetector, "api_key"),
        (NpmDetector, "api_key"),
        (PypiTokenDetector, "api_key"),
        (SendGridDetector, "api_key"),
        (SoftlayerDetector, "api_key"),
        (SquareOAuthDetector, "api_key"),
        (TelegramBotTokenDetector, "api_key"),
        (TwilioKeyDetector, "api_key"),
    ]
]


_PRIVATE_KEY_PLUGIN = PrivateKeyDetector()


# every value those plugins find is a run of 20 or more characters without a space, or sits in a URL: texts
# with neither (most chat turns) skip them: detection then costs about what it did without them
_LONG_RUN = re.compile(r"\S{20,}")


_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-=.+/")


# a PEM/OpenSSH/PGP private key block: from its BEGIN line (dashes optional: OCR drops them) to its END line,
# or to the end of the text when the block is cut off (a screenshot, a truncated paste)
_PRIVATE_KEY = re.compile(
    r"(?:-{2,}\s*)?BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?(?:\s*-{2,})?"
    r"(?:.*?END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?(?:\s*-{2,})?|.*\Z)"
    r"|PuTTY-User-Key-File-\d.*\Z",
    re.DOTALL,
)


# a passphrase: letters-only words after a password label, up to the end of the sentence
_PASSPHRASE = re.compile(
    r"(?i)(?<![\w-])(?:password|passwd|passcode|passphrase|passwort|kennwort|pwd|pw)"
    r"(?:\s*[:=]\s*|\s+(?:is|ist|lautet)\s+)[\"']?"
    r"(?P<v>[^\W\d_]+(?:[ \t]+[^\W\d_]+){0,7})(?=[\"']?[ \t]*(?:[.!?;,](?!\S)|\n|\Z))"
)


# words that say something about a password rather than being one ("the password is required")
_NOT_A_PASSWORD = frozenset(
    """required incorrect correct wrong invalid valid expired short long weak strong secure
    insecure empty blank missing hidden changed unchanged reset set saved stored encrypted hashed ok okay fine good
    bad right case sensitive needed mandatory optional unknown forgotten new old same different here there below
    above attached enclosed following daily weekly monthly yearly always never often usually updated protected
    private secret public shared known unique complex simple easy hard safe unsafe masked visible readable true
    false none null undefined changeme pending ready gone lost compromised leaked ungültig falsch richtig erforderlich
    leer geändert characters chars letters digits numbers symbols enough days weeks months hours minutes years
    times expiring expires locked temporary random generated""".split()
)


_FUNCTION_WORDS = frozenset(
    """a an the and or but nor so yet of to in on at by for with from into onto about as is
    are was were be been being am do does did has have had not no too very still now also just only then than that
    this these those it its my your our their his her we you they he she i me us them what which who when where why
    how all any each every some more most less least much many such own same again der die das und oder ist nicht
    sehr noch schon""".split()
)


def _passphrase(words: str) -> bool:
    """One word that is not a word about passwords, or three to eight words none of which is a function word
    and not all about passwords ("correct horse battery staple")."""
    low = words.lower().split()
    if len(low) == 1:
        return low[0] not in _NOT_A_PASSWORD and low[0] not in _FUNCTION_WORDS
    return len(low) >= 3 and not any(w in _FUNCTION_WORDS for w in low) and not all(w in _NOT_A_PASSWORD for w in low)


# cues: a password, PIN or code told in words, typed or heard ---------------------------------------------------

# the cue word and what it names: "pw" a password (any clause after "is"), "code" a PIN, passcode or a lock's code
# (digits or number words, also without "is": "PIN 4512", "door code 4512"), "own" a bare "my code"/"the code"
# (only after "is", and only a clause of nothing but digits or number words: "the code is 200 lines" is none); a
# "code" after any other word ("error code", "zip code") is no cue
# (its first letter outside the case-blind group: re then skips to the letters P, C, K in C, ~20x faster on a
# long transcript than a case-blind pattern; the word's start is checked in ``_cued``)
_CUE = re.compile(
    r"[PpCcKk](?i:ass[ -]?(?:word|phrase|code)s?|asswd|asswort|ennwort|wd|w|ins?|odes?"
    r"|ombinations?)\b"
)
_PIN_NOUN = re.compile(r"(?i)[ -](?:code|number)s?\b")
_LOCKS = frozenset(
    """door gate alarm lock safe locker access entry entrance security garage building keypad unlock
    wifi wi-fi verification confirmation login 2fa one-time pin""".split()
)
_OWNERS = frozenset("my our your his her their the".split())
_CUE_VERB = re.compile(r"[ \t]*(?:(?:is|was|are|were|ist|lautet)(?![\w-])|'s(?!\w)|(?P<mark>[:=#]))?[ \t]*")
_NUMBER_WORDS = frozenset(
    """zero oh one two three four five six seven eight nine ten eleven twelve thirteen fourteen
    fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand
    double triple""".split()
)
_CLAUSE_WORDS = frozenset(
    """and but or so then because while whereas when if though although since until unless
    which who whom whose where after before""".split()
)
_CUE_WORDS = frozenset("password passwords passcode passcodes pin pins code codes passwort kennwort pw pwd".split())
_CLAUSE_MARKS = frozenset(',;:!?()[]{}"“”«»—–….')  # a token of these ends the clause
_QUOTES = "'\"‘’“”`"
_VALUE_CHARS = 160  # a told secret lies within this many characters of its cue


def _numeric(word: str) -> bool:
    """Digits (with separators: "4,500", "9-3-7-1"), a number word, or a letter spelled out ("B")."""
    return (
        bool(re.fullmatch(r"[#$]?\d[\d,./-]*", word))
        or word.lower() in _NUMBER_WORDS
        or (len(word) == 1 and word.isalpha() and word not in "aAI")
    )


def _digit_count(words: list[str]) -> int:
    return sum(len(re.sub(r"\D", "", w)) or 1 for w in words)


def _clause(text: str, start: int) -> list[tuple[int, int, str]]:
    """The words (start, end, text) of the clause that begins at ``start``: syntok's tokens of the first sentence
    from there (its segmenter: "p.m." does not end it) on the same line, tokens written together as one word
    (syntok splits "Xk9pQ2" at its case changes), up to a comma, colon or other clause mark."""
    from syntok import segmenter
    from syntok.tokenizer import Tokenizer

    window = text[start : start + _VALUE_CHARS].split("\n", 1)[0]
    tokens = list(Tokenizer().tokenize(window))
    words: list[list] = []
    for tok in segmenter.split(iter(tokens))[0] if tokens else ():
        if tok.value in _CLAUSE_MARKS or (tok.value in _QUOTES and words):
            break
        if tok.value in _QUOTES:
            continue
        if words and not tok.spacing and words[-1][1] == tok.offset:
            words[-1][1], words[-1][2] = tok.offset + len(tok.value), words[-1][2] + tok.value
        else:
            words.append([tok.offset, tok.offset + len(tok.value), tok.value])
    return [(start + a, start + b, w) for a, b, w in words]


def _told(words: list[tuple[int, int, str]], kind: str) -> list[tuple[int, int, str]]:
    """The words of ``words`` that are the secret: up to a clause word ("and", "because"; "and" between numbers
    is kept: "4,500 and 12"), a function word or another cue; a code stops at its first word that is not a
    number, and a bare "my code" must be nothing else (else none)."""
    kept: list[tuple[int, int, str]] = []
    for i, (a, b, w) in enumerate(words):
        low = w.lower()
        if low == "and" and kept and _numeric(kept[-1][2]) and i + 1 < len(words) and _numeric(words[i + 1][2]):
            kept.append((a, b, w))
            continue
        if low in _CLAUSE_WORDS or low in _FUNCTION_WORDS or low in _CUE_WORDS:
            break
        if kind != "pw" and not (_numeric(w) or re.search(r"\d", w)):
            return [] if kind == "own" else kept
        kept.append((a, b, w))
    return kept


def _told_secret(words: list[str], kind: str) -> bool:
    """Whether the told words are a secret: a code has three or more digits (number words count one each); a
    password is digits alike, or words with a number ("Hunter 2", "blue Falcon 77", "hunter two") none of which
    says something about passwords ("8 characters long"), or a passphrase (``_passphrase``)."""
    if not words or len(words) > 8:
        return False
    numbers = [w for w in words if _numeric(w)]
    if kind != "pw" or len(numbers) == len(words):
        return any(re.search(r"\d", w) or w.lower() in _NUMBER_WORDS for w in words) and _digit_count(words) >= 3
    if numbers or any(re.search(r"\d", w) for w in words):
        return not any(w.lower() in _NOT_A_PASSWORD for w in words)
    return _passphrase(" ".join(words))


def _cue_kind(text: str, m: re.Match) -> tuple[str, int] | None:
    """What the cue word ``m`` names ("pw", "code" or "own", see ``_CUE``) and where its cue ends; None when it
    names none ("error code")."""
    noun = m.group().lower()
    if noun.startswith(("passw", "pass w", "pass-w", "passp", "pass p", "pass-p", "pwd", "pw", "kennw")):
        return "pw", m.end()
    if noun.startswith(("pass", "combination")):
        return "code", m.end()
    if noun.startswith("pin"):
        more = _PIN_NOUN.match(text, m.end())
        return "code", more.end() if more else m.end()
    before = text[max(0, m.start() - 24) : m.start()].split()
    word = before[-1].lower() if before else ""
    return ("code", m.end()) if word in _LOCKS else ("own", m.end()) if word in _OWNERS else None


def _cued(text: str) -> list[tuple[str, int, int]]:
    """(entry type, start, end) of each secret told after a cue: "password is ..." (``password``), "PIN ...",
    "the door code is ..." (``pin``). A password needs "is"/"was" ("password:" is ``_PATTERNS``' label form); a
    code may follow its cue directly when the cue is a lock's code, a passcode or "PIN" in capitals."""
    out = []
    for m in _CUE.finditer(text):
        cue = (
            _cue_kind(text, m)
            if not m.start() or not (text[m.start() - 1].isalnum() or text[m.start() - 1] in "_-")
            else None
        )
        if cue is None:
            continue
        kind, end = cue
        verb = _CUE_VERB.match(text, end)
        said = verb.group(0).strip()
        if not said and (kind != "code" or m.group()[:3].lower() == "pin" and m.group()[:3] != "PIN"):
            continue  # "pin 3 of the chip", "the code review"
        if said and (verb.group("mark") and kind != "code"):
            continue
        words = _told(_clause(text, verb.end()), kind)
        if _told_secret([w for _, _, w in words], kind):
            out.append(("password" if kind == "pw" else "pin", words[0][0], words[-1][1]))
    return out


# tokens wrapped over lines or cut short ---------------------------------------------------------------------

#: Prefixes of tokens of a known shape (GitHub, GitLab, OpenAI/Stripe, Slack, AWS, Google, npm, PyPI, a JWT's
#: header ``{"``): a run of token characters starting with one is a token even when cut short.
_PREFIXES = (
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "sk-",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "rk_test_",
    "xoxa-",
    "xoxb-",
    "xoxp-",
    "xoxo-",
    "xoxr-",
    "xoxs-",
    "AKIA",
    "ASIA",
    "AIza",
    "eyJ",
    "npm_",
    "pypi-",
)
_TOKEN_RUN = r"[A-Za-z0-9_\-+/=.]"
_PREFIXED = re.compile(rf"(?<![A-Za-z0-9_\-+/])(?:{'|'.join(map(re.escape, _PREFIXES))}){_TOKEN_RUN}{{8,}}")
_RUN_HEAD = re.compile(rf"{_TOKEN_RUN}+")
_RUN_TAIL = re.compile(rf"{_TOKEN_RUN}+\Z")


def _prefixed(text: str) -> list[tuple[str, int, int]]:
    """(entry type, start, end) of runs that begin like a known token and hold a digit or a capital after the
    prefix ("ghp_Q7xN2mK9pR4t" cut at a window's edge; not "sk-learn-models"): what the full detectors did not take
    (``_scan`` adds these last, so a whole token found earlier wins)."""
    out = []
    for m in _PREFIXED.finditer(text):
        prefix = next(p for p in _PREFIXES if m.group().startswith(p))
        if re.search(r"[0-9A-Z]", m.group()[len(prefix) :]):
            kind = {"AKIA": "aws_access_key", "ASIA": "aws_access_key", "eyJ": "jwt"}.get(prefix, "api_key")
            out.append((kind, m.start(), m.end()))
    return out


def _token_like(run: str) -> bool:
    return any(c.isdigit() for c in run) and any(c.isalpha() for c in run)


def _wrap_cuts(text: str) -> list[int]:
    """Positions of the line breaks inside a token that OCR (or a terminal, a narrow window) wrapped: a line
    ending in a token-like run (twelve or more characters with letters and digits, or a known prefix) followed by
    a line starting with one that is not a word (it holds a digit, a symbol or an inner capital), nor a token of
    its own (a known prefix, an assignment)."""
    cuts, pos = [], 0
    lines = text.split("\n")
    for line, nxt in pairwise(lines):
        pos += len(line)
        tail, head = _RUN_TAIL.search(line[-_VALUE_CHARS:]), _RUN_HEAD.match(nxt)
        if tail and head and len(head.group()) >= 2:
            r1, r2 = tail.group(), head.group()
            starts = _PREFIXED.match(r1 + r2) is not None
            if (
                (starts or (len(r1) >= 12 and _token_like(r1)))
                and not r2.startswith(_PREFIXES)
                and not re.search(r"=[^=]", r2)  # "NAME=value" starts a new thing; base64 pads only at its end
                and (re.search(r"[\d_\-+/.]", r2) or any(c.isupper() for c in r2[1:]))
            ):
                cuts.append(pos)
        pos += 1
    return cuts


def clear_memo() -> None:
    """Forget the findings kept per (text, region) (``_detect``'s memo): a benchmark's cold run."""
    _detect.cache_clear()


@lru_cache(maxsize=DETECT_CACHE_SIZE)
def _detect(text: str, phone_region: str) -> tuple[Finding, ...]:
    cuts = _wrap_cuts(text) if "\n" in text else []
    if not cuts:
        return tuple(_scan(text, phone_region))
    # a token wrapped over lines is searched with the line breaks inside it taken out, and its span given back
    # in ``text`` (the breaks included); a private key keeps its lines (the block is redacted as it was written)
    cut = set(cuts)
    kept = [i for i in range(len(text)) if i not in cut]
    joined = "".join(text[i] for i in kept)
    out = []
    for f in _scan(joined, phone_region):
        start, end = kept[f.start], kept[f.end - 1] + 1
        secret = text[start:end] if f.entry_type == "private_key" else f.secret
        out.append(Finding(f.entry_type, start, end, secret, f.sensitivity, f.partial))
    return tuple(out)


def _scan(text: str, phone_region: str) -> list[Finding]:
    """``_detect`` of a text whose wrapped tokens are joined: every detector, earlier spans winning overlaps."""
    found: list[Finding] = []
    # placeholders already in the text (a redacted window title perceived again) are not searched
    taken = [(m.start(), m.end()) for m in PLACEHOLDER.finditer(text)]

    def add(entry_type: str, start: int, end: int, trailing: str = _TRAILING, partial: bool = False) -> None:
        secret = text[start:end]
        stripped = secret.rstrip(trailing)
        end -= len(secret) - len(stripped)
        if (
            stripped
            and _valid(entry_type, stripped)
            and not any(a < end and start < b for a, b in taken)
            and not any(f.start < end and start < f.end for f in found)
        ):
            found.append(Finding(entry_type, start, end, stripped, SENSITIVITY[entry_type], partial))

    if ("BEGIN" in text or "PuTTY" in text) and any(True for _ in _PRIVATE_KEY_PLUGIN.analyze_string(text)):
        for m in _PRIVATE_KEY.finditer(text):
            add("private_key", m.start(), m.end(), trailing=" \t\r\n")
    for plugin, entry_type in _SCANNERS if "://" in text or _LONG_RUN.search(text) else ():
        for value in set(plugin.analyze_string(text)):
            kind = "webhook" if value.startswith("https://") else entry_type
            for m in re.finditer(re.escape(value), text):
                start, end = m.start(), m.end()
                if kind != "password":  # a plugin's value may be a group of its match (GitHub's "ghp") or stop
                    while start and text[start - 1] in _TOKEN_CHARS:  # short of a JWT's signature: the whole token
                        start -= 1
                    while end < len(text) and text[end] in _TOKEN_CHARS:
                        end += 1
                add(kind, start, end, trailing=".")
    low = text.lower()
    for entry_type, start, end in _cued(text):
        add(entry_type, start, end, trailing="")
    if "pass" in low or "pw" in low or "wort" in low:
        for m in _PASSPHRASE.finditer(text):
            if _passphrase(m.group("v")):
                add("password", m.start("v"), m.end("v"), trailing="")
    for entry_type, pattern, group, gate in _PATTERNS:
        if not gate(text, low):
            continue
        for m in pattern.finditer(text):
            if group == -1:  # a password after "password:" keeps its "!" or "?"; after "password is", a sentence's
                name = "v1" if m.group("v1") is not None else "v2"
                add(
                    entry_type,
                    m.start(name),
                    m.end(name),
                    trailing=_TRAILING.replace("!", "").replace("?", "") if name == "v1" else _TRAILING,
                )
            else:
                add(entry_type, m.start(group), m.end(group))
    if _DIGIT_RUN.search(text):
        for m in phonenumbers.PhoneNumberMatcher(text, phone_region, leniency=phonenumbers.Leniency.VALID):
            if _phone_shaped(m.raw_string, text[max(0, m.start - 24) : m.start]):
                add("phone_number", m.start, m.end)
    for entry_type, start, end in _prefixed(text) if any(p in text for p in _PREFIXES) else ():
        add(entry_type, start, end, trailing=".", partial=True)
    return sorted(found, key=lambda f: f.start)
