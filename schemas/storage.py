"""What engram keeps on disk and in the object store, by kind (``engram status``, the web app's Activity page), and
what a run of retention removed (``engram retention``, beat's ``retention`` entry). Sizes are bytes."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from engram.schemas.events import MediaKind


class KindBytes(BaseModel):
    """Objects of one kind: how many, and their bytes."""

    count: int = Field(0, ge=0, description="Objects.")
    bytes: int = Field(0, ge=0, description="Their bytes.")


class StorageUse(BaseModel):
    """Bytes kept, by what they are. ``originals`` are the published media and what ingest cut from them (audio
    chunks, clip keyframes and audio tracks) per kind: what retention may remove. The objects (originals,
    thumbnails, caches, vault) are the tenant's own; ``store``, ``ledger`` and ``embedding_cache`` are shared by
    every tenant of the data dir (null where they are not files engram holds: a Qdrant server, the Redis ledger)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "tenant_id": "acme",
                    "originals": {
                        "screenshot": {"count": 1680, "bytes": 412_000_000},
                        "audio": {"count": 12, "bytes": 9_300_000},
                    },
                    "thumbnails": {"count": 1680, "bytes": 13_400_000},
                    "ocr_cache": {"count": 1650, "bytes": 2_100_000},
                    "vault": {"count": 2, "bytes": 900},
                    "other_objects": {"count": 0, "bytes": 0},
                    "store": None,
                    "ledger": None,
                    "embedding_cache": 48_000_000,
                    "other_files": 4096,
                    "total": 484_804_996,
                    "capped_total": 436_800_900,
                    "cap_bytes": None,
                    "retention_days": {"screenshot": 30.0},
                    "measured_at": "2024-05-02T09:30:07Z",
                },
            ]
        }
    )

    tenant_id: str | None = Field(None, description="Whose objects are counted; null: every tenant's.")
    originals: dict[MediaKind, KindBytes] = Field(
        default_factory=dict, description="Originals still stored, per kind (screenshot, audio, clip, text)."
    )
    thumbnails: KindBytes = Field(default_factory=KindBytes, description="Thumbnails made at ingest (WebP).")
    ocr_cache: KindBytes = Field(default_factory=KindBytes, description="OCR results kept by content hash.")
    vault: KindBytes = Field(default_factory=KindBytes, description="Knowledge-vault entries (encrypted).")
    other_objects: KindBytes = Field(default_factory=KindBytes, description="Any other object (staged uploads).")
    store: int | None = Field(
        None,
        description="The embedded vector store's files (observations, memories, entities); null on a Qdrant server.",
    )
    ledger: int | None = Field(None, description="The SQLite ledger and its write-ahead log; null with Redis.")
    embedding_cache: int | None = Field(None, description="The embedding cache (SQLite) under the data dir.")
    other_files: int = Field(0, ge=0, description="Other files under the data dir (the vault key, locks).")
    total: int = Field(0, ge=0, description="The sum of everything above.")
    capped_total: int = Field(
        0,
        ge=0,
        description="What ENGRAM_STORAGE_CAP_BYTES is held against: the whole data "
        "dir on the embedded default, the whole object store in the distributed mode.",
    )
    cap_bytes: int | None = Field(None, description="ENGRAM_STORAGE_CAP_BYTES; null: no cap.")
    retention_days: dict[MediaKind, float] = Field(
        default_factory=dict, description="ENGRAM_RETENTION_<KIND>_DAYS of the kinds that have one."
    )
    measured_at: AwareDatetime = Field(description="When it was measured (UTC).")


class RemovalReason(StrEnum):
    """Why retention removed an original: its kind's age limit, or the storage cap (oldest first)."""

    age = "age"
    cap = "cap"


class RemovedOriginal(BaseModel):
    """One original retention removed (or would remove, in a dry run)."""

    key: str = Field(description="Its object key.")
    kind: MediaKind | None = Field(description="Its kind; null when no event names it any more.")
    bytes: int = Field(ge=0, description="Its size.")
    stored_at: datetime = Field(description="When engram stored it (the object's time, UTC).")
    reason: RemovalReason = Field(description="age or cap.")


class RetentionReport(BaseModel):
    """What one run of retention did (or, with ``dry_run``, would do). Nothing but originals is ever removed."""

    dry_run: bool = Field(description="True: nothing was changed.")
    at: AwareDatetime = Field(description="The run's reference time (UTC); ages are counted from it.")
    removed: dict[MediaKind, KindBytes] = Field(
        default_factory=dict, description="Originals removed per kind (objects without a kind are left out here)."
    )
    by_reason: dict[RemovalReason, KindBytes] = Field(default_factory=dict, description="The same, per reason.")
    items: list[RemovedOriginal] = Field(
        default_factory=list, description="The originals removed, oldest first (the first ITEMS_SHOWN)."
    )
    items_total: int = Field(0, ge=0, description="How many originals were removed in all.")
    observations_marked: int = Field(
        0, ge=0, description="Observations now saying their original was removed (payload original_removed_at)."
    )
    thumbnails_made: int = Field(0, ge=0, description="Thumbnails made before their picture was removed.")
    kept_unfinished: int = Field(
        0, ge=0, description="Originals kept because their event is still queued or processing."
    )
    capped_total_before: int = Field(0, ge=0, description="Bytes held against the cap before the run.")
    capped_total_after: int = Field(0, ge=0, description="... and after it (as planned, in a dry run).")
    cap_bytes: int | None = Field(None, description="ENGRAM_STORAGE_CAP_BYTES; null: no cap.")
    over_cap: bool = Field(
        False,
        description="Still over the cap after removing every original it could: the rest is text, "
        "vectors, memories and thumbnails, which retention never removes.",
    )
    seconds: float = Field(0.0, ge=0, description="How long the run took.")


#: Removed originals listed one by one in a ``RetentionReport`` (the totals count them all).
ITEMS_SHOWN = 1000
