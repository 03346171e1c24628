"""Bytes and OCR word recall of kept frames in the form engram stores them (issue 44).

Each shared screenshot (``screens/screenpipe_*.png`` and the webui viewports ``screens/webui/*-screenshot.webp``)
is encoded as ``engram capture`` keeps a frame (WebP at ``api.capture.agent.WEBP_QUALITY``) and, for comparison, as the
PNG capture wrote before (Pillow, compression level 1, as ``bench/capture_cpu.py --formats``); each is put into an
embedded object store, read back from it, decoded by engram's decoder (``workers.media.decode.load_image``) and
read by engram's OCR (``workers.media.vision.ocr_lines``, the ingest path's). Word recall is the existing code of
``bench/lib/vision.py`` (``words``, ``word_recall``).

Figures (``--json FILE`` merges them):

- ``frame_bytes_ratio``: stored bytes per kept frame / PNG's, mean over every screenshot;
- ``ocr_recall`` / ``ocr_recall_png``: OCR word recall of the WebP / the PNG read back, against the webui pages'
  accessibility-tree words (``../shared/data/README.md``: the visible ``StaticText``), mean over the viewports;
- ``screenpipe_agreement_with_png``: the share of the words OCR reads from each screenpipe PNG that it also reads
  from the WebP (no ground truth for those: an agreement, not a recall);
- ``load``: the load average (1, 5, 15 min) at the end.

    python bench/frames.py [--json bench/results/frames.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.lib.embedded import merge_json  # noqa: E402

DATA = Path(os.environ.get("ENGRAM_EVAL_DATA", REPO.parent / "shared" / "data"))
MAX_PIXELS = 60_000_000


def encode(img, fmt: str) -> bytes:
    """``img`` as capture keeps a frame (``webp``: ``WEBP_QUALITY``) or as it did before (``png``: level 1)."""
    from engram.api.capture.agent import WEBP_QUALITY

    buf = io.BytesIO()
    if fmt == "png":
        img.save(buf, format="PNG", compress_level=1)
    else:
        img.save(buf, format="WEBP", quality=WEBP_QUALITY)
    return buf.getvalue()


def read_back(rt, key: str, data: bytes) -> list[str]:
    """Store ``data`` under ``key``, read it back from the object store, decode and OCR it; the words read."""
    import numpy as np

    from bench.lib import vision as ev
    from engram.workers.media import decode as media
    from engram.workers.media import vision

    rt.objects.put_bytes(key, data)
    img = media.load_image(rt.objects.get_bytes(key), MAX_PIXELS)
    return [w for ln in vision.ocr_lines(rt, "bench-frames", np.asarray(img)) for w in ev.words(ln.text)]


def measure(screens: Path) -> dict:
    """The figures of the module docstring for the screenshots under ``screens``."""
    from bench.lib import vision as ev
    from engram.workers.media import decode as media
    from engram.workers.runtime import runtime

    rt = runtime()
    shots = [(p, None) for p in sorted(screens.glob("screenpipe_*.png"))]
    shots += [(shot, shot) for _, shot, _ in ev.webui_pages(screens / "webui")]
    ratios, recall, recall_png, agreement, png_sizes = [], [], [], [], []
    for i, (path, webui) in enumerate(shots):
        img = media.load_image(path.read_bytes(), MAX_PIXELS)
        png, webp = encode(img, "png"), encode(img, "webp")
        ratios.append(len(webp) / len(png))
        png_sizes.append(len(png))
        from_png = read_back(rt, f"media/bench/{i:03d}.png", png)
        from_webp = read_back(rt, f"media/bench/{i:03d}.webp", webp)
        if webui is not None:
            reference = ev.webui_reference(webui, img.height)
            recall.append(ev.word_recall(reference, from_webp)[0])
            recall_png.append(ev.word_recall(reference, from_png)[0])
        else:
            agreement.append(ev.word_recall(Counter(from_png), from_webp)[0])
        print(f"{path.name}: {len(png)} -> {len(webp)} bytes ({ratios[-1]:.3f})", file=sys.stderr, flush=True)
    return {
        "frame_bytes_ratio": round(statistics.fmean(ratios), 3),
        "ocr_recall": round(statistics.fmean(recall), 4),
        "ocr_recall_png": round(statistics.fmean(recall_png), 4),
        "screenpipe_agreement_with_png": round(statistics.fmean(agreement), 4),
        "screenshots": len(shots),
        "webui_pages": len(recall),
        "png_bytes_mean": round(statistics.fmean(png_sizes)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, help="Write (merge) the figures into this JSON file.")
    ap.add_argument("--screens", type=Path, default=DATA / "screens", help="The shared screenshots' folder.")
    args = ap.parse_args()
    os.environ["ENGRAM_DATA_DIR"] = tempfile.mkdtemp(prefix="engram-bench-frames-")
    result = {**measure(args.screens), "load": [round(x, 2) for x in os.getloadavg()]}
    print(json.dumps(result))
    if args.json:
        merge_json(args.json, result)


if __name__ == "__main__":
    main()
