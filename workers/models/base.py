"""The base of every model provider and the per-process model cache (after Immich's machine-learning service).

A provider is identified by what it is and what it does, Immich's ``(ModelType, ModelTask)`` pair:
``("embedding", "text")``, ``("ocr", "screen")``, ``("asr", "speech")``, ``("faces", "detect+embed")``,
``("voices", "embed")``, ``("llm", "chat")``, ``("vlm", "caption")``. As in Immich's ``InferenceModel``, one
public ``predict`` loads the model on first use and calls the provider's ``_predict``; here it also times the
call (``workers.metrics.model_timer``, labelled with the provider's ``task`` name, seconds per item). Each
provider keeps a typed name for its ``predict`` (``embed``, ``read``, ``transcribe``, ``embed_windows``,
``detect``, ``caption``, ``complete_json``), and ``workers.models.get_model`` returns the provider's own type.

A model loads lazily, once per process, on first use; concurrent first uses build one instance.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from enum import StrEnum
from typing import Any, ClassVar, Generic, ParamSpec, TypeVar

from engram.schemas.errors import ModelError
from engram.workers.metrics import model_timer

#: Held while a model loads (``Model.load``): one load at a time in a process. A model's ``_load`` imports its
#: native libraries (onnxruntime, dlib, ctranslate2); two such imports on two threads at once (a worker's warm-up
#: thread loading the text embedder while its first task loads OCR and faces) can meet in Python's per-module import
#: locks, which then raise ``_DeadlockError`` in one of them, halfway through an extension's initialisation: a
#: pybind11 module (dlib) cut off there cannot be imported again in that process ("generic_type: type ... is
#: already registered"), and each later item would fail with it. Re-entrant: a ``_load`` may load another model.
LOADING = threading.RLock()

R = TypeVar("R")
T = TypeVar("T")
P = ParamSpec("P")


class ModelUnavailable(ModelError, RuntimeError):
    """A model could not be loaded (package missing, files corrupt, no provider configured); the message says
    which model and how to mend it."""


class ModelType(StrEnum):
    """What a provider is (Immich's ``ModelType``)."""

    EMBEDDING = "embedding"
    OCR = "ocr"
    ASR = "asr"
    FACES = "faces"
    VOICES = "voices"
    LLM = "llm"
    VLM = "vlm"


class ModelTask(StrEnum):
    """What a provider does with its input (Immich's ``ModelTask``)."""

    TEXT = "text"  # texts to vectors
    SCREEN = "screen"  # text lines read off screenshots and frames
    SPEECH = "speech"  # speech to words with times
    DETECT_EMBED = "detect+embed"  # faces found and described
    EMBED = "embed"  # windows of a recording to voice vectors
    CHAT = "chat"  # a conversation to a JSON reply
    CAPTION = "caption"  # an image to a sentence


#: A provider's identity: (what it is, what it does).
ModelIdentity = tuple[ModelType, ModelTask]


class Model(ABC, Generic[R]):
    """One model of one ``(model_type, model_task)``; ``R`` is what ``predict`` returns.

    Subclasses set the three class attributes and implement ``_load`` (build the runtime object, once per
    process) and ``_predict`` (one call on the loaded object, ``self.session``); ``_items`` says how many items
    (texts, images, audio seconds) a call holds, for the per-item time. ``name`` is the model's own name
    (``all-MiniLM-L6-v2``, ``tiny.en``, a remote model id), ``options`` the provider's settings.

    Ownership: the instance belongs to the worker process (``cached``); ``_predict_lock`` serialises calls
    into libraries that are not thread safe.
    """

    model_type: ClassVar[ModelType]
    model_task: ClassVar[ModelTask]
    #: the name ``get_model`` knows it by, also its ``engram_model_seconds_per_item{model}`` label
    task: ClassVar[str]

    def __init__(self, name: str, **options: Any) -> None:
        self.name = name
        self.options = options
        self._session: Any = None
        self._predict_lock = threading.Lock()

    @classmethod
    def identity(cls) -> ModelIdentity:
        """``(model_type, model_task)``, e.g. ``(ModelType.FACES, ModelTask.DETECT_EMBED)``."""
        return cls.model_type, cls.model_task

    @property
    def loaded(self) -> bool:
        """True once the runtime object is built (``load``)."""
        return self._session is not None

    def load(self) -> Any:
        """The runtime object, built on the first call (thread safe: concurrent first calls build one; one model
        loads at a time in a process, ``LOADING``). Raises ModelUnavailable when a package it needs is missing
        (``ImportError``) or the provider says so."""
        if self._session is None:
            with LOADING:
                if self._session is None:
                    try:
                        self._session = self._load()
                    except ImportError as exc:
                        raise ModelUnavailable(f"{self.task} model {self.name!r}: {exc}") from exc
        return self._session

    @property
    def session(self) -> Any:
        """The loaded runtime object (``load``: built on first access)."""
        return self.load()

    def predict(self, *args: Any, **kwargs: Any) -> R:
        """The provider's ``_predict(*args, **kwargs)``, after loading the model (``load``, outside the timing),
        timed as ``_items(*args, **kwargs)`` items under ``model=task``. Raises ModelUnavailable when the model
        cannot load, and what ``_predict`` raises (its docstring, and the typed name's, say what)."""
        return self._timed(self._predict, self._items(*args, **kwargs), *args, **kwargs)

    def _timed(self, fn: Callable[P, T], items: float, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` with the model loaded, timed over ``items`` items: ``predict``, and the
        providers' other operations (``embed_spans``, ``detect_regions``) go through it."""
        self.load()
        with model_timer(self.task, items):
            return fn(*args, **kwargs)

    def _items(self, *args: Any, **kwargs: Any) -> float:
        """Items in one ``predict`` call (default 1: one image, one conversation)."""
        return 1.0

    @abstractmethod
    def _load(self) -> Any:
        """Build the runtime object. Called once per process."""

    @abstractmethod
    def _predict(self, *args: Any, **kwargs: Any) -> R:
        """One call on the loaded model (``self.session``)."""


_cache: dict[tuple[type, str, tuple], Model] = {}
_cache_lock = threading.Lock()

M = TypeVar("M", bound=Model)


def cached(cls: type[M], name: str, **options: Any) -> M:
    """The process-wide instance of provider ``cls`` for (name, options): built (not loaded) on first request.
    Options must be hashable."""
    key = (cls, name, tuple(sorted(options.items())))
    with _cache_lock:
        model = _cache.get(key)
        if model is None:
            model = _cache[key] = cls(name, **options)
        return model  # type: ignore[return-value]
