"""Stage ``ingest`` (queue ``ingest``): fetch the object, verify its sha256, sniff and validate its type,
decode it, drop exact and near-duplicates, and cut it into bounded segments for perceive.

- screenshot: one segment; near-duplicates of the device's last kept frame (pHash similarity at or above
  ``near_duplicate_similarity``, then SSIM of greyscale thumbnails at or above ``near_duplicate_ssim``, as
  MIRIX and screenpipe skip unchanged screens) are skipped;
- audio: decoded as a stream into chunks of ``audio_chunk_seconds`` written as 16 kHz WAV objects, each
  with ``audio_chunk_overlap_seconds`` of its neighbours on either side;
- clip: segments of ``clip_segment_seconds`` (M3-Agent's 30 s clips), each with scene-change keyframes
  (JPEG objects) and its audio track (WAV object);
- text: batches of ``chat_batch_size`` messages of the conversation record (in the distributed mode perceived here,
  inline, and handed to ``embed_batched``: ``INLINE_PERCEPTION``).

``ingest_events`` is the stage over a batch of events, which the embedded default's runner calls
(``workers.pipeline``); the ``ingest`` task is its adapter for the distributed mode, which publishes each segment's
work to the workers (``dispatch``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import structlog
from celery import chain

from engram.schemas.events import EventStatus, MediaEvent, MediaKind
from engram.schemas.ids import derived_key, sha256_file
from engram.schemas.jobs import Keyframe, SegmentJob
from engram.workers.app import signature, task
from engram.workers.fairness import segment_priority, tenant_priority
from engram.workers.media import bounds
from engram.workers.media import decode as media
from engram.workers.media.bounds import UploadBudget
from engram.workers.media.chat import conversation_messages  # parsed once, kept for the perceive tasks
from engram.workers.metrics import NEAR_DUPLICATES
from engram.workers.runtime import Runtime, each_alone, runtime, stage
from engram.workers.stores.ledger import FINAL_STATUSES
from engram.workers.stores.objects import ObjectNotFound
from engram.workers.tasks import Queue, Task
from engram.workers.thumbs import store_thumbnail

log = structlog.get_logger(__name__)


#: Kinds whose segments the distributed mode's ingest perceives itself instead of publishing a ``perceive``
#: task: a chat segment's perception is slicing the conversation ingest has just parsed (``media.chat``: ~2 ms
#: CPU), less than a message's own cost through the broker and a worker (publish, receive, hand to the pool,
#: acknowledge). Media that need a model (OCR, speech, faces) keep their queues, to scale on their own workers.
INLINE_PERCEPTION = frozenset({MediaKind.text})


@task(Task.ingest)
def ingest(event: MediaEvent) -> None:
    """The distributed mode's ingest of one event: ``ingest_event``, then each segment dispatched to the workers
    (``dispatch``: batched across events), at its tenant's fair priority."""
    rt = runtime()
    jobs = ingest_event(rt, event)
    if not jobs:
        return
    base = 0 if rt.settings.embedded else tenant_priority(rt.ledger, event.tenant_id, rt.settings)
    for job in jobs:
        dispatch(job, segment_priority(base, job.segment_index, rt.settings))


def ingest_event(rt: Runtime, event: MediaEvent, final: bool | None = None) -> list[SegmentJob]:
    """Validate ``event``'s object and cut it into segments (``plan``, inside ``runtime.stage``: a failure marks
    the event failed with the stage and reason and is raised; ``final`` as there); returns the segments still to
    run: none when the event was final already (published twice, redelivered after it finished) or skipped as a
    duplicate, and, for an event run again, only those not yet stored."""
    known = rt.ledger.get(event.event_id)  # the publisher recorded it (the common case: one read, no write)
    if known is None:
        rt.ledger.record_queued(event)
    elif known.status in FINAL_STATUSES:
        log.info("event already final", event_id=str(event.event_id), status=known.status.value)
        return []  # published twice, or redelivered after it finished: nothing to do
    rt.ledger.mark(event.event_id, EventStatus.processing, stage="ingest")
    with stage(rt, event, "ingest", final):
        jobs = plan(rt, event)
    if jobs is None:
        return []
    rt.ledger.expect_segments(event.event_id, len(jobs))
    # a redelivered event: only the segments not yet stored (an event with none stored when read above needs no
    # second read: a segment stored meanwhile by a duplicate delivery is stored again, idempotently)
    done = rt.ledger.done_segments(event.event_id) if known is not None and known.segments_done else set()
    return [job for job in jobs if job.segment_index not in done]


