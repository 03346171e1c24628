"""The knowledge vault (MIRIX's sixth memory type): secrets found in content, redacted before anything is
stored and kept encrypted.

Runs in ``perceive`` (DESIGN.md "Contracts"): every text an observation carries (its text, transcript,
caption, window title, OCR lines, ASR words and the chat context indexed with it) is searched for secrets;
each one is replaced by a placeholder ``[vault:<entry id> <entry type>]`` and written, Fernet-encrypted
(``cryptography``), to the object store at ``vault/<tenant>/<entry id>.json`` (a ``KnowledgeVaultEntry``).
So no observation, embedding, memory, log line or search result holds the secret; consolidation indexes the
entries its observations point to into the ``knowledge_vault`` collection (caption only, plus the
ciphertext), and only ``reveal`` (``engram vault reveal ID``) decrypts one.

Detection favours precision. Tokens with a known shape come from detect-secrets' (Yelp) regex plugins
(``analyze_string`` of each plugin class: AWS, GitHub, GitLab, Slack tokens and webhooks, Stripe, OpenAI,
JWTs, URL credentials and others; its entropy and keyword plugins are left out as too noisy for prose) and
our own patterns (``sk-``/``AIza`` tokens, bearer tokens, values after "api key:" labels); PEM/OpenSSH
private keys are redacted as whole blocks (BEGIN to END, or to the end of the text when cut off);
passwords after a label in English or German ("password:", "pw:", "Passwort:", "the wifi password is X",
a passphrase "password is correct horse battery staple" up to the sentence end); card numbers that pass
Luhn, IBANs that pass mod 97 (``python-stdnum``), phone numbers valid for their region (``phonenumbers``,
Google's libphonenumber), e-mail addresses and street addresses with a street-type word. The whole value
is one secret: a password keeps its trailing ``!``, a passphrase all its words.

Keys: ``ENGRAM_VAULT_KEY`` (Fernet keys, comma-separated for rotation: ``MultiFernet``). When it is unset
the embedded default generates one into ``<data_dir>/vault.key`` (mode 0600) on the first secret, so a
laptop works out of the box; the distributed mode has no shared place for a generated key, so an event
holding a secret fails there with ``VaultKeyMissing`` and the reason (set the key, publish again). Entry
ids are an HMAC of the secret under the key, so the same secret seen twice is one entry and an id does not
let anyone test guesses of a short secret (a PIN, a phone number) without the key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING

import phonenumbers
import structlog
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
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

from engram.schemas.events import MediaEvent
from engram.schemas.memories import KnowledgeVaultEntry, MemoryType, Provenance
from engram.schemas.observations import Observation, OcrLine, WordTiming
from engram.schemas.settings import Settings
from engram.workers.errors import EngramError
from engram.workers.memory.points import memory_points
from engram.workers.metrics import MEMORIES_WRITTEN
from engram.workers.stores.objects import ObjectNotFound

if TYPE_CHECKING:  # the API (the server extra, no pipeline) redacts events with this module too
    from engram.workers.runtime import Runtime

log = structlog.get_logger(__name__)
PLACEHOLDER = re.compile(r"\[vault:([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}) ([a-z_]+)\]")


class VaultError(EngramError, RuntimeError):
    """A vault operation failed (missing entry, undecryptable secret, bad key)."""


class VaultKeyMissing(VaultError):
    """A secret was found but no vault key is configured (distributed mode)."""


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


# keys ------------------------------------------------------------------------------------------------


def _keys(settings: Settings) -> list[bytes]:
    if settings.vault_key is not None:
        return [k.strip().encode() for k in settings.vault_key.get_secret_value().split(",") if k.strip()]
    if not settings.embedded:
        raise VaultKeyMissing("a secret was found but ENGRAM_VAULT_KEY is not set: set the same Fernet key on "
                              "every worker (`engram vault keygen` prints one) and publish the event again")
    path = settings.data_dir / "vault.key"
    if not path.exists():
        at_rest = settings.data_dir / "objects" / "vault"  # the embedded object store's vault/<tenant>/ entries
        if not settings.s3_endpoint and at_rest.is_dir() and any(at_rest.rglob("*.json")):
            raise VaultKeyMissing(f"the vault key {path} is missing but entries at rest under {at_rest} were "
                                  "encrypted with it: restore the file (or set ENGRAM_VAULT_KEY to that key); a new "
                                  "key could not read them")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process made it first
        else:
            with os.fdopen(fd, "wb") as fh:
                fh.write(Fernet.generate_key())
            log.warning("vault key generated; set ENGRAM_VAULT_KEY to keep it elsewhere", path=str(path))
    return [path.read_bytes().strip()]


def fernet(settings: Settings) -> MultiFernet:
    """The vault's cipher: ``MultiFernet`` of the configured keys (the first encrypts). Raises
    VaultKeyMissing (distributed mode without a key) or VaultError (a malformed key)."""
    try:
        return MultiFernet([Fernet(k) for k in _keys(settings)])
    except (ValueError, TypeError) as exc:
        raise VaultError("ENGRAM_VAULT_KEY is not a Fernet key (32 url-safe base64-encoded bytes)") from exc


def entry_id(key: bytes, tenant_id: str, user_id: str, entry_type: str, secret: str) -> uuid.UUID:
    """The id of the vault entry of ``secret``: HMAC-SHA256 under the vault key, as a UUID."""
    digest = hmac.new(base64.urlsafe_b64decode(key), f"{tenant_id}\x1f{user_id}\x1f{entry_type}\x1f{secret}".encode(),
                      hashlib.sha256).digest()
    return uuid.UUID(bytes=digest[:16], version=5)


def object_key(tenant_id: str, entry: uuid.UUID | str) -> str:
    """``vault/<tenant>/<entry id>.json``: where an entry is kept at rest."""
    return f"vault/{tenant_id}/{entry}.json"


# redaction -------------------------------------------------------------------------------------------


class Redactor:
    """Redacts the observations of one perceive task and collects their vault entries.

    Owned by the task that made it (not shared between threads); ``flush`` writes the entries."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._fernet: MultiFernet | None = None
        self._key: bytes = b""
        self.entries: dict[uuid.UUID, KnowledgeVaultEntry] = {}

    def _cipher(self) -> MultiFernet:
        if self._fernet is None:
            self._fernet = fernet(self.rt.settings)
            self._key = _keys(self.rt.settings)[0]
        return self._fernet

    def text(self, text: str | None, obs: Observation | MediaEvent, own: bool = True) -> str | None:
        """``text`` with every secret replaced by its placeholder; entries recorded for ``obs`` (an observation,
        or the event whose title or metadata it is; as a source only when ``own``: a neighbouring turn's text
        indexed as context is not where the secret was seen)."""
        if not text:
            return text
        findings = detect(text, self.rt.settings.vault_phone_region)
        for f in reversed(findings):
            text = text[:f.start] + self._placeholder(f, obs, own) + text[f.end:]
        return text

    def words(self, words: list[WordTiming], obs: Observation) -> list[WordTiming]:
        """ASR words with each secret's words merged into one word holding its placeholder (first start,
        last end)."""
        if not words:
            return words
        spans, pos = [], 0
        for w in words:
            spans.append((pos, pos + len(w.word)))
            pos += len(w.word) + 1
        findings = detect(" ".join(w.word for w in words), self.rt.settings.vault_phone_region)
        if not findings:
            return words
        out, skip = [], set()
        for f in findings:
            hit = [i for i, (a, b) in enumerate(spans) if a < f.end and f.start < b]
            if hit:
                first, last = words[hit[0]], words[hit[-1]]
                out.append((hit[0], first.model_copy(update={"word": self._placeholder(f, obs), "end_s": last.end_s})))
                skip.update(hit)
        kept = [(i, w) for i, w in enumerate(words) if i not in skip]
        return [w for _, w in sorted([*kept, *out], key=lambda x: x[0])]

    def _placeholder(self, f: Finding, obs: Observation | MediaEvent, own: bool = True) -> str:
        cipher = self._cipher()
        eid = entry_id(self._key, obs.tenant_id, obs.user_id, f.entry_type, f.secret)
        entry = self.entries.get(eid)
        if entry is None or (own and not entry.provenance.event_ids):  # described by where it was seen
            now = datetime.now(UTC)
            where = _where(obs) if own else "a neighbouring chat message"
            entry = self.entries[eid] = KnowledgeVaultEntry(
                id=eid, tenant_id=obs.tenant_id, user_id=obs.user_id, created_at=now, updated_at=now,
                entry_type=f.entry_type, sensitivity=f.sensitivity, source=where,
                caption=f"{LABELS[f.entry_type]}{_hint(f)} seen in {where}",
                secret_ciphertext=cipher.encrypt(f.secret.encode()).decode("ascii"))
        if own:
            _add_source(entry.provenance, obs)
        return f"[vault:{eid} {f.entry_type}]"

    def observation(self, obs: Observation) -> Observation:
        """A copy of ``obs`` with no secret left in any of its texts."""
        if not self.rt.settings.vault_redact:
            return obs
        return obs.model_copy(update={
            "text": self.text(obs.text, obs) or "", "transcript": self.text(obs.transcript, obs),
            "caption": self.text(obs.caption, obs), "window": self.text(obs.window, obs),
            "app": self.text(obs.app, obs), "ocr_lines": self.lines(obs.ocr_lines, obs),
            "words": self.words(obs.words, obs),
            "context_before": [self.text(t, obs, own=False) for t in obs.context_before],
            "context_after": [self.text(t, obs, own=False) for t in obs.context_after]})

    def lines(self, lines: list[OcrLine], obs: Observation) -> list[OcrLine]:
        """OCR lines with every secret replaced; a private key block spread over several lines (BEGIN line,
        body, END line) is found in the lines joined and each of its lines becomes the block's placeholder."""
        if not lines:
            return lines
        texts = [ln.text for ln in lines]
        joined = "\n".join(texts)
        bounds, pos = [], 0
        for t in texts:
            bounds.append((pos, pos + len(t)))
            pos += len(t) + 1
        for f in detect(joined, self.rt.settings.vault_phone_region):
            if f.entry_type == "private_key":
                holder = self._placeholder(f, obs)
                texts = [holder if a < f.end and f.start < b else t for t, (a, b) in zip(texts, bounds, strict=True)]
        return [ln.model_copy(update={"text": self.text(t, obs)}) for ln, t in zip(lines, texts, strict=True)]

    def event(self, event: MediaEvent) -> MediaEvent:
        """A copy of ``event`` with no secret left in its app name, window title or metadata values (what the
        ledger, the broker message and every log line of it hold)."""
        if not self.rt.settings.vault_redact:
            return event
        return event.model_copy(update={
            "app": self.text(event.app, event), "window": self.text(event.window, event),
            "metadata": {k: self.text(v, event) or v for k, v in event.metadata.items()}})

    def flush(self) -> int:
        """Write the collected entries (merged with what the store already holds for them); returns how many."""
        for eid, entry in self.entries.items():
            key = object_key(entry.tenant_id, eid)
            try:
                old = KnowledgeVaultEntry.model_validate_json(self.rt.objects.get_bytes(key))
            except ObjectNotFound:
                old = None
            if old is not None:
                if not entry.provenance.event_ids:
                    continue  # seen only as a neighbour's context: what is stored already says more
                if old.provenance.event_ids:
                    entry.caption, entry.source = old.caption, old.source  # described where first seen
                entry.provenance = old.provenance.union(entry.provenance)
                entry.created_at = old.created_at
            self.rt.objects.put_bytes(key, entry.model_dump_json().encode(), "application/json")
        if self.entries:
            log.info("secrets redacted", vault_entries=len(self.entries),
                     types=sorted({e.entry_type for e in self.entries.values()}))
        return len(self.entries)


