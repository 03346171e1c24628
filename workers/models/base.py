"""The base of every model provider and the per-process model cache (after Immich's ML service).

A model loads lazily, once per process, on first use; concurrent first uses build one instance.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from engram.workers.errors import ModelError


class ModelUnavailable(ModelError, RuntimeError):
    """A model could not be loaded (package missing, files corrupt)."""


class Model(ABC):
    """One model of one task (``embedding``, ``ocr``, ``asr``). Subclasses implement ``_load``.

    Ownership: the instance belongs to the worker process; ``_predict_lock`` serialises calls into
    libraries that are not thread safe.
    """

    task: ClassVar[str]

    def __init__(self, name: str, **options: Any) -> None:
        self.name = name
        self.options = options
        self._session: Any = None
        self._load_lock = threading.Lock()
        self._predict_lock = threading.Lock()

    @property
    def session(self) -> Any:
        """The loaded runtime object (loaded on first access)."""
        if self._session is None:
            with self._load_lock:
                if self._session is None:
                    try:
                        self._session = self._load()
                    except ImportError as exc:
                        raise ModelUnavailable(f"{self.task} model {self.name!r}: {exc}") from exc
        return self._session

    @abstractmethod
    def _load(self) -> Any:
        """Build the runtime object. Called once per process."""


_cache: dict[tuple[str, str, tuple], Model] = {}
_cache_lock = threading.Lock()


def cached(cls: type[Model], name: str, **options: Any) -> Model:
    """The process-wide instance of ``cls`` for (name, options)."""
    key = (cls.task, name, tuple(sorted(options.items())))
    with _cache_lock:
        model = _cache.get(key)
        if model is None:
            model = _cache[key] = cls(name, **options)
        return model