def ingest_events(rt: Runtime, events: list[MediaEvent], final: bool | None = None) -> list[SegmentJob]:
    """The stage over a batch (``workers.pipeline``): ``ingest_event`` of each of ``events``, their segments still
    to run in order. An event that fails is left out (marked failed with its stage and reason), so it fails alone;
    a transient error (``runtime.TRANSIENT_ERRORS``) is raised for the caller's retry (``final`` as for
    ``runtime.stage``)."""
    return [job for jobs in each_alone(events, lambda e: ingest_event(rt, e, final)) for job in jobs]


@task(Task.redeliver_stalled, "beat")
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
        log.warning(
            "stalled event published again",
            event_id=str(event.event_id),
            tenant=event.tenant_id,
            stalled_after_s=s.stalled_after,
        )
    for event_id in given_up:
        log.error("stalled event failed", event_id=str(event_id), max_redeliveries=s.max_redeliveries)
    return {"redelivered": len(events), "failed": len(given_up)}


def dispatch(job: SegmentJob, priority: int = 0) -> None:
    """Publish the segment's work to the distributed mode's workers, every message at ``priority`` (0 highest .. 9,
    ``workers.fairness``): perceive (speech on the GPU queue, the rest on the CPU queue) → ``embed_batched``, whose
    worker embeds the segments of many events in one pass and hands them to the store worker's ``store_batched``
    (link and store of many segments in one request: issue 15). A chat segment is perceived here, inline
    (``INLINE_PERCEPTION``), and goes to ``embed_batched`` directly; an inline perception that fails has marked its
    event failed with the stage and reason (``runtime.stage``), and nothing is published for it."""
    if job.event.kind in INLINE_PERCEPTION:
        # the task applied here (its stage, ledger and metrics as on a worker; a stage never imports another)
        # gives the batch's JSON form, what its chain would have handed ``embed_batched``
        perceived = signature(Task.perceive, job).apply()
        if perceived.successful():
            signature(Task.embed_batched, perceived.result, priority=priority).apply_async()
        return
    queue = Queue.perceive_gpu if job.audio_key else Queue.perceive_cpu
    chain(
        signature(Task.perceive, job, queue=queue.value, priority=priority),
        signature(Task.embed_batched, priority=priority),
    ).apply_async()


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

    with rt.objects.local_file(event.object_key) as path:  # read where it lies, or a download removed after
        digest = sha256_file(path)
        if digest != event.sha256:
            raise media.MediaError(f"sha256 mismatch: event says {event.sha256[:12]}…, content is {digest[:12]}…")
        earlier = rt.ledger.claim_content(event.tenant_id, event.user_id, digest, event.event_id)
        if earlier is not None:
            rt.ledger.mark(
                event.event_id, EventStatus.skipped, stage="ingest", reason=f"exact duplicate of event {earlier}"
            )
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
        event.tenant_id,
        event.device_id,
        signature,
        event.event_id,
        lambda a, b: media.is_near_duplicate(a, b, s.near_duplicate_similarity, s.near_duplicate_ssim),
    )
    if previous is not None:
        rt.ledger.mark(
            event.event_id,
            EventStatus.skipped,
            stage="ingest",
            reason=f"near-duplicate of the device's previous frame (event {previous})",
        )
        log.info("near-duplicate dropped", event_id=str(event.event_id), previous=str(previous))
        NEAR_DUPLICATES.labels(kind=event.kind.value).inc()
        return None
    store_thumbnail(rt.objects, event.tenant_id, event.event_id, 0, img)  # the web app's, made once (issue 42)
    return [SegmentJob(event=event, segment_index=0)]