def redact_observations(rt: Runtime, observations: list[Observation]) -> list[Observation]:
    """Perceive's last step: the observations with every secret replaced by a vault placeholder, after the
    vault entries are written. Raises VaultKeyMissing (distributed mode, no key) when a secret is found."""
    redactor = Redactor(rt)
    out = [redactor.observation(o) for o in observations]
    redactor.flush()
    return out


def redact_event(rt: Runtime, event: MediaEvent) -> MediaEvent:
    """Before an event is recorded or sent (``api.local.publish_file``, ``POST /v1/events``): ``event`` with its
    app name, window title and metadata values redacted, after their vault entries are written. ``rt`` is
    anything with ``settings`` and ``objects``. Raises VaultKeyMissing (distributed mode, no key) when a
    secret is found."""
    redactor = Redactor(rt)
    out = redactor.event(event)
    redactor.flush()
    return out


def seal(settings: Settings, data: bytes) -> bytes:
    """``data`` encrypted with the vault key (Fernet), for caches of raw text such as the OCR cache
    (``workers.media.vision``). Raises VaultKeyMissing or VaultError as ``fernet`` does."""
    return fernet(settings).encrypt(data)


def unseal(settings: Settings, token: bytes) -> bytes:
    """What ``seal`` encrypted. Raises VaultError when ``token`` is not one (a cache entry written before it
    was sealed, or under a key no longer configured)."""
    try:
        return fernet(settings).decrypt(token)
    except InvalidToken as exc:
        raise VaultError("not sealed with the configured vault key") from exc


