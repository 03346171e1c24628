"""The speed of perception: CPU cost of perceiving screenshots and audio (before and after in one run), the
models' CPU per item and a long recording's memory and time. ``bench/perception.py`` measures the quality.

Section ``screenshot``: a capture sequence per webui viewport (``screens/webui``): the viewport screenshot, then
windows of the same size scrolled down the full-page screenshot (``--scroll`` px apart), then the last window
with a new line of text drawn on it. Each frame goes through engram's real path on a fresh embedded data dir
(``bench.lib.speech.perceive_file``: publish, ingest's plan with the near-duplicate gate, the ``perceive`` task with
OCR and faces on the regions changed since the device's last frame); a frame the gate drops is not a kept frame.
Reported:

- ``cpu_s``: median process CPU seconds (``time.process_time``: every thread of this process) per kept frame;
  ``first_frame_cpu_s``: the same for each device's first frame (read whole);
- ``ocr_cpu_s`` / ``before_ocr_cpu_s``: median CPU seconds of OCR alone per kept frame, now (changed regions read
  by lines, only the lines not seen before recognized, bounded detector side, one thread) and before (rapidocr's
  default detector limits and threads, whole frames);
- ``faces_cpu_s`` / ``before_faces_cpu_s``: median CPU seconds of face detection alone per kept frame, now
  (``workers.media.screen_faces``: changed regions only, none when nothing changed) and before (the whole frame);
- ``ocr_word_recall``: mean over kept frames of the word recall of the observation's OCR lines against the
  words of the axtree's ``StaticText`` names whose box top lies inside the frame (``../shared/data/README.md``);
  ``viewport_recall``: the same for the four viewport screenshots read whole; ``found``: screenpipe's named
  strings (``receiver_count``, ``管理分支``) found by the OCR of their screenshots.

Section ``audio``: the real recordings (jfk, leopard_test, leopard_diarization_test, pyannote_sample) through
ingest's plan and ``perceive`` (faster-whisper + VAD, Resemblyzer speaker windows, clustering), once with the
settings of ``BEFORE_AUDIO`` (the former defaults) and once with the current ones:

- ``x_real_time``: audio seconds ÷ process CPU seconds of perceiving them, for the files one by one and for
  ``long``: the four files looped into a ``--long-seconds`` recording (as a device's stream arrives);
- ``wer``: jfk.flac and leopard_test.wav (``bench.lib.speech.wer``); ``speaker_f1``: pairwise F1 of word speaker
  labels on leopard_diarization_test.wav and pyannote_sample.wav (as ``bench/perception.py`` counts them).

- ``--variant LABEL:VAR=VALUE[,...]`` adds a configuration reported under ``LABEL`` (e.g. ``--variant
  sequential:ENGRAM_MODELS__ASR_BATCH_SIZE=1`` for the settings before batched decoding); ``--runs N`` runs every
  configuration N times in turn and reports medians (``runs_x_real_time``: each run's; ``loads``: the load
  average after each round).

Section ``models``: CPU milliseconds of each model per item, loaded before timing, medians of ``--model-runs``
calls: ``asr_cpu_ms_per_audio_s`` (the settings' ASR model and beam on leopard_diarization_test.wav),
``speaker_window_cpu_ms`` (the speaker embedding per window, batched over that file's windows), ``ocr_cpu_ms``
(screenpipe_testing_OCR.png), ``faces_photo_cpu_ms`` and ``faces_keyframe_cpu_ms`` (HOG detection and embedding of
a deepface photo and of the Hamilton clip's first keyframe), ``faces_cnn_fallback_cpu_ms`` (a keyframe where HOG
finds no face, with the CNN fallback), ``signature_cpu_ms`` (the near-duplicate signature of a screenshot).

Section ``long`` (only when named: an hour or more): a recording of ``--long-hours`` made by looping the real audio
files, ingested and transcribed in a child process: ``peak_rss_mb``, ``wall_s``, ``wall_share_of_audio``, and its
chunks, words and observations.

    python bench/perception_speed.py [--sections screenshot audio models long] [--runs N] [--variant ...]
                                     [--model-runs 5] [--long-hours 3] [--json FILE]

``--json FILE`` merges ``{"screenshot": {...}, "audio": {...}, "models": {...}, "load": <1-minute load average>}``
(the sections run) into FILE's JSON object (created when absent), keeping other keys (``bench/ingest.py`` writes
``text`` and ``distributed`` into the same file, and runs the screenshot and audio sections itself with
``--sections``); without it the figures are printed as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

os.environ.setdefault("ENGRAM_DATA_DIR", tempfile.mkdtemp(prefix="engram-bench-speed-"))
for _var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT"):
    os.environ.pop(_var, None)

from bench.lib import speech  # noqa: E402
from bench.lib import vision as ev  # noqa: E402
from bench.lib.embedded import merge_json  # noqa: E402

DATA = Path(os.environ.get("ENGRAM_EVAL_DATA", REPO.parent / "shared" / "data"))
NEW_LINE = "Meeting moved to Thursday at 10:42 in room Orion"
#: The audio settings before issue 15 (environment variables of the ``before`` run).
BEFORE_AUDIO = {
    "ENGRAM_MODELS__ASR_BEAM_SIZE": "5",
    "ENGRAM_SPEAKER_HOP_SECONDS": "0.5",
    "ENGRAM_MODELS__CPU_THREADS": "2",  # = the libraries' defaults (one thread per core) on 2 cores
    "ENGRAM_MODELS__ASR_BATCH_SIZE": "1",
}


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def window_reference(shot: Path, top: int, bottom: int):
    """Reference word counts of the webui page window ``[top, bottom)`` (page pixels): the words of the
    ``StaticText`` names whose box top lies in it (``ev.webui_reference`` for ``top`` 0)."""
    return ev.webui_reference(shot, bottom) - ev.webui_reference(shot, top)


def capture_sequence(viewport: Path, full: Path, scroll: int) -> list[tuple[str, object, int | None]]:
    """(name, PIL RGB frame, page y of its top or None when text was drawn) of one device's capture: the
    viewport, windows of its size ``scroll`` px apart down the full page (the last one at the bottom), and
    the last window with ``NEW_LINE`` drawn in a dark band across its middle."""
    from PIL import Image, ImageDraw, ImageFont

    first = Image.open(viewport).convert("RGB")
    page = Image.open(full).convert("RGB")
    w, h = first.size
    frames = [("viewport", first, 0)]
    tops = list(range(scroll, page.height - h, scroll)) + [page.height - h]
    for top in tops:
        if top > 0:
            frames.append((f"scrolled {top}", page.crop((0, top, w, top + h)), top))
    last = frames[-1][1].copy()
    draw = ImageDraw.Draw(last)
    y = h // 2
    draw.rectangle([40, y, 40 + 14 * len(NEW_LINE) // 1.6, y + 26], fill=(250, 250, 250))
    draw.text((48, y + 4), NEW_LINE, fill=(20, 20, 20), font=ImageFont.load_default(size=18))
    frames.append(("new line", last, None))
    return frames


def _old_ocr():
    """rapidocr with the settings engram used before issue 15 (default detector limits and threads)."""
    import logging

    from rapidocr import RapidOCR

    engine = RapidOCR(params={"Global.use_cls": False, "Global.log_level": "warning"})
    logging.getLogger("RapidOCR").setLevel(logging.WARNING)
    return engine


def screenshot(args) -> dict:
    """The ``screenshot`` section (module docstring)."""
    import numpy as np

    from engram.workers.media import screen_faces, screens, vision
    from engram.workers.models import get_model
    from engram.workers.runtime import runtime

    rt = runtime()
    model = get_model("ocr", rt.settings)
    old = _old_ocr()
    warm = np.asarray(ev_frame(DATA / "screens" / "screenpipe_testing_OCR_chinese.png"))
    model.read(warm), old(np.ascontiguousarray(warm[:, :, ::-1]))  # load both OCR engines
    faces = get_model("faces", rt.settings)
    faces.detect([warm])  # and the face model (warm: in-process after loading)

    def detect(im, boxes):
        return faces.detect([im])[0] if boxes is None else faces.detect_regions(im, boxes)

    kept, first, ocr_now, ocr_before, recalls, rows = [], [], [], [], [], []
    faces_now, faces_before = [], []
    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-frames-"))
    for viewport, shot, full in ev.webui_pages(DATA / "screens" / "webui"):
        device = f"webui-{viewport}"
        reference = face_reference = None
        memory = screens.LineMemory()
        for i, (name, img, top) in enumerate(capture_sequence(shot, full, args.scroll)):
            path = tmp / f"{device}-{i:02d}.png"
            img.save(path)
            t = time.process_time()
            obs = speech.perceive_file(path, tenant="bench-screens", device=device)
            cpu = time.process_time() - t
            if not obs:
                rows.append((device, name, "dropped as a near-duplicate"))
                continue
            (first if i == 0 else kept).append(cpu)
            pixels = np.asarray(img)
            text = [ln.text for ln in obs[0].ocr_lines]
            if top is not None:
                recall, _ = ev.word_recall(
                    window_reference(shot, top, top + img.height), [w for t_ in text for w in ev.words(t_)]
                )
                recalls.append(recall)
            else:
                recall = float(any(NEW_LINE.split()[-1] in t_ for t_ in text))
            t = time.process_time()
            lines, share = screens.read_changed(
                lambda im: model.read(im, min_confidence=0.0), pixels, reference, model, memory
            )  # as vision.ocr_lines reads a device's frames
            ocr_now.append(time.process_time() - t)
            reference = (screens.grey(pixels), lines)
            t = time.process_time()
            old(np.ascontiguousarray(pixels[:, :, ::-1]))
            ocr_before.append(time.process_time() - t)
            t = time.process_time()
            seen, _ = screen_faces.detect_changed(detect, pixels, face_reference)
            faces_now.append(time.process_time() - t)
            face_reference = (screens.grey(pixels), seen)
            t = time.process_time()
            faces.detect([pixels])
            faces_before.append(time.process_time() - t)
            rows.append(
                (
                    device,
                    name,
                    f"cpu {cpu:.2f} s, OCR {ocr_now[-1]:.2f} s (before {ocr_before[-1]:.2f} s), "
                    f"read {share:.0%} of the frame, recall {recall:.3f}, "
                    f"faces {faces_now[-1]:.2f} s (before {faces_before[-1]:.2f} s)",
                )
            )
            print(*rows[-1], sep=" | ", flush=True)
    viewport_recall = {}
    for viewport, shot, _ in ev.webui_pages(DATA / "screens" / "webui"):
        img = np.asarray(ev_frame(shot))
        lines = vision.ocr_lines(rt, "bench-viewports", img)
        viewport_recall[viewport] = round(
            ev.word_recall(ev.webui_reference(shot, img.shape[0]), [w for ln in lines for w in ev.words(ln.text)])[0], 3
        )
    found = {}
    for name, needle in (
        ("screenpipe_testing_OCR.png", "receiver_count"),
        ("screenpipe_testing_OCR_chinese.png", "管理分支"),
    ):
        t = time.process_time()
        lines = vision.ocr_lines(rt, "bench-finds", np.asarray(ev_frame(DATA / "screens" / name)))
        found[needle] = {"found": any(needle in ln.text for ln in lines), "cpu_s": round(time.process_time() - t, 3)}
    every = first + kept
    return {
        "cpu_s": _median(every),
        "first_frame_cpu_s": _median(first),
        "later_frame_cpu_s": _median(kept),
        "kept_frames": len(every),
        "ocr_cpu_s": _median(ocr_now),
        "before_ocr_cpu_s": _median(ocr_before),
        "faces_cpu_s": _median(faces_now),
        "before_faces_cpu_s": _median(faces_before),
        "ocr_word_recall": round(statistics.fmean(recalls), 3),
        "min_frame_recall": round(min(recalls), 3),
        "viewport_recall": viewport_recall,
        "found": found,
        "frames": [" | ".join(r) for r in rows],
    }


def ev_frame(path: Path):
    """A PIL RGB image through engram's own decoder (``media.load_image``)."""
    from engram.workers.media import decode as media

    return media.load_image(path.read_bytes(), 60_000_000)


