"""The providers' common frame (``workers.models.base``): each task's provider and its (type, task) identity, lazy
loading once under concurrent first use, ``predict`` timed per item and counted once under a caller's own timer,
the process cache keyed by provider, and clear messages when a model's package is missing (Resemblyzer, kept out
of the extras, named at worker start and at first use)."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest
from prometheus_client import REGISTRY

from engram.schemas.settings import Settings
from engram.workers.metrics import model_timer
from engram.workers.models import (
    IDENTITIES,
    ChatLlm,
    DlibFaces,
    GeminiCaptioner,
    LlmUnavailable,
    MiniLMEmbedder,
    ModelUnavailable,
    OpenAiCaptioner,
    OpenAiChat,
    RapidOcr,
    ResemblyzerVoice,
    VlmCaptioner,
    WhisperAsr,
    get_model,
    missing_packages,
)
from engram.workers.models.base import Model, ModelTask, ModelType
from engram.workers.models.voices import INSTALL_HINT, RESEMBLYZER, missing

PROVIDERS = {
    "embedding": MiniLMEmbedder,
    "ocr": RapidOcr,
    "asr": WhisperAsr,
    "voice": ResemblyzerVoice,
    "faces": DlibFaces,
}


def _items(model: str) -> float:
    return REGISTRY.get_sample_value("engram_model_items_total", {"model": model}) or 0.0


@pytest.mark.parametrize("task", sorted(PROVIDERS))
def test_each_task_gets_its_provider_unloaded(task: str):
    model = get_model(task, Settings())
    assert type(model) is PROVIDERS[task] and model.task == task
    assert model.identity() == IDENTITIES[task] and model is get_model(task, Settings())  # one per process


def test_identities_are_immichs_pairs():
    assert {task: tuple(map(str, pair)) for task, pair in IDENTITIES.items()} == {
        "embedding": ("embedding", "text"),
        "ocr": ("ocr", "screen"),
        "asr": ("asr", "speech"),
        "voice": ("voices", "embed"),
        "faces": ("faces", "detect+embed"),
        "caption": ("vlm", "caption"),
        "llm": ("llm", "chat"),
    }


def test_remote_providers_follow_the_settings():
    assert isinstance(get_model("caption", Settings(models={"vlm_provider": "openai"})), OpenAiCaptioner)
    gemini = get_model("caption", Settings(models={"vlm_provider": "gemini"}))
    assert isinstance(gemini, GeminiCaptioner) and isinstance(gemini, VlmCaptioner)  # the same name, its own entry
    assert isinstance(get_model("llm", Settings(models={"llm_provider": "openai"})), ChatLlm)
    with pytest.raises(ModelUnavailable, match="no VLM configured"):
        get_model("caption", Settings(models={"vlm_provider": "none"}))
    with pytest.raises(ModelUnavailable, match="no LLM configured"):
        get_model("llm", Settings(models={"llm_provider": "none"}))
    with pytest.raises(ValueError, match="unknown model task 'nose'"):
        get_model("nose", Settings())


def test_concurrent_first_uses_load_once():
    model = DlibFaces("dlib-resnet-v1")  # a fresh instance, not the process's
    assert not model.loaded
    barrier, got = threading.Barrier(4), []

    def first_use():
        barrier.wait()
        got.append(model.load())

    threads = [threading.Thread(target=first_use) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert model.loaded and len(got) == 4 and all(g is got[0] for g in got)


class _SlowLoad(Model[None]):
    """A provider whose load takes a while and notes when it ran (for the one-load-at-a-time test)."""

    model_type, model_task, task = ModelType.EMBEDDING, ModelTask.TEXT, "slow-load"
    spans: list[tuple[float, float]] = []

    def _load(self) -> object:
        start = time.monotonic()
        time.sleep(0.15)
        self.spans.append((start, time.monotonic()))
        return object()

    def _predict(self, *_) -> None:
        return None


def test_models_of_one_process_load_one_at_a_time():
    """A worker's warm-up thread and its first task load two models at once: the loads (and the native imports
    inside them) run one after the other, never overlapping, whichever thread comes first; a load that loads
    another model inside it (same thread) does not wait for itself."""
    models = [_SlowLoad(f"m{i}") for i in range(3)]
    barrier = threading.Barrier(len(models))

    def first_use(model: Model) -> None:
        barrier.wait()
        model.load()

    threads = [threading.Thread(target=first_use, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = sorted(_SlowLoad.spans)
    assert all(m.loaded for m in models) and len(spans) == 3
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:], strict=False)), spans

    class Nested(_SlowLoad):
        def _load(self) -> object:
            return _SlowLoad("inner").load()  # re-entrant: the same thread holds the process's load lock

    assert Nested("outer").load() is not None


def test_predict_is_timed_per_item_and_once_under_a_callers_timer():
    faces = get_model("faces", Settings())
    blank = [np.zeros((64, 64, 3), np.uint8)] * 3
    faces.load()
    before = _items("faces")
    assert faces.predict(blank) == faces.detect(blank) == [[], [], []]
    assert _items("faces") == before + 6  # two calls of three frames
    with model_timer("faces", items=1):  # a caller timing its own unit (one screenshot) around the model
        faces.detect(blank)
        faces.detect_regions(blank[0], [(0, 0, 64, 64)])
    assert _items("faces") == before + 7


def test_a_missing_resemblyzer_is_named_with_how_to_install_it(monkeypatch, log_events):
    monkeypatch.setitem(sys.modules, "resemblyzer", None)  # as if not installed: import fails, find_spec is None
    message = missing()
    assert message and "resemblyzer" in message and f"pip install --no-deps '{RESEMBLYZER}'" in message
    assert missing_packages(Settings()) == [message]
    assert missing_packages(Settings(models={"voice_model": "none"})) == []
    with pytest.raises(ModelUnavailable, match="pip install --no-deps") as err:
        ResemblyzerVoice("resemblyzer").embed_windows(np.zeros(16000, np.float32), [0.0], 1.0)
    assert INSTALL_HINT in str(err.value)
    from engram.workers.app import worker_init  # the real signal a Celery worker sends at start

    worker_init.send(sender=None)
    assert [e["reason"] for e in log_events if e["event"] == "model unavailable"] == [message]


def test_an_llm_without_its_sdk_is_unavailable_not_a_crash(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(LlmUnavailable, match="LLM 'some-model' at http://127.0.0.1:9/v1 failed: ModelUnavailable"):
        OpenAiChat("some-model", base_url="http://127.0.0.1:9/v1").complete_json("answer in JSON", [("user", "hi")])
