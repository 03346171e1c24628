"""The extractor interface: a batch of observations in, drafts of typed memories out (``schemas.extraction``).

An extractor is pure with respect to the stores: it reads the texts it is given and returns drafts whose
``sources`` index that list; consolidation (``workers.memory.typed``) turns them into memories with provenance and
applies the memory dynamics (``workers.memory.dynamics``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, datetime

from engram.schemas.errors import ModelError
from engram.schemas.extraction import Extraction
from engram.workers.text.sentences import sentences, sentences_without_prefix

#: Speakers that are the user themselves (LongMemEval's "user" role, a chat app's "me").
USER_SPEAKERS = {"user", "me", "i"}


class ExtractionFailed(ModelError, RuntimeError):
    """An extractor could not produce valid drafts (endpoint down, an answer that does not validate)."""


@dataclass(frozen=True)
class Seen:
    """One observation as an extractor reads it: its (already redacted) text and where it came from.
    ``about_user``: its first person is the memory's user (the user's own chat turns)."""

    text: str
    kind: str
    captured_at: datetime
    speaker: str | None = None
    app: str | None = None
    window: str | None = None
    message_id: str | None = None
    about_user: bool = False

    @classmethod
    def from_payload(cls, payload: dict, user_id: str) -> Seen:
        """From an observation's Qdrant payload."""
        speaker = payload.get("speaker")
        return cls(
            text=payload.get("text") or "",
            kind=payload.get("kind") or "text",
            captured_at=datetime.fromtimestamp(payload["start_ts"], UTC),
            speaker=speaker,
            app=payload.get("app"),
            window=payload.get("window"),
            message_id=payload.get("message_id"),
            about_user=bool(speaker) and speaker.strip().lower() in {*USER_SPEAKERS, user_id.lower()},
        )

    def own_text(self) -> str:
        """The text without a chat message's ``speaker:`` prefix."""
        if self.speaker and self.text.startswith(f"{self.speaker}:"):
            return self.text[len(self.speaker) + 1 :].strip()
        return self.text

    def own_sentences(self) -> list[str]:
        """``sentences(own_text())``, read off the split of the whole text that the embedding stage made and
        kept (``text.sentences.sentences_without_prefix``): a turn is split by syntok once per process."""
        return sentences_without_prefix(self.text, f"{self.speaker}:") if self.speaker else sentences(self.text)


class Extractor(ABC):
    """Finds semantic, procedural, resource and core drafts in observations (MIRIX's memory types)."""

    name: str

    @abstractmethod
    def extract(self, seen: list[Seen], user_id: str) -> Extraction:
        """Drafts found in ``seen`` (sources index ``seen``). Raises ExtractionFailed with a one-line reason."""