AUDIO_FILES = ("jfk.flac", "leopard_test.wav", "leopard_diarization_test.wav", "pyannote_sample.wav")


def _audio_run(tenant: str, long_path: Path) -> dict:
    """Figures of one audio run with the settings in the environment."""
    audio = DATA / "audio"
    out, cpu, seconds, obs_of = {}, 0.0, 0.0, {}
    from engram.workers.media import decode as media

    for name in AUDIO_FILES:
        t = time.process_time()
        obs_of[name] = speech.perceive_file(audio / name, tenant=tenant)
        cpu += time.process_time() - t
        seconds += len(media.decode_audio(audio / name)) / media.SAMPLE_RATE
    out["files_x_real_time"] = round(seconds / cpu, 2)
    t = time.process_time()
    speech.perceive_file(long_path, tenant=tenant)
    long_cpu = time.process_time() - t
    long_s = len(media.decode_audio(long_path)) / media.SAMPLE_RATE
    out["x_real_time"] = round(long_s / long_cpu, 2)
    out["long_seconds"] = round(long_s, 1)
    out["wer"] = {
        n: round(speech.wer(ref, " ".join(o.text for o in obs_of[n])), 4)
        for n, ref in (
            ("jfk.flac", speech.JFK_REFERENCE),
            ("leopard_test.wav", speech.leopard_reference(audio, "test.wav")),
        )
    }
    f1 = {}
    for name in ("leopard_diarization_test.wav", "pyannote_sample.wav"):
        words = [(w, o.speaker_label) for o in sorted(obs_of[name], key=lambda o: o.start_s) for w in o.words]
        if name.startswith("leopard"):
            ref = speech.align_labels(speech.leopard_speaker_words(audio), [w.word for w, _ in words])
        else:
            turns = speech.read_rttm(audio / "pyannote_sample.rttm")
            ref = [speech.speaker_at(turns, (w.start_s + w.end_s) / 2) for w, _ in words]
        f1[name] = round(speech.pairwise_f1(ref, [label for _, label in words])[2], 3)
    out["speaker_f1"] = f1
    return out


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """``LABEL:VAR=VALUE[,VAR=VALUE...]`` (``--variant``) -> (label, environment variables). Raises
    argparse.ArgumentTypeError for another shape."""
    label, _, assignments = text.partition(":")
    pairs = [a.partition("=") for a in assignments.split(",") if a]
    if not label or not pairs or any(not k or not eq for k, eq, _ in pairs):
        raise argparse.ArgumentTypeError(f"expected LABEL:VAR=VALUE[,VAR=VALUE], got {text!r}")
    return label, {k: v for k, _, v in pairs}


