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
What was heard and what OCR split go through the same detection (``text.secrets``): a password, PIN or code
told after a cue ("my bank password is Hunter 2", "the door code is 4,500 and 12"), an utterance's ASR words
redacted as its transcript is (``Redactor.words``), a token wrapped over OCR lines found in the lines joined and
replaced in each line's part (``Redactor.lines``), a token cut short at a known prefix kept as partial.

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
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import structlog
from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from engram.schemas.errors import EngramError
from engram.schemas.events import MediaEvent
from engram.schemas.memories import KnowledgeVaultEntry, Provenance
from engram.schemas.observations import Observation, OcrLine, WordTiming
from engram.schemas.settings import Settings
from engram.workers.stores.objects import ObjectNotFound
from engram.workers.text.secrets import LABELS, PLACEHOLDER, Finding, detect

if TYPE_CHECKING:  # the API (the server extra, no pipeline) redacts events with this module too
    from engram.workers.runtime import Runtime

log = structlog.get_logger(__name__)


class VaultError(EngramError, RuntimeError):
    """A vault operation failed (missing entry, undecryptable secret, bad key)."""


class VaultKeyMissing(VaultError):
    """A secret was found but no vault key is configured (distributed mode)."""


# keys ------------------------------------------------------------------------------------------------


def _keys(settings: Settings) -> list[bytes]:
    if settings.vault_key is not None:
        return [k.strip().encode() for k in settings.vault_key.get_secret_value().split(",") if k.strip()]
    if not settings.embedded:
        raise VaultKeyMissing(
            "a secret was found but ENGRAM_VAULT_KEY is not set: set the same Fernet key on "
            "every worker (`engram vault keygen` prints one) and publish the event again"
        )
    path = settings.data_dir / "vault.key"
    if not path.exists():
        at_rest = settings.data_dir / "objects" / "vault"  # the embedded object store's vault/<tenant>/ entries
        if not settings.s3_endpoint and at_rest.is_dir() and any(at_rest.rglob("*.json")):
            raise VaultKeyMissing(
                f"the vault key {path} is missing but entries at rest under {at_rest} were "
                "encrypted with it: restore the file (or set ENGRAM_VAULT_KEY to that key); a new "
                "key could not read them"
            )
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
    digest = hmac.new(
        base64.urlsafe_b64decode(key), f"{tenant_id}\x1f{user_id}\x1f{entry_type}\x1f{secret}".encode(), hashlib.sha256
    ).digest()
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
            text = text[: f.start] + self._placeholder(f, obs, own) + text[f.end :]
        return text

    def words(self, words: list[WordTiming], obs: Observation, said: str | None = None) -> list[WordTiming]:
        """ASR words with each secret's words merged into one word holding its placeholder (first start,
        last end). The secrets are those of ``said`` (the transcript the words were cut from, so the words are
        redacted as it is: Whisper's "4" ",500" are "4,500" there) when every word is found in it in order; else
        of the words joined by spaces."""
        if not words:
            return words
        spans = _word_spans([w.word for w in words], said) if said else None
        if spans is None:
            said, spans, pos = " ".join(w.word for w in words), [], 0
            for w in words:
                spans.append((pos, pos + len(w.word)))
                pos += len(w.word) + 1
        findings = detect(said, self.rt.settings.vault_phone_region)
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
                id=eid,
                tenant_id=obs.tenant_id,
                user_id=obs.user_id,
                created_at=now,
                updated_at=now,
                entry_type=f.entry_type,
                sensitivity=f.sensitivity,
                source=where,
                caption=f"{LABELS[f.entry_type]}{_hint(f)} seen in {where}",
                secret_ciphertext=cipher.encrypt(f.secret.encode()).decode("ascii"),
            )
        if own:
            _add_source(entry.provenance, obs)
        return f"[vault:{eid} {f.entry_type}]"

    def observation(self, obs: Observation) -> Observation:
        """A copy of ``obs`` with no secret left in any of its texts."""
        if not self.rt.settings.vault_redact:
            return obs
        lines, spread = self._lines(obs.ocr_lines, obs)
        text = obs.text
        for holder, parts in spread.items():  # the text joins the lines too ("\n"; a clip's " | "): one placeholder
            text = re.sub(r"[\s|]*".join(map(re.escape, parts)), lambda _, h=holder: h, text)
        text = self.text(text, obs) or ""
        return obs.model_copy(
            update={
                "text": text,
                "transcript": self.text(obs.transcript, obs),
                "caption": self.text(obs.caption, obs),
                "window": self.text(obs.window, obs),
                "app": self.text(obs.app, obs),
                "ocr_lines": lines,
                "words": self.words(obs.words, obs, obs.transcript),
                "context_before": [self.text(t, obs, own=False) for t in obs.context_before],
                "context_after": [self.text(t, obs, own=False) for t in obs.context_after],
            }
        )

    def lines(self, lines: list[OcrLine], obs: Observation) -> list[OcrLine]:
        """OCR lines with every secret replaced. A secret spread over several lines (a private key block: BEGIN
        line, body, END line; a token wrapped at a window's width) is found in the lines joined, and each line's
        part of it becomes the secret's placeholder."""
        return self._lines(lines, obs)[0]

    def _lines(self, lines: list[OcrLine], obs: Observation) -> tuple[list[OcrLine], dict[str, list[str]]]:
        """``lines`` redacted, and the placeholder of each secret spread over lines with the lines' parts of it:
        ``observation`` replaces them, however the text joins them, by the one placeholder."""
        spread: dict[str, list[str]] = {}
        if not lines:
            return lines, spread
        texts = [ln.text for ln in lines]
        joined = "\n".join(texts)
        bounds, pos = [], 0
        for t in texts:
            bounds.append((pos, pos + len(t)))
            pos += len(t) + 1
        for f in reversed(detect(joined, self.rt.settings.vault_phone_region)):
            touched = [i for i, (a, b) in enumerate(bounds) if a < f.end and f.start < b]
            if len(touched) > 1:
                holder = self._placeholder(f, obs)
                spread[holder] = [joined[max(f.start, a) : min(f.end, b)] for a, b in (bounds[i] for i in touched)]
                for i in touched:
                    a, b = bounds[i]
                    t = texts[i]
                    texts[i] = t[: max(f.start - a, 0)] + holder + t[min(f.end, b) - a :]
        return [ln.model_copy(update={"text": self.text(t, obs)}) for ln, t in zip(lines, texts, strict=True)], spread

    def event(self, event: MediaEvent) -> MediaEvent:
        """A copy of ``event`` with no secret left in its app name, window title or metadata values (what the
        ledger, the broker message and every log line of it hold)."""
        if not self.rt.settings.vault_redact:
            return event
        return event.model_copy(
            update={
                "app": self.text(event.app, event),
                "window": self.text(event.window, event),
                "metadata": {k: self.text(v, event) or v for k, v in event.metadata.items()},
            }
        )

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
            log.info(
                "secrets redacted",
                vault_entries=len(self.entries),
                types=sorted({e.entry_type for e in self.entries.values()}),
            )
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