def _where(obs: Observation | MediaEvent) -> str:
    if isinstance(obs, MediaEvent):
        return "an event's window title or metadata"
    if obs.message_id:
        return f"chat message {obs.message_id}" + (f" by {obs.speaker}" if obs.speaker else "")
    return {"screenshot": "a screenshot", "audio": "audio", "clip": "a video clip"}.get(obs.kind.value, obs.kind.value)


def _hint(f: Finding) -> str:
    """The last digits of a card or account number (as receipts show them), nothing of other secrets."""
    if f.entry_type in ("credit_card", "iban"):
        return " ending " + re.sub(r"\W", "", f.secret)[-4:]
    return ""


def _add_source(prov: Provenance, obs: Observation | MediaEvent) -> None:
    def add(values: list, value) -> None:
        if value and value not in values:
            values.append(value)
    add(prov.event_ids, obs.event_id)
    if isinstance(obs, Observation):
        add(prov.observation_ids, obs.id)
        add(prov.message_ids, obs.message_id)
        add(prov.session_ids, obs.session_id)
    add(prov.object_keys, obs.object_key)
    add(prov.source_names, obs.source_name)
    prov.start = min(filter(None, [prov.start, obs.captured_at]))
    prov.end = max(filter(None, [prov.end, obs.captured_at]))