def _median_runs(runs: list[dict]) -> dict:
    """The first run's figures with ``x_real_time`` and ``files_x_real_time`` replaced by their medians over
    ``runs`` (each run's values kept in ``runs_x_real_time``); WER and F1 are deterministic."""
    out = dict(runs[0])
    for key in ("x_real_time", "files_x_real_time"):
        out[key] = round(statistics.median(r[key] for r in runs), 2)
    out["runs_x_real_time"] = [r["x_real_time"] for r in runs]
    return out


def audio(args) -> dict:
    """The ``audio`` section (module docstring): the current settings, ``before`` with ``BEFORE_AUDIO`` and each
    ``--variant``, ``--runs`` times in turn (the configurations alternate, so the load weighs on all alike); the
    speed figures are medians, ``loads`` the 1-minute load average after each round."""
    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-audio-"))
    long_path = speech.looped_recording(DATA / "audio", tmp / "long.flac", args.long_seconds)
    configs = {"now": {}, "before": BEFORE_AUDIO, **dict(args.variant or [])}
    runs: dict[str, list[dict]] = {name: [] for name in configs}
    for name, env in configs.items():
        with speech.settings_env(**env):
            speech.perceive_file(DATA / "audio" / "jfk.flac", tenant=f"bench-warm-{name}")  # load the models
    loads = []
    for i in range(args.runs):
        for name, env in configs.items():
            with speech.settings_env(**env):
                runs[name].append(_audio_run(f"bench-audio-{name}-{i}", long_path))
            print(name, runs[name][-1], flush=True)
        loads.append(os.getloadavg()[0])
    figures = {name: _median_runs(r) for name, r in runs.items()}
    now = figures.pop("now")
    return {**now, **figures, "loads": loads}