def _word_spans(words: list[str], said: str) -> list[tuple[int, int]] | None:
    """The span of each word in ``said`` (words found in order, anything between them), or None when one is not
    found (the transcript is not the one the words were cut from)."""
    spans, pos = [], 0
    for w in words:
        at = said.find(w, pos)
        if at < 0 or not w:
            return None
        spans.append((at, at + len(w)))
        pos = at + len(w)
    return spans


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
    if f.partial:  # begins like a known token but is not whole: cut at a window's edge, or misread
        return " (partial: cut off or misread)"
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
    """The decrypted secret of one entry: the only way to read a secret back. Each reveal is audited in the ledger
    before the secret is returned (``Ledger.record_reveal``: the OS user and pid, the time, the entry; never the
    secret; ``engram status`` counts them) and logged without the value. Raises VaultError (no such entry, or a
    key that cannot decrypt it)."""
    import getpass

    stored = get_entry(rt, tenant_id, entry)
    try:
        secret = fernet(rt.settings).decrypt(stored.secret_ciphertext.encode()).decode()
    except InvalidToken as exc:
        raise VaultError(f"vault entry {entry} cannot be decrypted with the configured ENGRAM_VAULT_KEY") from exc
    try:
        who = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's user): its number
        who = str(os.getuid())
    rt.ledger.record_reveal(tenant_id, str(stored.id), who, os.getpid())  # no audit, no secret: it raises first
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
