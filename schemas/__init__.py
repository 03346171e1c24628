"""engram's shared vocabulary: pydantic v2 models for events, observations, memories, conversations,
search and settings. No I/O happens in this package."""

from engram.schemas.conversations import Attachment, ConversationMessage
from engram.schemas.events import EventStatus, LedgerRecord, MediaEvent, MediaKind
from engram.schemas.memories import (
    MEMORY_MODELS,
    MEMORY_TYPES,
    CoreMemory,
    EpisodicMemory,
    KnowledgeVaultEntry,
    Memory,
    MemoryBase,
    MemoryType,
    ProceduralMemory,
    Provenance,
    ResourceMemory,
    SemanticMemory,
)
from engram.schemas.observations import EmbeddedObservation, FaceDetection, Observation, OcrLine, WordTiming
from engram.schemas.search import SearchHit, SearchRequest, SearchResponse
from engram.schemas.settings import ModelSettings, Settings, get_settings

__all__ = [
    "Attachment",
    "ConversationMessage",
    "EventStatus",
    "LedgerRecord",
    "MediaEvent",
    "MediaKind",
    "MEMORY_MODELS",
    "MEMORY_TYPES",
    "CoreMemory",
    "EpisodicMemory",
    "KnowledgeVaultEntry",
    "Memory",
    "MemoryBase",
    "MemoryType",
    "ProceduralMemory",
    "Provenance",
    "ResourceMemory",
    "SemanticMemory",
    "EmbeddedObservation",
    "FaceDetection",
    "Observation",
    "OcrLine",
    "WordTiming",
    "SearchHit",
    "SearchRequest",
    "SearchResponse",
    "ModelSettings",
    "Settings",
    "get_settings",
]