def _cpu_ms(fn) -> float:
    """Process CPU milliseconds of one call of ``fn`` (all threads of this process; steadier than wall time on a
    shared machine)."""
    t = time.process_time()
    fn()
    return (time.process_time() - t) * 1000


def _median_ms(fn, runs: int) -> float:
    return round(statistics.median(_cpu_ms(fn) for _ in range(runs)), 1)


def _audio_models(runs: int) -> dict:
    """CPU ms of the audio models, loaded before timing: ASR per second of leopard_diarization_test.wav (the
    settings' model and beam), the speaker embedding per window (batched over the file's windows)."""
    from engram.workers.media import decode as media
    from engram.workers.models import get_model
    from engram.workers.runtime import runtime

    s = runtime().settings
    asr, voice = get_model("asr", s), get_model("voice", s)
    audio = media.decode_audio(DATA / "audio" / "leopard_diarization_test.wav")
    seconds = len(audio) / media.SAMPLE_RATE
    asr.transcribe(audio[: media.SAMPLE_RATE * 2])  # load
    hop, window = s.speaker_hop_seconds, s.speaker_window_seconds
    starts = [i * hop for i in range(int((seconds - window) / hop))]
    voice.embed_windows(audio, starts[:2], window)  # load
    return {
        "asr_model": asr.name,
        "asr_beam_size": s.models.asr_beam_size,
        "asr_cpu_ms_per_audio_s": round(
            _median_ms(lambda: asr.transcribe(audio, beam_size=s.models.asr_beam_size), runs) / seconds, 1
        ),
        "speaker_window_s": window,
        "speaker_windows": len(starts),
        "speaker_window_cpu_ms": round(
            _median_ms(lambda: voice.embed_windows(audio, starts, window), runs) / len(starts), 2
        ),
    }