# reading ---------------------------------------------------------------------------------------------


def get_entry(rt: Runtime, tenant_id: str, entry: uuid.UUID | str) -> KnowledgeVaultEntry:
    """The stored entry (with its ciphertext). Raises VaultError if the tenant has no such entry."""
    try:
        return KnowledgeVaultEntry.model_validate_json(rt.objects.get_bytes(object_key(tenant_id, entry)))
    except (ObjectNotFound, ValueError) as exc:
        raise VaultError(f"no vault entry {entry} for tenant {tenant_id!r}") from exc


def reveal(rt: Runtime, tenant_id: str, entry: uuid.UUID | str) -> str:
    """The decrypted secret of one entry: the only way to read a secret back (logged, without the value).
    Raises VaultError (no such entry, or a key that cannot decrypt it)."""
    stored = get_entry(rt, tenant_id, entry)
    try:
        secret = fernet(rt.settings).decrypt(stored.secret_ciphertext.encode()).decode()
    except InvalidToken as exc:
        raise VaultError(f"vault entry {entry} cannot be decrypted with the configured ENGRAM_VAULT_KEY") from exc
    log.info("vault entry revealed", tenant=tenant_id, entry_id=str(entry), entry_type=stored.entry_type)
    return secret


def list_entries(rt: Runtime, tenant_id: str, user_id: str | None = None) -> list[KnowledgeVaultEntry]:
    """The tenant's entries at rest (with their ciphertexts; nothing is decrypted), optionally only one user's,
    sorted by id. An entry that does not parse is logged and skipped."""
    out = []
    for key in sorted(rt.objects.keys(f"vault/{tenant_id}/")):
        try:
            entry = KnowledgeVaultEntry.model_validate_json(rt.objects.get_bytes(key))
        except (ObjectNotFound, ValueError) as exc:
            log.warning("vault entry unreadable", tenant=tenant_id, key=key, reason=str(exc)[:200])
            continue
        if entry.tenant_id == tenant_id and (user_id is None or entry.user_id == user_id):
            out.append(entry)
    return out


def delete_entries(rt: Runtime, tenant_id: str, entries: list[uuid.UUID | str]) -> list[str]:
    """Delete the tenant's entries at rest by id (the right to erasure; ``workers.memory.records.forget_user``);
    ids with no entry are skipped. Returns the object keys deleted. The ``knowledge_vault`` points that index
    them are the caller's to delete."""
    keys = [k for e in dict.fromkeys(str(e) for e in entries) if rt.objects.exists(k := object_key(tenant_id, e))]
    for key in keys:
        rt.objects.delete(key)
    if keys:
        log.info("vault entries deleted", tenant=tenant_id, count=len(keys))
    return keys


def referenced_entries(texts: list[str]) -> list[uuid.UUID]:
    """Entry ids of the placeholders in ``texts``, first seen first."""
    return list(dict.fromkeys(uuid.UUID(m.group(1)) for t in texts for m in PLACEHOLDER.finditer(t or "")))


def index_entries(rt: Runtime, tenant_id: str, texts: list[str]) -> int:
    """Consolidation: upsert the entries that ``texts`` point to into the ``knowledge_vault`` collection
    (embedding and BM25 of the caption; the payload holds the caption and the ciphertext, never the secret).
    Entries missing from the object store are logged and skipped. Returns how many were indexed."""
    entries = []
    for eid in referenced_entries(texts):
        try:
            entries.append(get_entry(rt, tenant_id, eid))
        except VaultError as exc:
            log.warning("vault entry missing", tenant=tenant_id, entry_id=str(eid), reason=str(exc))
    for e in entries:  # a memory point needs a time span
        e.provenance.start = e.provenance.start or e.created_at
        e.provenance.end = e.provenance.end or e.provenance.start
    fields = [{"kinds": [], "device_ids": [], "apps": [], "entity_ids": []} for _ in entries]
    rt.vectors.upsert(MemoryType.knowledge_vault.value, memory_points(rt, entries, fields))
    MEMORIES_WRITTEN.labels(memory_type=MemoryType.knowledge_vault.value).inc(len(entries))
    return len(entries)
