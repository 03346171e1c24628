"""Stage ``perceive`` (queues ``perceive.cpu`` and ``perceive.gpu``): turn one segment into observations.

OCR (rapidocr, cached by image hash), faces (dlib) and optional VLM captions for screenshots and clip
keyframes (``workers.media.vision``), speech-to-text with word timings, speakers and voice embeddings for audio
chunks and clip audio (``workers.media.speech``: faster-whisper + VAD, Resemblyzer), conversation messages
passed through. Last, secrets are redacted (``workers.memory.vault``: each one replaced by a knowledge-vault
placeholder and kept encrypted): nothing leaves this stage that should not be stored.

``perceive_segments`` is the stage over a batch of segments, which the embedded default's runner calls
(``workers.pipeline``); the ``perceive`` task is its adapter for the distributed mode, one segment a message.
"""

from __future__ import annotations

import io
from contextlib import nullcontext
from datetime import timedelta

import numpy as np

from engram.schemas.events import MediaEvent, MediaKind
from engram.schemas.ids import point_id
from engram.schemas.jobs import ObservationBatch, SegmentJob
from engram.schemas.observations import Observation, OcrLine, SpeakerVoice, WordTiming
from engram.workers.app import task
from engram.workers.codecs import pixels_sha256
from engram.workers.media import decode as media
from engram.workers.media import speech, vision
from engram.workers.media.chat import conversation_messages, message_context
from engram.workers.memory import vault
from engram.workers.runtime import Runtime, deaths_guard, each_alone, runtime, stage
from engram.workers.tasks import Task


@task(Task.perceive)
def perceive(job: SegmentJob) -> ObservationBatch:
    """The distributed mode's perceive of one segment (``perceive_segment``)."""
    return perceive_segment(runtime(), job)


def perceive_segment(rt: Runtime, job: SegmentJob, final: bool | None = None) -> ObservationBatch:
    """Observations of one segment (possibly none: a silent chunk, a screen without text), inside
    ``runtime.stage`` (a failure marks the event failed with the stage and reason and is raised; ``final`` as
    there)."""
    # media go through native decoders and models, which a hostile file can crash (``runtime.deaths_guard``);
    # a conversation is parsed JSON, no decoder: not counted (two ledger writes a segment spared)
    guarded = job.event.kind is not MediaKind.text
    with (
        stage(rt, job.event.event_id, "perceive", final),
        deaths_guard(rt, job.event.event_id, f"perceive:{job.segment_index}") if guarded else nullcontext(),
    ):
        match job.event.kind:
            case MediaKind.screenshot:
                observations = _screenshot(rt, job)
            case MediaKind.audio:
                observations = _audio(rt, job)
            case MediaKind.clip:
                observations = _clip(rt, job)
            case MediaKind.text:
                observations = _text(rt, job)
        observations = vault.redact_observations(rt, observations)
    return ObservationBatch(job=job, observations=observations)


def perceive_segments(rt: Runtime, jobs: list[SegmentJob], final: bool | None = None) -> list[ObservationBatch]:
    """The stage over a batch (``workers.pipeline``): ``perceive_segment`` of each of ``jobs``, in order. A segment
    that fails is left out (its event marked failed with the stage and reason), so it fails alone; a transient
    error (``runtime.TRANSIENT_ERRORS``) is raised for the caller's retry (``final`` as for ``runtime.stage``)."""
    return each_alone(jobs, lambda j: perceive_segment(rt, j, final))


def _base(event: MediaEvent, segment: int, kind: str, text: str, **fields) -> Observation:
    return Observation(
        id=point_id(event.tenant_id, event.event_id, segment, kind),
        tenant_id=event.tenant_id,
        user_id=event.user_id,
        device_id=event.device_id,
        event_id=event.event_id,
        kind=event.kind,
        segment_index=segment,
        text=text,
        object_key=event.object_key,
        source_name=event.source_name,
        app=event.app,
        window=event.window,
        **{"captured_at": event.captured_at, **fields},
    )


def _screenshot(rt: Runtime, job: SegmentJob) -> list[Observation]:
    """One observation: the OCR text under the event's app/window header, faces, and a caption when a VLM is
    configured; none for a screen with nothing of these."""
    event = job.event
    data = rt.objects.get_bytes(event.object_key)
    img = media.load_image(data, rt.settings.max_image_pixels)
    pixels = np.asarray(img)
    digest = pixels_sha256(pixels)  # the OCR cache's key, kept with the observation for a forget
    lines = vision.ocr_lines(rt, event.tenant_id, pixels, device_id=event.device_id, digest=digest)
    faces = vision.screenshot_faces(rt, event.tenant_id, pixels, device_id=event.device_id, digest=digest)
    caption = vision.caption(rt, img, str(event.event_id))
    parts = [" — ".join(x for x in (event.app, event.window) if x), "\n".join(ln.text for ln in lines)]
    if caption:
        parts.append(f"[caption] {caption}")
    text = "\n".join(p for p in parts if p)
    if not text and faces:
        n = f"{len(faces)} face{'s' if len(faces) > 1 else ''}"
        text = f"[photo: {n}, no text]" if is_photo(data, event) else f"[{n} on screen, no text]"
    if not text:
        return []
    digests = {event.object_key: digest}
    return [_base(event, 0, "ocr", text, ocr_lines=lines, faces=faces, caption=caption, pixel_digests=digests)]