def _vision_models(runs: int) -> dict:
    """CPU ms of the vision models per item, loaded before timing: OCR of a screenshot, face detection and
    embedding of a photo (downscaled to ``face_max_side``) and of a keyframe (HOG; the CNN fallback on a keyframe
    where HOG finds none, None when HOG finds a face on every one), the near-duplicate signature of a screenshot
    (pHash + thumbnail)."""
    import numpy as np

    from engram.workers.media import decode as media
    from engram.workers.models import get_model
    from engram.workers.runtime import runtime

    s = runtime().settings
    ocr, faces = get_model("ocr", s), get_model("faces", s)
    shot_img = ev_frame(DATA / "screens" / "screenpipe_testing_OCR.png")
    shot, photo = np.asarray(shot_img), np.asarray(ev_frame(DATA / "faces" / "deepface" / "img1.jpg"))
    clip = DATA / "video" / "short_hamilton_clip.mp4"
    keyframes = [
        np.asarray(img) for _, img in media.keyframes(clip, s.clip_segment_seconds, s.clip_keyframes_per_segment)[0]
    ]
    no_hog = [k for k in keyframes if not faces.detect([k])[0]]  # also loads the face models
    ocr.read(shot[:64])  # load
    size = lambda a: f"{a.shape[1]}x{a.shape[0]}"  # noqa: E731
    return {
        "ocr_screenshot": size(shot),
        "ocr_cpu_ms": _median_ms(lambda: ocr.read(shot), runs),
        "faces_photo": f"{size(photo)} downscaled to {s.models.face_max_side}",
        "faces_photo_cpu_ms": _median_ms(lambda: faces.detect([photo]), runs),
        "faces_keyframe": size(keyframes[0]),
        "faces_keyframe_cpu_ms": _median_ms(lambda: faces.detect([keyframes[0]]), runs),
        "faces_cnn_fallback_cpu_ms": (
            _median_ms(lambda: faces.detect([no_hog[0]], cnn_fallback=True), runs) if no_hog else None
        ),
        "signature_cpu_ms": _median_ms(lambda: media.frame_signature(shot_img, s.near_duplicate_thumb_side), runs),
    }


