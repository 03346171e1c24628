"""Model providers: one small base (``Model``), one registry, one locked per-process cache.

``get_model(task)`` chooses the provider for a task from settings in one explicit ``match``.
"""

from __future__ import annotations

from schemas.settings import Settings
from workers.models.asr import WhisperAsr
from workers.models.base import Model, ModelUnavailable, cached
from workers.models.embeddings import EmbeddingCache, MiniLMEmbedder, embed_cached
from workers.models.ocr import RapidOcr


def get_model(task: str, settings: Settings) -> Model:
    """The process's model for ``task`` (``embedding``, ``ocr`` or ``asr``). Raises ValueError otherwise."""
    m = settings.models
    match task:
        case "embedding":
            return cached(MiniLMEmbedder, m.embedding_model, device=m.device)
        case "ocr":
            return cached(RapidOcr, "pp-ocr")
        case "asr":
            device = m.device
            compute = m.asr_compute_type if device == "cpu" else "float16"
            return cached(WhisperAsr, m.asr_model, device=device, compute_type=compute, cpu_threads=m.cpu_threads)
        case _:
            raise ValueError(f"unknown model task {task!r}")


__all__ = ["EmbeddingCache", "MiniLMEmbedder", "Model", "ModelUnavailable", "RapidOcr", "WhisperAsr",
           "embed_cached", "get_model"]
