"""Model providers: one small base (``Model``), one registry, one locked per-process cache.

``get_model(task)`` chooses the provider for a task from settings in one explicit ``match``.
"""

from __future__ import annotations

from engram.schemas.settings import Settings
from engram.workers.models.asr import WhisperAsr
from engram.workers.models.base import Model, ModelUnavailable, cached
from engram.workers.models.embeddings import EmbeddingCache, MiniLMEmbedder, embed_cached
from engram.workers.models.faces import DlibFaces
from engram.workers.models.llm import ChatLlm, GeminiChat, LlmUnavailable, OpenAiChat
from engram.workers.models.ocr import RapidOcr
from engram.workers.models.vlm import CaptionUnavailable, GeminiCaptioner, OpenAiCaptioner
from engram.workers.models.voices import ResemblyzerVoice


def _endpoint_options(settings: Settings, prefix: str) -> dict:
    """Options of a remote model endpoint from the ``models.<prefix>_*`` settings (``vlm`` or ``llm``)."""
    get = lambda name: getattr(settings.models, f"{prefix}_{name}")  # noqa: E731
    key = get("api_key")
    return dict(base_url=get("base_url"), timeout=get("timeout_seconds"), max_retries=get("max_retries"),
                max_tokens=get("max_tokens"), api_key=key.get_secret_value() if key else None)


def get_model(task: str, settings: Settings) -> Model:
    """The process's model for ``task`` (``embedding``, ``ocr``, ``asr``, ``voice``, ``faces``, ``caption`` or
    ``llm``). Raises ValueError for another task, ModelUnavailable for ``caption`` / ``llm`` when no VLM / LLM
    provider is configured."""
    m = settings.models
    match task:
        case "embedding":
            return cached(MiniLMEmbedder, m.embedding_model, device=m.device, runtime=m.embedding_runtime,
                          onnx_dir=str(m.cache_dir))
        case "ocr":
            return cached(RapidOcr, "pp-ocr", threads=m.cpu_threads)  # 0: one thread (see models.ocr)
        case "asr":
            device = m.device
            compute = m.asr_compute_type if device == "cpu" else "float16"
            return cached(WhisperAsr, m.asr_model, device=device, compute_type=compute, cpu_threads=m.cpu_threads or 1,
                          cache_dir=str(m.cache_dir), batch_size=m.asr_batch_size)
        case "voice":
            return cached(ResemblyzerVoice, "resemblyzer", device=m.device, threads=m.cpu_threads)
        case "faces":
            return cached(DlibFaces, "dlib-resnet-v1", max_side=m.face_max_side, upsample=m.face_upsample,
                          cnn_max_side=m.face_cnn_max_side, jitters=m.face_jitters)
        case "caption":
            options = _endpoint_options(settings, "vlm")
            match m.vlm_provider:
                case "openai":
                    return cached(OpenAiCaptioner, m.vlm_model, **options)
                case "gemini":
                    return cached(GeminiCaptioner, m.vlm_model, **options)
            raise ModelUnavailable("no VLM configured (ENGRAM_MODELS__VLM_PROVIDER is 'none')")
        case "llm":
            options = _endpoint_options(settings, "llm")
            match m.llm_provider:
                case "openai":
                    return cached(OpenAiChat, m.llm_model, **options)
                case "gemini":
                    return cached(GeminiChat, m.llm_model, **options)
            raise ModelUnavailable("no LLM configured (ENGRAM_MODELS__LLM_PROVIDER is 'none')")
        case _:
            raise ValueError(f"unknown model task {task!r}")


__all__ = ["CaptionUnavailable", "ChatLlm", "DlibFaces", "EmbeddingCache", "GeminiCaptioner", "GeminiChat",
           "LlmUnavailable", "MiniLMEmbedder", "Model", "ModelUnavailable", "OpenAiCaptioner", "OpenAiChat",
           "RapidOcr", "ResemblyzerVoice", "WhisperAsr", "embed_cached", "get_model"]
