"""Secrets in text: API keys and tokens (detect-secrets' plugins), private keys, passwords told in words, card
numbers (Luhn), IBANs and phone numbers (python-stdnum, phonenumbers), each with its span, so perceive can redact
them before anything is stored (the secret itself goes encrypted to the knowledge vault, ``memory.vault``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

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


LABELS = {"aws_access_key": "AWS access key id", "aws_secret_key": "AWS secret access key",
          "api_key": "API key or token", "password": "password", "credit_card": "payment card number",
          "iban": "bank account (IBAN)", "phone_number": "phone number", "email": "e-mail address",
          "address": "street address", "private_key": "private key", "jwt": "JSON web token",
          "webhook": "webhook URL"}


SENSITIVITY = {"aws_access_key": "high", "aws_secret_key": "high", "api_key": "high", "password": "high",
               "credit_card": "high", "iban": "high", "phone_number": "medium", "address": "medium",
               "email": "low", "private_key": "high", "jwt": "high", "webhook": "high"}


# (entry type, pattern, group holding the secret, a cheap test the text must pass first), tried in this
# order; earlier spans win overlaps
_DIGIT_RUN = re.compile(r"\d[\d \t().-]{5,}\d")


_DIGIT = re.compile(r"\d")  # the address pattern needs a \d: one regex scan instead of a Python loop per character


_PATTERNS: list[tuple[str, re.Pattern, int, Callable[[str, str], bool]]] = [
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), 0, lambda t, low: "AKIA" in t or "ASIA" in t),
    ("aws_secret_key", re.compile(r"(?i)aws_?secret_?(?:access_?)?key\s*[:=]\s*[\"']?"
                                  r"([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"), 1, lambda t, low: "secret" in low),
    ("api_key", re.compile(r"\b(?:sk-(?:[a-z]+-)?[A-Za-z0-9_-]{20,}|sk_(?:live|test)_[A-Za-z0-9]{16,}"
                           r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,}|xox[abprs]-[A-Za-z0-9-]{10,}"
                           r"|AIza[0-9A-Za-z_-]{35}|glpat-[A-Za-z0-9_-]{20,})"), 0,
     lambda t, low: any(x in t for x in ("sk-", "sk_", "_", "xox", "AIza", "glpat-"))),
    ("api_key", re.compile(r"(?i)\b(?:api[_ -]?key|access[_ -]?token|secret[_ -]?key|auth[_ -]?token)\b\s*[:=]\s*"
                           r"[\"']?((?=[A-Za-z0-9_./+-]*\d)(?=[A-Za-z0-9_./+-]*[A-Za-z])[A-Za-z0-9_./+-]{16,})"), 1,
     lambda t, low: "key" in low or "token" in low),
    ("api_key", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{16,}=*)"), 1, lambda t, low: "bearer" in low),
    ("password", re.compile(r"(?i)(?<![\w-])(?:password|passwd|passcode|passphrase|passwort|kennwort|pwd|pw)"
                            r"\s*(?:[:=]\s*[\"']?(?P<v1>[^\s\"']{4,})"
                            r"|(?:is|ist|lautet)\s+[\"']?(?P<v2>(?=[^\s\"']*[^A-Za-z\s\"'.,;:!?])[^\s\"']{4,}))"), -1,
     lambda t, low: "pass" in low or "pw" in low or "wort" in low),
    ("iban", re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b"), 0,
     lambda t, low: _DIGIT_RUN.search(t) is not None),
    ("credit_card", re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])"), 0,
     lambda t, low: _DIGIT_RUN.search(t) is not None),
    ("email", re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"), 0,
     lambda t, low: "@" in t),
    ("address", re.compile(r"\b\d{1,5}[ \t]+(?:[A-Z][a-z]+[ \t]+){1,3}"
                           r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Way|Place|Pl"
                           r"|Terrace)\b\.?(?:,?\s*(?:Apt|Suite|Unit)\.?\s*\w+)?"
                           r"(?:,\s*[A-Z][a-z]+(?:\s[A-Z][a-z]+)*)?(?:,\s*[A-Z]{2}\s+\d{5})?"), 0,
     lambda t, low: _DIGIT.search(t) is not None),
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


def _phone_shaped(raw: str, before: str) -> bool:
    """Written as a phone number is: international (``+``), with an area code in parentheses, or in groups of
    at most four digits; a bare digit run only after a word such as "call" or "phone". Keeps table cells,
    decimals and ids out."""
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
_SCANNERS = [(plugin(), entry_type) for plugin, entry_type in [
    (AWSKeyDetector, "aws_access_key"), (JwtTokenDetector, "jwt"), (BasicAuthDetector, "password"),
    (SlackDetector, "api_key"), (GitHubTokenDetector, "api_key"), (GitLabTokenDetector, "api_key"),
    (OpenAIDetector, "api_key"), (StripeDetector, "api_key"), (ArtifactoryDetector, "api_key"),
    (AzureStorageKeyDetector, "api_key"), (CloudantDetector, "api_key"), (DiscordBotTokenDetector, "api_key"),
    (IbmCloudIamDetector, "api_key"), (IbmCosHmacDetector, "api_key"), (MailchimpDetector, "api_key"),
    (NpmDetector, "api_key"), (PypiTokenDetector, "api_key"), (SendGridDetector, "api_key"),
    (SoftlayerDetector, "api_key"), (SquareOAuthDetector, "api_key"), (TelegramBotTokenDetector, "api_key"),
    (TwilioKeyDetector, "api_key")]]


_PRIVATE_KEY_PLUGIN = PrivateKeyDetector()


# every value those plugins find is a run of 20 or more characters without a space, or sits in a URL: texts
# with neither (most chat turns) skip them: detection then costs about what it did without them
_LONG_RUN = re.compile(r"\S{20,}")


_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-=.+/")


# a PEM/OpenSSH/PGP private key block: from its BEGIN line (dashes optional: OCR drops them) to its END line,
# or to the end of the text when the block is cut off (a screenshot, a truncated paste)
_PRIVATE_KEY = re.compile(r"(?:-{2,}\s*)?BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?(?:\s*-{2,})?"
                          r"(?:.*?END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?(?:\s*-{2,})?|.*\Z)"
                          r"|PuTTY-User-Key-File-\d.*\Z", re.DOTALL)


# a passphrase: letters-only words after a password label, up to the end of the sentence
_PASSPHRASE = re.compile(r"(?i)(?<![\w-])(?:password|passwd|passcode|passphrase|passwort|kennwort|pwd|pw)"
                         r"(?:\s*[:=]\s*|\s+(?:is|ist|lautet)\s+)[\"']?"
                         r"(?P<v>[^\W\d_]+(?:[ \t]+[^\W\d_]+){0,7})(?=[\"']?[ \t]*(?:[.!?;,](?!\S)|\n|\Z))")


# words that say something about a password rather than being one ("the password is required")
_NOT_A_PASSWORD = frozenset("""required incorrect correct wrong invalid valid expired short long weak strong secure
    insecure empty blank missing hidden changed unchanged reset set saved stored encrypted hashed ok okay fine good
    bad right case sensitive needed mandatory optional unknown forgotten new old same different here there below
    above attached enclosed following daily weekly monthly yearly always never often usually updated protected
    private secret public shared known unique complex simple easy hard safe unsafe masked visible readable true
    false none null undefined changeme pending ready gone lost compromised leaked ungültig falsch richtig erforderlich
    leer geändert""".split())


_FUNCTION_WORDS = frozenset("""a an the and or but nor so yet of to in on at by for with from into onto about as is
    are was were be been being am do does did has have had not no too very still now also just only then than that
    this these those it its my your our their his her we you they he she i me us them what which who when where why
    how all any each every some more most less least much many such own same again der die das und oder ist nicht
    sehr noch schon""".split())


def _passphrase(words: str) -> bool:
    """One word that is not a word about passwords, or three to eight words none of which is a function word
    and not all about passwords ("correct horse battery staple")."""
    low = words.lower().split()
    if len(low) == 1:
        return low[0] not in _NOT_A_PASSWORD and low[0] not in _FUNCTION_WORDS
    return (len(low) >= 3 and not any(w in _FUNCTION_WORDS for w in low)
            and not all(w in _NOT_A_PASSWORD for w in low))


def clear_memo() -> None:
    """Forget the findings kept per (text, region) (``_detect``'s memo): a benchmark's cold run."""
    _detect.cache_clear()


@lru_cache(maxsize=DETECT_CACHE_SIZE)
def _detect(text: str, phone_region: str) -> tuple[Finding, ...]:
    found: list[Finding] = []
    # placeholders already in the text (a redacted window title perceived again) are not searched
    taken = [(m.start(), m.end()) for m in PLACEHOLDER.finditer(text)]

    def add(entry_type: str, start: int, end: int, trailing: str = _TRAILING) -> None:
        secret = text[start:end]
        stripped = secret.rstrip(trailing)
        end -= len(secret) - len(stripped)
        if (stripped and _valid(entry_type, stripped) and not any(a < end and start < b for a, b in taken)
                and not any(f.start < end and start < f.end for f in found)):
            found.append(Finding(entry_type, start, end, stripped, SENSITIVITY[entry_type]))

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
                add(entry_type, m.start(name), m.end(name), trailing=_TRAILING.replace("!", "").replace("?", "")
                    if name == "v1" else _TRAILING)
            else:
                add(entry_type, m.start(group), m.end(group))
    if _DIGIT_RUN.search(text):
        for m in phonenumbers.PhoneNumberMatcher(text, phone_region, leniency=phonenumbers.Leniency.VALID):
            if _phone_shaped(m.raw_string, text[max(0, m.start - 24):m.start]):
                add("phone_number", m.start, m.end)
    return tuple(sorted(found, key=lambda f: f.start))
