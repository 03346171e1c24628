"""Stage ``ingest`` (queue ``ingest``): fetch the object, verify its sha256, sniff and validate its type,
decode it, drop exact and near-duplicates, and cut it into bounded segments for perceive.

- screenshot: one segment; near-duplicates of the device's last kept frame (pHash similarity at or above
  ``near_duplicate_similarity``, then SSIM of greyscale thumbnails at or above ``near_duplicate_ssim``, as
  MIRIX and screenpipe skip unchanged screens) are skipped;
- audio: decoded as a stream into chunks of ``audio_chunk_seconds`` written as 16 kHz WAV objects, each
  with ``audio_chunk_overlap_seconds`` of its neighbours on either side;
- clip: segments of ``clip_segment_seconds`` (M3-Agent's 30 s clips), each with scene-change keyframes
  (JPEG objects) and its audio track (WAV object);
- text: batches of ``chat_batch_size`` messages of the conversation record.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from celery import chain

from engram.schemas.events import EventStatus, MediaEvent, MediaKind
from engram.schemas.jobs import Keyframe, SegmentJob
from engram.workers import media
from engram.workers.app import Queue, app
from engram.workers.ids import derived_key, sha256_file
from engram.workers.ledger import FINAL_STATUSES
from engram.workers.metrics import NEAR_DUPLICATES
from engram.workers.objectstore import ObjectNotFound
from engram.workers.runtime import STAGE_TASK_OPTIONS, Runtime, log, runtime, stage


@app.task(name="workers.ingest.ingest", **STAGE_TASK_OPTIONS)
def ingest(event: MediaEvent) -> None:
    """Validate ``event``'s object and dispatch one perceive → embed → link → store chain per segment."""
    rt = runtime()
    rt.ledger.record_queued(event)
    known = rt.ledger.get(event.event_id)
    if known is not None and known.status in FINAL_STATUSES:
        log.info("event already final", event_id=str(event.event_id), status=known.status.value)
        return  # published twice, or redelivered after it finished: nothing to do
    rt.ledger.mark(event.event_id, EventStatus.processing, stage="ingest")
    with stage(rt, event, "ingest"):
        jobs = plan(rt, event)
    if jobs is None:
        return
    rt.ledger.expect_segments(event.event_id, len(jobs))
    done = rt.ledger.done_segments(event.event_id)  # a redelivered event: only the segments not yet stored
    for job in jobs:
        if job.segment_index not in done:
            dispatch(job)


@app.task(name="workers.ingest.redeliver_stalled")
def redeliver_stalled() -> dict[str, int]:
    """Beat's sweep for lost work: publish ``ingest`` again for events queued or processing without progress
    for ``stalled_after_seconds`` (default twice the visibility timeout), up to ``max_redeliveries`` times,
    then mark them failed with the reason. A task is lost when its message was acknowledged but its chain
    did not go on, e.g. while redis-server restarted; the pipeline is idempotent, so running an event again
    stores nothing twice, and ingest skips segments already stored. Returns {"redelivered": n, "failed": m}."""
    rt = runtime()
    s = rt.settings
    events, given_up = rt.ledger.claim_stalled(s.stalled_after, s.max_redeliveries)
    for event in events:
        ingest.apply_async(args=[event.model_dump(mode="json")])
        log.warning("stalled event published again", event_id=str(event.event_id), tenant=event.tenant_id,
                    stalled_after_s=s.stalled_after)
    for event_id in given_up:
        log.error("stalled event failed", event_id=str(event_id), max_redeliveries=s.max_redeliveries)
    return {"redelivered": len(events), "failed": len(given_up)}


def dispatch(job: SegmentJob) -> None:
    """Start the segment's chain; speech goes to the GPU queue, the rest to the CPU queue."""
    from engram.workers.embed import embed
    from engram.workers.link import link
    from engram.workers.perceive import perceive
    from engram.workers.store import store

    queue = Queue.perceive_gpu if job.audio_key else Queue.perceive_cpu
    chain(perceive.s(job).set(queue=queue.value), embed.s(), link.s(), store.s()).apply_async()


