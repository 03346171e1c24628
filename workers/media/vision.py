"""The vision half of perceive: OCR (cached by image hash), faces and captions of screenshots and keyframes.

Called by the ``perceive`` task in the worker process; the models come from the per-process registry
(``workers.models.get_model``: loaded lazily, once). The OCR cache lives in the object store, so every worker
of a cluster shares it and perceiving the same pixels again (a redelivered task, a re-ingest, the same frame
in two clips) costs no model time.
"""

from __future__ import annotations

import numpy as np
import structlog
from pydantic import TypeAdapter

from engram.schemas.observations import FaceDetection, OcrLine
from engram.workers.codecs import pixels_sha256  # the OCR cache's key, also read by memory.forget
from engram.workers.media import screen_faces, screens
from engram.workers.memory.vault import VaultError, seal, unseal
from engram.workers.metrics import model_timer
from engram.workers.models import CaptionUnavailable, get_model
from engram.workers.runtime import Runtime
from engram.workers.stores.objects import ObjectNotFound

log = structlog.get_logger(__name__)

_LINES = TypeAdapter(list[OcrLine])


def ocr_cache_key(tenant_id: str, model: str, digest: str) -> str:
    """``cache/<tenant>/ocr/<model id>/<sha256 of pixels>.json``: kept per tenant, so deleting a tenant's objects
    deletes its cached text too."""
    return f"cache/{tenant_id}/ocr/{model}/{digest}.json"


def ocr_lines(
    rt: Runtime, tenant_id: str, pixels: np.ndarray, device_id: str | None = None, digest: str | None = None
) -> list[OcrLine]:
    """OCR lines of a uint8 (h, w, 3) RGB image at or above ``ocr_min_confidence``, in reading order.
    ``digest``: the image's ``pixels_sha256`` when the caller has it (computed here otherwise, ~10 ms a 1080p frame).

    With ``device_id`` (a screenshot of a device's stream) only the regions changed since the device's last
    frame read in this process are OCR'd, the rest of its lines carried over, and of the lines detected there
    only those the device's ``LineMemory`` has not seen are recognized (``workers.media.screens``).

    Every line the model returns is cached (JSON encrypted with the vault key, ``vault.seal``, in the object
    store, keyed by the pixels' sha256), and the confidence floor is applied on the way out, so changing it
    needs no new OCR. Writing the cache twice writes the same lines (idempotent). Raises VaultKeyMissing in the
    distributed mode without ``ENGRAM_VAULT_KEY`` (workers refuse to start so)."""
    model = get_model("ocr", rt.settings)
    digest = digest or pixels_sha256(pixels)
    key = ocr_cache_key(tenant_id, model.cache_id, digest)
    try:  # sealed with the vault key: the text of a screenshot may hold secrets (redacted later, in perceive)
        lines = _LINES.validate_json(unseal(rt.settings, rt.objects.get_bytes(key)))
    except (ObjectNotFound, VaultError):  # not cached, or cached before it was sealed: read again
        with model_timer("ocr"):
            if device_id:
                lines, _ = screens.read_changed(
                    lambda img: model.read(img, min_confidence=0.0),
                    pixels,
                    screens.REFERENCES.get(tenant_id, device_id),
                    model,
                    screens.REFERENCES.memory(tenant_id, device_id),
                )
            else:
                lines = model.read(pixels, min_confidence=0.0)
        rt.objects.put_bytes(key, seal(rt.settings, _LINES.dump_json(lines)), "application/octet-stream")
    if device_id:
        screens.REFERENCES.put(tenant_id, device_id, digest, pixels, lines)
    floor = rt.settings.ocr_min_confidence
    return [ln for ln in lines if ln.confidence >= floor]


def faces(rt: Runtime, frames: list[np.ndarray], times: list[float | None], keyframes: bool) -> list[FaceDetection]:
    """Faces of a segment's frames (uint8 RGB arrays), each with its ``frame_s``; on keyframes the CNN
    detector looks again where HOG found nothing (``models.face_cnn_fallback``). Returns [] for screenshots
    when ``models.faces_on_screenshots`` is off."""
    m = rt.settings.models
    if not frames or (not keyframes and not m.faces_on_screenshots):
        return []
    with model_timer("faces", items=len(frames)):
        per_frame = get_model("faces", rt.settings).detect(
            frames, times, cnn_fallback=keyframes and m.face_cnn_fallback
        )
    return [face for found in per_frame for face in found]


def screenshot_faces(
    rt: Runtime, tenant_id: str, pixels: np.ndarray, device_id: str | None = None, digest: str | None = None
) -> list[FaceDetection]:
    """Faces of a screenshot (uint8 (h, w, 3) RGB), largest first; [] when ``models.faces_on_screenshots`` is off.

    With ``device_id`` (a frame of a device's stream) faces are searched only in the regions changed since the
    device's last frame searched in this process, the others carried over, and not at all when nothing changed
    (``workers.media.screen_faces``), and only where the frame shows neither plain background nor the text lines
    ``ocr_lines`` read on it (``screen_faces.photo_regions``); without ``device_id`` the whole frame is searched
    (HOG). ``digest`` as for ``ocr_lines``."""
    if not rt.settings.models.faces_on_screenshots:
        return []
    model = get_model("faces", rt.settings)
    if not device_id:
        return faces(rt, [pixels], [None], keyframes=False)

    def detect(img: np.ndarray, boxes: list | None) -> list[FaceDetection]:
        if boxes is None:
            return model.detect([img], [None], cnn_fallback=False)[0]
        return model.detect_regions(img, boxes)

    digest = digest or pixels_sha256(pixels)
    text = screens.REFERENCES.lines_of(tenant_id, device_id, digest) or []  # read by ocr_lines just before
    with model_timer("faces", items=1):
        reference = screen_faces.REFERENCES.get(tenant_id, device_id)
        found, _ = screen_faces.detect_changed(detect, pixels, reference, [ln.box for ln in text])
    screen_faces.REFERENCES.put(tenant_id, device_id, digest, pixels, found)
    return found


def caption(rt: Runtime, image, event_id: str) -> str | None:
    """A VLM caption of a PIL RGB image, or None when no VLM is configured (``models.vlm_provider`` 'none').

    When the endpoint fails after its retries: with ``models.vlm_required`` the CaptionUnavailable error
    propagates (a ConnectionError: the stage retries, then fails the event with the reason); otherwise a
    warning is logged with the reason and None is returned, so OCR, faces and speech are still stored."""
    m = rt.settings.models
    if m.vlm_provider == "none":
        return None
    try:
        with model_timer("caption"):
            return get_model("caption", rt.settings).caption(image, m.vlm_prompt) or None
    except CaptionUnavailable as exc:
        if m.vlm_required:
            raise
        log.warning("caption skipped", event_id=event_id, reason=str(exc))
        return None