#: Screen sizes in pixels (landscape): desktop and laptop panels, at scale factors 1, 1.25, 1.5 and 2 where the
#: capture keeps device pixels (Windows, macOS Retina); a frame of one of these sizes (either orientation) is a screen.
SCREEN_SIZES = frozenset(
    (round(w * f), round(h * f))
    for w, h in (
        (1024, 768),
        (1280, 720),
        (1280, 800),
        (1280, 1024),
        (1366, 768),
        (1440, 900),
        (1536, 864),
        (1600, 900),
        (1680, 1050),
        (1920, 1080),
        (1920, 1200),
        (2560, 1440),
        (2560, 1600),
        (3440, 1440),
        (1512, 982),
        (1728, 1117),
        (3840, 2160),
    )
    for f in (1, 1.25, 1.5, 2)
)
PHOTO_MIMES = frozenset({"image/jpeg", "image/heic", "image/heif", "image/avif"})  # what cameras and phones write


def is_photo(data: bytes, event: MediaEvent) -> bool:
    """True when an image is a camera photo, not a screen: its EXIF names a camera (``Make`` or ``Model``, as
    cameras and phones write them; Pillow's ``getexif``), or it is a JPEG/HEIC (a camera's format) that neither
    comes from the capture agent (an app or window) nor has a screen's size (``SCREEN_SIZES``). A screenshot is
    PNG or WebP and carries no camera. An unreadable header counts as a screen."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:  # the header only: no pixels decoded
            exif, size = img.getexif(), img.size
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError):
        return False
    if any(str(exif.get(tag) or "").strip() for tag in (0x010F, 0x0110)):  # Make, Model
        return True
    if event.app or event.window or event.mime_type not in PHOTO_MIMES:
        return False
    return size not in SCREEN_SIZES and size[::-1] not in SCREEN_SIZES


def _audio(rt: Runtime, job: SegmentJob) -> list[Observation]:
    """One observation per utterance of the chunk (a Whisper segment, split where the speaker changes) with
    its words, language, speaker label and voice embedding; none for silence."""
    heard = speech.transcribe_job(rt, job)
    return [
        _base(
            job.event,
            job.segment_index,
            f"asr-{i}",
            u.text,
            transcript=u.text,
            language=heard.language,
            start_s=u.start,
            end_s=u.end,
            speaker_label=u.speaker,
            words=[
                WordTiming(
                    word=w.word.strip(), start_s=max(0.0, w.start), end_s=max(0.0, w.end), probability=w.probability
                )
                for w in u.words
            ],
            voice_embedding=None if u.voice is None else u.voice.tolist(),
            captured_at=job.event.captured_at + timedelta(seconds=u.start),
        )
        for i, u in enumerate(heard.utterances)
    ]


def _clip(rt: Runtime, job: SegmentJob) -> list[Observation]:
    """One observation per clip segment: transcript, text on screen, faces of the keyframes (each with its
    ``frame_s`` from the start of the clip), the keyframes' captions, and the voice of each of the segment's
    speakers (``speech.speaker_voices``; the main speaker's is also ``voice_embedding``)."""
    seen: set[str] = set()
    screen_lines: list[OcrLine] = []
    images = [
        media.load_image(rt.objects.get_bytes(kf.object_key), rt.settings.max_image_pixels) for kf in job.keyframes
    ]
    frames = [np.asarray(img) for img in images]
    digests = {kf.object_key: pixels_sha256(pixels) for kf, pixels in zip(job.keyframes, frames, strict=True)}
    for kf, pixels in zip(job.keyframes, frames, strict=True):
        for line in vision.ocr_lines(rt, job.event.tenant_id, pixels, digest=digests[kf.object_key]):
            if line.text not in seen:  # text that stays on screen across keyframes is kept once
                seen.add(line.text)
                screen_lines.append(line)
    faces = vision.faces(rt, frames, [kf.t for kf in job.keyframes], keyframes=True)
    captions = list(dict.fromkeys(c for img in images if (c := vision.caption(rt, img, str(job.event.event_id)))))
    transcript, language, voices = "", None, []
    if job.audio_key:
        heard = speech.transcribe_job(rt, job)
        transcript, language = " ".join(u.text for u in heard.utterances), heard.language
        voices = [
            SpeakerVoice(speaker_label=label, embedding=voice.tolist(), seconds=round(seconds, 3))
            for label, voice, seconds in speech.speaker_voices(heard.utterances)
        ]  # stage link links each
    speaker, voice = (voices[0].speaker_label, voices[0].embedding) if voices else (None, None)
    parts = [transcript] if transcript else []
    if screen_lines:
        parts.append("[on screen] " + " | ".join(ln.text for ln in screen_lines))
    if captions:
        parts.append("[caption] " + " | ".join(captions))
    if not parts and faces:
        parts.append(f"[{len(faces)} face{'s' if len(faces) > 1 else ''} on keyframes, no speech or text]")
    if not parts:
        return []
    start = job.start_s or 0.0
    return [
        _base(
            job.event,
            job.segment_index,
            "clip",
            "\n".join(parts),
            transcript=transcript or None,
            language=language,
            ocr_lines=screen_lines,
            faces=faces,
            caption=" | ".join(captions) or None,
            pixel_digests=digests,
            speaker_label=speaker,
            voice_embedding=voice,
            speaker_voices=voices,
            start_s=start,
            end_s=job.end_s,
            captured_at=job.event.captured_at + timedelta(seconds=start),
        )
    ]


def _text(rt: Runtime, job: SegmentJob) -> list[Observation]:
    messages = conversation_messages(rt, job.event)
    out = []
    for idx in range(job.first_message or 0, job.last_message or len(messages)):
        msg = messages[idx]
        before, after = message_context(messages, idx)
        out.append(
            _base(
                job.event,
                job.segment_index,
                f"msg-{idx}",
                msg.display_text(),
                captured_at=msg.timestamp,
                message_id=msg.message_id,
                session_id=msg.session_id,
                speaker=msg.speaker,
                context_before=before,
                context_after=after,
            )
        )
    return out