def plan(rt: Runtime, event: MediaEvent) -> list[SegmentJob] | None:
    """The segments of ``event``, or None when it was skipped as a duplicate. Raises MediaError."""
    s = rt.settings
    try:
        size = rt.objects.size(event.object_key)
    except ObjectNotFound as exc:
        raise media.MediaError(f"object {event.object_key} not found in the object store") from exc
    if size != event.size:
        raise media.MediaError(f"size mismatch: event says {event.size} bytes, object has {size}")
    if size > s.max_object_bytes:
        raise media.MediaError(f"object too large: {size} bytes exceeds {s.max_object_bytes}")
    if size == 0:
        raise media.MediaError("empty file (0 bytes)")

    with tempfile.TemporaryDirectory(prefix="engram-ingest-") as tmp:
        path = Path(tmp) / "object"
        rt.objects.download(event.object_key, path)
        digest = sha256_file(path)
        if digest != event.sha256:
            raise media.MediaError(f"sha256 mismatch: event says {event.sha256[:12]}…, content is {digest[:12]}…")
        earlier = rt.ledger.claim_content(event.tenant_id, event.user_id, digest, event.event_id)
        if earlier is not None:
            rt.ledger.mark(event.event_id, EventStatus.skipped, stage="ingest",
                           reason=f"exact duplicate of event {earlier}")
            return None
        match event.kind:
            case MediaKind.screenshot:
                return _plan_screenshot(rt, event, path)
            case MediaKind.audio:
                return _plan_audio(rt, event, path)
            case MediaKind.clip:
                return _plan_clip(rt, event, path)
            case MediaKind.text:
                return _plan_text(rt, event, path)
    raise AssertionError(event.kind)


def _check_sniffed(path: Path, expected: MediaKind) -> None:
    with open(path, "rb") as fh:
        found = media.sniff(fh.read(8192))
    if found is None:
        raise media.MediaError(f"content is not {expected.value} media (unrecognised format)")
    if found[0] is not expected and not (expected is MediaKind.audio and found[0] is MediaKind.clip):
        raise media.MediaError(f"content is {found[1]}, not {expected.value} media")


def _plan_screenshot(rt: Runtime, event: MediaEvent, path: Path) -> list[SegmentJob] | None:
    _check_sniffed(path, MediaKind.screenshot)
    s = rt.settings
    img = media.load_image(path.read_bytes(), s.max_image_pixels)
    signature = media.frame_signature(img, s.near_duplicate_thumb_side)
    previous = rt.ledger.swap_frame(
        event.tenant_id, event.device_id, signature, event.event_id,
        lambda a, b: media.is_near_duplicate(a, b, s.near_duplicate_similarity, s.near_duplicate_ssim))
    if previous is not None:
        rt.ledger.mark(event.event_id, EventStatus.skipped, stage="ingest",
                       reason=f"near-duplicate of the device's previous frame (event {previous})")
        log.info("near-duplicate dropped", event_id=str(event.event_id), previous=str(previous))
        NEAR_DUPLICATES.labels(kind=event.kind.value).inc()
        return None
    return [SegmentJob(event=event, segment_index=0)]


def _plan_audio(rt: Runtime, event: MediaEvent, path: Path) -> list[SegmentJob]:
    _check_sniffed(path, MediaKind.audio)
    info = media.probe(path)
    if not info.has_audio:
        raise media.MediaError("no audio stream")
    s = rt.settings
    blocks = media.audio_blocks(path, int(media.SAMPLE_RATE * min(s.audio_chunk_seconds, 30.0)) or 1)
    return _audio_chunks(rt, event, blocks, s.audio_chunk_seconds, s.audio_chunk_overlap_seconds, "chunk")


