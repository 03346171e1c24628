"""Figures of the typed-memory extractor and the vault's secret detection on the real conversations.

    python bench/typed.py            # LoCoMo (all 10) and the LongMemEval-S public split

Prints, per corpus: messages, what the vault detector finds per entry type (each a redaction: on these
benchmark chats every hit is a business phone number, e-mail or street address quoted in a reply; no key,
password or card), what the offline rules extractor drafts per memory type, and the median time per
message of each. Reads ``ENGRAM_EVAL_DATA`` (default ``../shared/data``).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.locomo import locomo_path  # noqa: E402
from engram.workers.adapters import parse_conversation_file  # noqa: E402
from engram.workers.extract.base import Seen  # noqa: E402
from engram.workers.extract.rules import RulesExtractor  # noqa: E402
from engram.workers.vault import detect  # noqa: E402


def corpus_figures(name: str, conversations: list[list]) -> None:
    """Detection and extraction over ``conversations`` (lists of ConversationMessage), printed."""
    found, drafts, detect_us, extract_us = Counter(), Counter(), [], []
    extractor = RulesExtractor()
    for messages in conversations:
        for m in messages:
            t0 = time.perf_counter()
            found.update(f.entry_type for f in detect(m.display_text()))
            detect_us.append((time.perf_counter() - t0) * 1e6)
        seen = [Seen(text=m.display_text(), kind="text", captured_at=m.timestamp, speaker=m.speaker,
                     message_id=m.message_id, about_user=m.speaker.lower() == "user") for m in messages]
        t0 = time.perf_counter()
        got = extractor.extract(seen, "user")
        extract_us.append((time.perf_counter() - t0) * 1e6 / max(1, len(seen)))
        drafts.update({k: len(getattr(got, k)) for k in ("semantic", "procedural", "resource", "core")})
    n = sum(len(c) for c in conversations)
    print(f"{name}: {n} messages in {len(conversations)} conversations")
    print(f"  vault detections: {dict(found) or 'none'}; median {statistics.median(detect_us):.0f} µs per message")
    print(f"  rules drafts: {dict(drafts)}; median {statistics.median(extract_us):.0f} µs per message")


def main() -> None:
    data = locomo_path().parent
    if not locomo_path().exists():
        sys.exit(f"LoCoMo not found at {locomo_path()} (set ENGRAM_EVAL_DATA)")
    locomo = parse_conversation_file(locomo_path().read_bytes())
    by_sample: dict[str, list] = {}
    for m in locomo:
        by_sample.setdefault(m.session_id.split("/")[0], []).append(m)
    corpus_figures("LoCoMo", list(by_sample.values()))
    lme = [parse_conversation_file(p.read_bytes()) for p in sorted((data / "longmemeval_s").glob("*.json"))]
    corpus_figures("LongMemEval-S", lme)


if __name__ == "__main__":
    main()
