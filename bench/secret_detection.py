"""What the detection of secrets said aloud or wrapped costs (issue 43): secret detection runs on every transcript
and OCR text, so its added steps must stay cheap.

Texts (real words: LoCoMo's turns, ``../shared/data/conversations/locomo10.json``):

- ``transcript``: the turns of conversation 0 run together into one ``--words``-word utterance (no line breaks, as
  faster-whisper gives a long recording), with issue 43's spoken secrets said three times within it;
  ``transcript_plain`` the same words without them (the common case: a cue word such as "code" may occur, no
  secret is told);
- ``ocr``: the same words wrapped at 90 characters into lines (a screenshot's OCR text), with a JWT wrapped over
  two of them and a token cut at a line's end.

For each, over ``--runs`` runs (the per-text memo cleared before each: ``secrets.clear_memo``), the median wall
time of the whole ``secrets.detect`` and of the steps issue 43 added to it: the cue scan and told secrets
(``_cued``, syntok on each cue's clause), the scan for cut tokens with a known prefix (``_prefixed``) and the
search for wrapped lines (``_wrap_cuts``), each as ``_scan`` calls it (behind its gate, if any). ``added_share``
is the added steps' median over the whole detection's.

    python bench/secret_detection.py [--words 5000] [--runs 21] [--json bench/results/secret_detection.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import textwrap
import time
from pathlib import Path

from engram.workers.text import secrets

SAID = (
    "the WiFi password is blue Falcon 77, my bank password is Hunter 2. The door code is 4,500 and 12. "
    "my PIN is four five one two."
)
JWT = (
    "eyJhbGciOiAiSFMyNTYiLCAidHlwIjogIkpXVCJ9.eyJzdWIiOiAiMTIzNDU2Nzg5MCIsICJuYW1lIjogIkFkYSIsICJpYXQiOiAxNzE2"
    "MjAwMDAwfQ.q86-mEKsrLv2qJReR0yeRE-L-L8gfPUQ2MR_k-WExMM"
)


def texts(eval_data: Path, words: int) -> dict[str, str]:
    """The ``transcript``, ``transcript_plain`` and ``ocr`` texts of about ``words`` words each (module docstring)."""
    data = json.loads((eval_data / "conversations" / "locomo10.json").read_text())
    conv = data[0]["conversation"]
    turns = [
        t["text"]
        for k in sorted(conv, key=str)
        if k.startswith("session_") and isinstance(conv[k], list)
        for t in conv[k]
    ]
    pool = " ".join(turns).split()
    while len(pool) < words:
        pool += pool
    body = pool[:words]
    third = len(body) // 3
    transcript = " ".join([*body[:third], SAID, *body[third : 2 * third], SAID, *body[2 * third :], SAID])
    lines = textwrap.wrap(" ".join(body), 90)
    lines[len(lines) // 2 : len(lines) // 2] = [
        f"Authorization: Bearer {JWT[:70]}",
        JWT[70:],
        "GITHUB=ghp_Q7xN2mK9pR4t",
    ]
    return {"transcript": transcript, "transcript_plain": " ".join(body), "ocr": "\n".join(lines)}


def added_steps(text: str) -> None:
    """The steps issue 43 added to ``secrets._scan``, behind the same gates."""
    if "\n" in text:
        secrets._wrap_cuts(text)
    secrets._cued(text)
    if any(p in text for p in secrets._PREFIXES):
        secrets._prefixed(text)


def timed(fn, text: str, runs: int) -> float:
    """Median wall milliseconds of ``fn(text)`` over ``runs`` runs, the detection memo cleared before each."""
    out = []
    for _ in range(runs):
        secrets.clear_memo()
        t0 = time.perf_counter()
        fn(text)
        out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(out)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--words", type=int, default=5000, help="words per text (default: 5000)")
    ap.add_argument("--runs", type=int, default=21, help="runs per figure; medians are reported (default: 21)")
    ap.add_argument("--json", type=Path, help="write the figures to this JSON file")
    args = ap.parse_args(argv)
    eval_data = Path(os.environ.get("ENGRAM_EVAL_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    results: dict = {"words": args.words, "runs": args.runs}
    for name, text in texts(eval_data, args.words).items():
        secrets.detect(text)  # imports (syntok, phonenumbers' metadata) and first-use compilation outside the timing
        whole, added = timed(secrets.detect, text, args.runs), timed(added_steps, text, args.runs)
        results[name] = {
            "chars": len(text),
            "detect_ms": round(whole, 2),
            "added_ms": round(added, 2),
            "added_share": round(added / whole, 3),
            "found": sorted(f"{f.entry_type}{' (partial)' if f.partial else ''}" for f in secrets.detect(text)),
        }
    results["load"] = os.getloadavg()[0]
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