def _audio_chunks(rt: Runtime, event: MediaEvent, blocks: Iterator[np.ndarray], seconds: float, overlap: float,
                  prefix: str) -> list[SegmentJob]:
    """Cut streamed audio into chunks whose cores are ``seconds`` long, each written as a WAV object that also
    holds ``overlap`` seconds of its neighbours on either side (``audio_start_s`` says where it starts), so a
    word cut by a core's edge is heard whole by the chunk that keeps it (``workers.speech``). At most one
    chunk plus its overlaps is held in memory; a recording of any length gives at least one chunk."""
    rate = media.SAMPLE_RATE
    core, pad = max(1, int(seconds * rate)), int(overlap * rate)
    jobs: list[SegmentJob] = []
    buf, buf_start = np.zeros(0, dtype=np.float32), 0  # samples held, and where they start in the recording

    def emit(i: int, hi: int, end: int) -> None:
        nonlocal buf, buf_start
        lo = max(0, i * core - pad)
        key = derived_key(event.tenant_id, event.event_id, f"{prefix}-{i:05d}.wav")
        rt.objects.put_bytes(key, media.wav_bytes(buf[lo - buf_start: hi - buf_start]), "audio/wav")
        jobs.append(SegmentJob(event=event, segment_index=i, start_s=i * core / rate, end_s=end / rate,
                               audio_key=key, audio_start_s=lo / rate))
        keep = max(0, (i + 1) * core - pad)  # where the next chunk's audio starts
        buf, buf_start = buf[keep - buf_start:], keep

    for block in blocks:
        buf = np.concatenate([buf, block])
        while buf_start + len(buf) >= (len(jobs) + 1) * core + pad + 1:  # a later sample exists: not the last
            i = len(jobs)
            emit(i, (i + 1) * core + pad, (i + 1) * core)
    total = buf_start + len(buf)
    if not jobs or total > len(jobs) * core:
        emit(len(jobs), total, total)
    return jobs


def _plan_clip(rt: Runtime, event: MediaEvent, path: Path) -> list[SegmentJob]:
    _check_sniffed(path, MediaKind.clip)
    s = rt.settings
    info = media.probe(path)
    if not info.has_video:
        raise media.MediaError("clip has no video stream")
    frames = media.keyframes(path, s.clip_segment_seconds, s.clip_keyframes_per_segment)
    if not frames:
        raise media.MediaError("clip has no decodable frames")
    duration = info.duration or (max(frames) + 1) * s.clip_segment_seconds
    n = max(1, math.ceil(duration / s.clip_segment_seconds - 1e-6))
    audio = media.decode_audio(path) if info.has_audio else None
    jobs = []
    for i in range(n):
        start, end = i * s.clip_segment_seconds, min(duration, (i + 1) * s.clip_segment_seconds)
        kfs = []
        for j, (t, img) in enumerate(frames.get(i, [])):
            key = derived_key(event.tenant_id, event.event_id, f"seg-{i:05d}-key-{j:02d}.jpg")
            rt.objects.put_bytes(key, media.jpeg_bytes(img), "image/jpeg")
            kfs.append(Keyframe(t=t, object_key=key))
        audio_key = None
        if audio is not None:
            lo, hi = int(start * media.SAMPLE_RATE), int(end * media.SAMPLE_RATE)
            if hi > lo:
                audio_key = derived_key(event.tenant_id, event.event_id, f"seg-{i:05d}-audio.wav")
                rt.objects.put_bytes(audio_key, media.wav_bytes(audio[lo:hi]), "audio/wav")
        jobs.append(SegmentJob(event=event, segment_index=i, start_s=start, end_s=end, audio_key=audio_key,
                               keyframes=kfs))
    return jobs


def _plan_text(rt: Runtime, event: MediaEvent, path: Path) -> list[SegmentJob]:
    from engram.workers.perceive import conversation_messages  # parsed once, kept for the perceive tasks

    messages = conversation_messages(rt, event, path.read_bytes())
    batch = rt.settings.chat_batch_size
    return [SegmentJob(event=event, segment_index=i, first_message=lo, last_message=min(lo + batch, len(messages)))
            for i, lo in enumerate(range(0, len(messages), batch))]