def models(args) -> dict:
    """The ``models`` section (module docstring): medians of ``--model-runs`` timed calls."""
    out = {**_audio_models(args.model_runs), **_vision_models(args.model_runs), "runs": args.model_runs}
    print("models", out, flush=True)
    return out


def long(args) -> dict:
    """The ``long`` section (module docstring): a recording of ``--long-hours`` through ingest + perceive in a
    child process. Raises RuntimeError when the child reports an error."""
    import multiprocessing

    hours = args.long_hours
    with tempfile.TemporaryDirectory(prefix="engram-long-") as tmp:
        path = speech.looped_recording(DATA / "audio", Path(tmp) / "long.flac", hours * 3600)
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        child = context.Process(target=speech.transcribe_in_child, args=(str(path), tmp, queue))
        child.start()
        result = queue.get()
        child.join()
    if "error" in result:
        raise RuntimeError(result["error"])
    out = {
        "hours": hours,
        "peak_rss_mb": round(result["peak_rss_mb"]),
        "wall_s": round(result["seconds"], 1),
        "wall_share_of_audio": round(result["seconds"] / (hours * 3600), 3),
        **{k: result[k] for k in ("chunks", "words", "observations")},
    }
    print("long", out, flush=True)
    return out


SECTIONS = {"screenshot": screenshot, "audio": audio, "models": models, "long": long}
#: The sections run without ``--sections`` (``long`` takes an hour or more).
DEFAULT_SECTIONS = ["screenshot", "audio", "models"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", nargs="+", choices=list(SECTIONS), default=DEFAULT_SECTIONS)
    parser.add_argument("--scroll", type=int, default=150, help="px between scrolled windows of the full page")
    parser.add_argument("--long-seconds", type=float, default=300.0, help="length of the looped recording")
    parser.add_argument("--runs", type=int, default=1, help="audio: rounds of every configuration (medians)")
    parser.add_argument(
        "--variant",
        type=parse_variant,
        action="append",
        metavar="LABEL:VAR=VALUE[,VAR=VALUE]",
        help="audio: also run with these ENGRAM_* settings, reported under LABEL (repeatable)",
    )
    parser.add_argument("--model-runs", type=int, default=5, help="models: timed calls per figure (median)")
    parser.add_argument("--long-hours", type=float, default=3.0, help="long: length of the recording, hours")
    parser.add_argument("--json", type=Path, help="merge the figures into this JSON file")
    args = parser.parse_args(argv)
    if not DATA.is_dir():
        print(f"evaluation data not found at {DATA} (set ENGRAM_EVAL_DATA)", file=sys.stderr)
        return 2
    figures = {name: SECTIONS[name](args) for name in args.sections}
    figures["load"] = os.getloadavg()[0]
    if args.json:
        merge_json(args.json, figures)
        print(f"figures of {', '.join(args.sections)} merged into {args.json}")
    else:
        print(json.dumps(figures, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