def _plan_audio(rt: Runtime, event: MediaEvent, path: Path) -> list[SegmentJob] | None:
    """Audio chunks of ``event`` measured by decoding (``workers.media.bounds``); None when the recording holds no
    samples or no sound (the event is then skipped with the reason). Raises MediaError, LimitExceeded."""
    _check_sniffed(path, MediaKind.audio)
    info = media.probe(path)
    if not info.has_audio:
        raise media.MediaError("no audio stream")
    s = rt.settings
    budget = UploadBudget(s, rt.objects, info.duration)
    decoded = 0

    def counted(blocks: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        nonlocal decoded
        for block in blocks:
            decoded += len(block)
            yield block

    blocks = counted(media.audio_blocks(path, int(media.SAMPLE_RATE * min(s.audio_chunk_seconds, 30.0)) or 1))
    jobs = _audio_chunks(
        rt,
        event,
        blocks,
        s.audio_chunk_seconds,
        s.audio_chunk_overlap_seconds,
        "chunk",
        budget=budget,
        silence_dbfs=s.silence_threshold_dbfs,
    )
    if not jobs:
        declared = f" (the header declares {info.duration:,.0f} s)" if info.duration else ""
        reason = (
            f"silent: no sound above {s.silence_threshold_dbfs:g} dBFS in {decoded / media.SAMPLE_RATE:,.1f} s of audio"
            if decoded
            else f"empty: no audio samples decoded{declared}"
        )
        rt.ledger.mark(event.event_id, EventStatus.skipped, stage="ingest", reason=reason)
        log.info("audio skipped", event_id=str(event.event_id), reason=reason)
        return None
    return jobs


def _audio_chunks(
    rt: Runtime,
    event: MediaEvent,
    blocks: Iterator[np.ndarray],
    seconds: float,
    overlap: float,
    prefix: str,
    budget: UploadBudget | None = None,
    silence_dbfs: float | None = None,
) -> list[SegmentJob]:
    """Cut streamed audio into chunks whose cores are ``seconds`` long, each written as a WAV object that also
    holds ``overlap`` seconds of its neighbours on either side (``audio_start_s`` says where it starts), so a
    word cut by a core's edge is heard whole by the chunk that keeps it (``workers.media.speech``). At most one
    chunk plus its overlaps is held in memory; a recording of any length gives at least one chunk.

    With ``budget``, the samples decoded, the chunks and their bytes are held to the upload's limits (raises
    LimitExceeded); with ``silence_dbfs``, a chunk whose peak stays below it is neither written nor returned
    (its index is left out), so silent audio gives no chunks at all."""
    rate = media.SAMPLE_RATE
    core, pad = max(1, int(seconds * rate)), int(overlap * rate)
    jobs: list[SegmentJob] = []
    cut = 0  # chunks cut so far, silent ones included
    put = budget.put if budget is not None else rt.objects.put_bytes
    buf, buf_start = np.zeros(0, dtype=np.float32), 0  # samples held, and where they start in the recording

    def emit(i: int, hi: int, end: int) -> None:
        nonlocal buf, buf_start, cut
        lo = max(0, i * core - pad)
        audio = buf[lo - buf_start : hi - buf_start]
        if silence_dbfs is None or not bounds.silent(audio, silence_dbfs):
            if budget is not None:
                budget.add_segment()
            key = derived_key(event.tenant_id, event.event_id, f"{prefix}-{i:05d}.wav")
            put(key, media.wav_bytes(audio), "audio/wav")
            jobs.append(
                SegmentJob(
                    event=event,
                    segment_index=i,
                    start_s=i * core / rate,
                    end_s=end / rate,
                    audio_key=key,
                    audio_start_s=lo / rate,
                )
            )
        cut += 1
        keep = max(0, (i + 1) * core - pad)  # where the next chunk's audio starts
        buf, buf_start = buf[keep - buf_start :], keep

    for block in blocks:
        buf = np.concatenate([buf, block])
        if budget is not None:
            budget.check_seconds((buf_start + len(buf)) / rate, "the audio decoded")
        while buf_start + len(buf) >= (cut + 1) * core + pad + 1:  # a later sample exists: not the last
            emit(cut, (cut + 1) * core + pad, (cut + 1) * core)
    total = buf_start + len(buf)
    if not cut or total > cut * core:
        emit(cut, total, total)
    return jobs


def _plan_clip(rt: Runtime, event: MediaEvent, path: Path) -> list[SegmentJob]:
    """Segments of ``clip_segment_seconds`` that hold decoded frames or sound, measured by decoding: the
    timeline of decoded frames and the audio decoded are held to ``max_upload_media_seconds`` as they come
    (an MP4 whose sample tables claim 2,000,000 s fails at its first frame past the limit), segments and
    derived bytes to their limits (``workers.media.bounds``). A segment's audio track is written only when it is
    not silent. Raises MediaError, LimitExceeded."""
    _check_sniffed(path, MediaKind.clip)
    s = rt.settings
    info = media.probe(path)
    if not info.has_video:
        raise media.MediaError("clip has no video stream")
    seg_s = s.clip_segment_seconds
    budget = UploadBudget(s, rt.objects, info.duration)
    last_frame = 0.0

    def on_frame(t: float) -> None:
        nonlocal last_frame
        budget.check_seconds(t, "the video's timeline of decoded frames")
        last_frame = max(last_frame, t)

    frames = media.keyframes(path, seg_s, s.clip_keyframes_per_segment, on_frame=on_frame)
    if not frames:
        raise media.MediaError("clip has no decodable frames")
    planned = set(frames)
    budget.check_segments(len(planned))
    audio_keys: dict[int, str] = {}
    heard = 0
    if info.has_audio:
        for i, block in enumerate(media.audio_blocks(path, max(1, int(seg_s * media.SAMPLE_RATE)))):
            heard += len(block)
            budget.check_seconds(heard / media.SAMPLE_RATE, "the audio track decoded")
            if bounds.silent(block, s.silence_threshold_dbfs):
                continue
            planned.add(i)
            budget.check_segments(len(planned))
            audio_keys[i] = derived_key(event.tenant_id, event.event_id, f"seg-{i:05d}-audio.wav")
            budget.put(audio_keys[i], media.wav_bytes(block), "audio/wav")
    measured = max(last_frame, heard / media.SAMPLE_RATE)
    # the header's duration only where the decoded content bears it out (it adds the last frame's length)
    duration = info.duration if measured <= info.duration <= measured + seg_s else measured
    jobs = []
    for i in sorted(planned):
        start, end = i * seg_s, max(i * seg_s, min(duration, (i + 1) * seg_s))
        kfs = []
        for j, (t, img) in enumerate(frames.get(i, [])):
            key = derived_key(event.tenant_id, event.event_id, f"seg-{i:05d}-key-{j:02d}.jpg")
            budget.put(key, media.jpeg_bytes(img), "image/jpeg")
            if j == 0:  # the segment's thumbnail for the web app, made once (issue 42)
                store_thumbnail(rt.objects, event.tenant_id, event.event_id, i, img)
            kfs.append(Keyframe(t=t, object_key=key))
        jobs.append(
            SegmentJob(
                event=event, segment_index=i, start_s=start, end_s=end, audio_key=audio_keys.get(i), keyframes=kfs
            )
        )
    return jobs


def _plan_text(rt: Runtime, event: MediaEvent, path: Path) -> list[SegmentJob]:

    messages = conversation_messages(rt, event, path.read_bytes())
    batch = rt.settings.chat_batch_size
    UploadBudget(rt.settings, rt.objects).check_segments(math.ceil(len(messages) / batch))
    return [
        SegmentJob(event=event, segment_index=i, first_message=lo, last_message=min(lo + batch, len(messages)))
        for i, lo in enumerate(range(0, len(messages), batch))
    ]
