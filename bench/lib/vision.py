"""Vision evaluation helpers: OCR word recall against the webui accessibility trees, P/R/F1 of face pairs of
the deepface lists, and synthetic sequences of nearly identical frames made from a real screenshot.

Used by ``bench/perception.py`` (quality), ``bench/perception_speed.py`` (speed) and the tests (the floors).
Definitions follow ``../shared/data/README.md``: the visible text of a webui screenshot is the words of its
accessibility tree's ``StaticText`` names whose element box lies inside the image (top y < image height).
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np


def words(text: str) -> list[str]:
    """Word tokens for recall: NFKC, case-folded, runs of letters/digits (``\\w+``), so punctuation, symbols
    and URL separators split words the same way on both sides (``signal.org/install`` → signal, org, install)."""
    return re.findall(r"\w+", unicodedata.normalize("NFKC", text).casefold())


def webui_pages(webui: Path) -> list[tuple[str, Path, Path]]:
    """(viewport name such as ``1280-720``, viewport screenshot, full-page screenshot) of each sample."""
    out = []
    for shot in sorted(webui.glob("*-screenshot.webp")):
        prefix = shot.name[: -len("-screenshot.webp")]
        out.append((prefix.rsplit("_", 1)[-1], shot, shot.with_name(f"{prefix}-screenshot-full.webp")))
    return out


def webui_reference(screenshot: Path, image_height: int) -> Counter:
    """Reference word counts of a webui screenshot: ``StaticText`` names of ``*-axtree.json.gz`` whose box
    in ``*-box.json.gz`` (page pixels, keyed by backend DOM node id) starts above ``image_height``."""
    prefix = str(screenshot).split("-screenshot")[0]
    with gzip.open(f"{prefix}-axtree.json.gz") as fh:
        nodes = json.load(fh)["nodes"]
    with gzip.open(f"{prefix}-box.json.gz") as fh:
        boxes = json.load(fh)
    ref: Counter = Counter()
    for node in nodes:
        if (node.get("role") or {}).get("value") != "StaticText":
            continue
        box = boxes.get(str(node.get("backendDOMNodeId")))
        if box and min(p["y"] for p in box["content"]) < image_height:
            ref.update(words((node.get("name") or {}).get("value", "")))
    return ref


def word_recall(reference: Counter, found: Iterable[str]) -> tuple[float, Counter]:
    """(recall, missed words): the share of reference word occurrences matched by OCR word occurrences
    (multiset intersection), and the reference words left unmatched."""
    got = Counter(found)
    total = sum(reference.values())
    matched = sum(min(n, got[w]) for w, n in reference.items())
    return (matched / total if total else 1.0), reference - got


def deepface_pairs(folder: Path) -> list[tuple[str, str, bool]]:
    """Labelled pairs (file, file, same person) of ``master.csv`` and ``face-recognition-pivot.csv``, by file
    name (the pivot's paths carry a prefix; its distance columns are ignored). Pairs listed in both files
    are kept twice, as listed."""
    pairs = []
    for name in ("master.csv", "face-recognition-pivot.csv"):
        with open(folder / name, newline="") as fh:
            for row in csv.DictReader(fh):
                decision = (row.get("Decision") or row.get("decision") or "").strip().lower()
                pairs.append((Path(row["file_x"]).name, Path(row["file_y"]).name, decision == "yes"))
    return pairs


def pair_scores(pairs: list[tuple[str, str, bool]], same: Callable[[str, str], bool]) -> dict[str, float]:
    """Pairwise precision, recall and F1 of ``same(a, b)`` (e.g. "a and b fall in one cluster") over the
    labelled ``pairs``; also the counts tp, fp, fn and pairs."""
    tp = fp = fn = 0
    for a, b, truth in pairs:
        pred = same(a, b)
        tp += pred and truth
        fp += pred and not truth
        fn += truth and not pred
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "tp": tp, "fp": fp, "fn": fn, "pairs": len(pairs)}


def static_screen(base, n: int = 12) -> list:
    """``n`` frames of one real screenshot (PIL RGB) as a person idles on it: the mouse pointer moves
    (a 12x19 px arrow) and a clock in the top-right corner ticks every third frame."""
    from PIL import ImageDraw, ImageFont

    font = ImageFont.load_default(size=14)
    frames = []
    for i in range(n):
        img = base.copy()
        draw = ImageDraw.Draw(img)
        x, y = 300 + 37 * i, 200 + 23 * i
        draw.polygon([(x, y), (x, y + 19), (x + 5, y + 14), (x + 12, y + 14)], fill="white", outline="black")
        w = img.width
        draw.rectangle([w - 80, 2, w - 4, 20], fill=(30, 30, 30))
        draw.text((w - 70, 3), f"10:{40 + i // 3:02d}", fill="white", font=font)
        frames.append(img)
    return frames


def changed_screens(base) -> dict[str, object]:
    """Frames that differ from ``base`` by new content and must be kept: a new line of text, a 20 px scroll."""
    from PIL import Image, ImageDraw, ImageFont

    line = base.copy()
    draw = ImageDraw.Draw(line)
    draw.rectangle([60, 500, 520, 518], fill=(30, 30, 30))
    draw.text(
        (62, 503),
        "def receiver_total(count): return sum(count) + offset",
        fill=(220, 220, 220),
        font=ImageFont.load_default(size=14),
    )
    arr = np.asarray(base)
    scrolled = Image.fromarray(np.concatenate([arr[20:], np.full_like(arr[:20], 30)]))
    return {"new line of text": line, "scrolled 20 px": scrolled}


def largest_face(path: Path):
    """The largest face (``FaceDetection``) of an image file through engram's face model, or None."""
    from engram.workers.media import decode as media
    from engram.workers.models import get_model
    from engram.workers.runtime import runtime

    rt = runtime()
    img = media.load_image(path.read_bytes(), rt.settings.max_image_pixels)
    found = get_model("faces", rt.settings).detect([np.asarray(img)])[0]
    return found[0] if found else None


def reference_faces(video_dir: Path) -> dict[str, list[float]]:
    """{person: embedding} of the clip's ``ref_<person>.png`` reference faces."""
    refs = {}
    for path in sorted(video_dir.glob("ref_*.png")):
        face = largest_face(path)
        if face is None:
            raise ValueError(f"no face found on the reference {path.name}")
        refs[path.stem.removeprefix("ref_")] = face.embedding
    return refs


def clip_faces(path: Path, tenant: str = "bench-faces") -> list:
    """The faces (``FaceDetection``, with ``frame_s``) of a clip through engram's ingest plan (segments,
    scene-change keyframes stored as JPEG) and the perceive task with each segment's audio left out."""
    from engram.api.local import classify, publish_file
    from engram.schemas.jobs import ObservationBatch
    from engram.workers.ingest import plan
    from engram.workers.perceive import perceive
    from engram.workers.runtime import runtime

    rt = runtime()
    event = publish_file(rt, classify(path), tenant, "bench", "bench")
    jobs = plan(rt, event) or []
    batches = [ObservationBatch.model_validate(perceive(job.model_copy(update={"audio_key": None}))) for job in jobs]
    return [face for batch in batches for obs in batch.observations for face in obs.faces]


def match_references(faces: list, refs: dict[str, list[float]]) -> dict[str, float]:
    """{person: smallest distance of a face whose nearest reference is that person} (inf when none is)."""
    from engram.workers.models.faces import face_distance

    best = dict.fromkeys(refs, float("inf"))
    for face in faces:
        dists = {person: face_distance(face.embedding, ref) for person, ref in refs.items()}
        person = min(dists, key=dists.get)
        best[person] = min(best[person], dists[person])
    return best
