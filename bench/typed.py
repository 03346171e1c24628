"""Figures of the typed-memory extractor and the vault's secret detection on the real conversations.

    python bench/typed.py                        # LoCoMo (all 10) and the LongMemEval-S public split
    python bench/typed.py --facts-only --conversations 0 1 2   # fact precision and recall only, 3 conversations
    python bench/typed.py --json bench/results/typed.json      # the figures docs/figures.md shows

Prints, per corpus: messages, what the vault detector finds per entry type (each a redaction: on these
benchmark chats every hit is a business phone number, e-mail or street address quoted in a reply; no key,
password or card), what the offline rules extractor drafts per memory type, and the median time per
message of each. Reads ``ENGRAM_EVAL_DATA`` (default ``../shared/data``).

Then the fact precision and recall of the rules extractor's semantic drafts on LoCoMo, scored by
``bench/lib/facts.py`` against the dataset's ``observation`` annotations (its docstring says how a draft matches).
Printed per half, side by side: "chosen on" (conversations 0-4, where every choice of the extractor is made) and
"held out" (5-9), as issue 45's protocol asks. Then the core block of the first speaker of conversations 0 and 5
(``--profiles``) taken as the user, as consolidation would write it. ``--json``: ``facts.<all|chosen_on|held_out>``
({precision, recall, drafts, matched_drafts, annotations, matched_annotations}), ``profiles``, ``load``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib import facts  # noqa: E402
from bench.lib.locomo import locomo_path  # noqa: E402
from engram.workers.extract.base import Seen  # noqa: E402
from engram.workers.extract.rules import RulesExtractor  # noqa: E402
from engram.workers.media.conversations import locomo_sample_id, locomo_sample_messages, parse_conversation_file  # noqa: E402
from engram.workers.memory.vault import detect  # noqa: E402


def corpus_figures(name: str, conversations: list[list]) -> None:
    """Detection and extraction over ``conversations`` (lists of ConversationMessage), printed."""
    found, drafts, detect_us, extract_us = Counter(), Counter(), [], []
    extractor = RulesExtractor()
    for messages in conversations:
        for m in messages:
            t0 = time.perf_counter()
            found.update(f.entry_type for f in detect(m.display_text()))
            detect_us.append((time.perf_counter() - t0) * 1e6)
        seen = [
            Seen(
                text=m.display_text(),
                kind="text",
                captured_at=m.timestamp,
                speaker=m.speaker,
                message_id=m.message_id,
                about_user=m.speaker.lower() == "user",
            )
            for m in messages
        ]
        t0 = time.perf_counter()
        got = extractor.extract(seen, "user")
        extract_us.append((time.perf_counter() - t0) * 1e6 / max(1, len(seen)))
        drafts.update({k: len(getattr(got, k)) for k in ("semantic", "procedural", "resource", "core")})
    n = sum(len(c) for c in conversations)
    print(f"{name}: {n} messages in {len(conversations)} conversations")
    print(f"  vault detections: {dict(found) or 'none'}; median {statistics.median(detect_us):.0f} µs per message")
    print(f"  rules drafts: {dict(drafts)}; median {statistics.median(extract_us):.0f} µs per message")


def facts_figures(samples: list[dict], indices: list[int], threshold: float, show: int) -> dict:
    """Fact precision and recall over the LoCoMo samples ``indices`` (``bench.lib.facts``), printed per
    conversation, per half (``facts.HALVES``: "chosen on" 0-4, "held out" 5-9, side by side) and in total:
    ``facts.by_half``'s {'all': {...}, 'chosen_on': {...}, 'held_out': {...}}, each {'precision', 'recall',
    'drafts', 'matched_drafts', 'annotations', 'matched_annotations'}."""
    embed = facts.embedder()
    per: dict[int, Counter] = {}
    print(
        f"LoCoMo facts (rules extractor vs observation annotations; match: same turn and MiniLM cosine >= {threshold}):"
    )
    for i in indices:
        got = facts.fact_scores(samples[i], i, embed, threshold)
        per[i] = Counter({k: v for k, v in got.items() if k != "pairs"})
        print(
            f"  {locomo_sample_id(samples[i], i)}: {got['drafts']} drafts, {got['matched_drafts']} matching; "
            f"{got['matched_annotations']} of {got['annotations']} annotations found"
        )
        for summary, best, cos in got["pairs"][:show]:
            print(f"    {cos:.2f}  {summary!r}  ~  {best!r}")
    out = facts.by_half(per)
    print(f"  {'':10s} {'drafts':>7s} {'precision':>10s} {'annotations':>12s} {'recall':>7s}")
    for key, label in (("chosen_on", "chosen on"), ("held_out", "held out"), ("all", "all")):
        if key in out:
            f = out[key]
            print(f"  {label:10s} {f['drafts']:7d} {f['precision']:10.3f} {f['annotations']:12d} {f['recall']:7.3f}")
    return out


def profile(sample: dict, index: int, limit: int = 2000) -> str:
    """The core ``human`` block of a user after one LoCoMo conversation: the conversation's first speaker taken as
    the user, the rules extractor's core drafts merged as consolidation merges them (``dynamics.merge_block``,
    ``limit`` characters, the default ``core_memory_limit``)."""
    from engram.workers.memory.dynamics import merge_block  # on demand: only where a profile is printed

    user = sample["conversation"]["speaker_a"]
    seen = [
        Seen(
            text=m.display_text(),
            kind="text",
            captured_at=m.timestamp,
            speaker=m.speaker,
            message_id=m.message_id,
            about_user=m.speaker == user,
        )
        for m in locomo_sample_messages(sample, index)
    ]
    got = RulesExtractor().extract(seen, user)
    return merge_block("", [f for c in got.core if c.label == "human" for f in c.facts], limit)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--conversations",
        type=int,
        nargs="*",
        default=None,
        help="LoCoMo conversations (0-9) to score facts on (default: all)",
    )
    ap.add_argument("--match-cosine", type=float, default=facts.MATCH_COSINE, help="cosine a match needs")
    ap.add_argument(
        "--show",
        type=int,
        default=0,
        help="print this many drafts per conversation with their closest annotation of the same turn",
    )
    ap.add_argument("--facts-only", action="store_true", help="only the fact precision and recall")
    ap.add_argument(
        "--profiles",
        type=int,
        nargs="*",
        default=[0, 5],
        help="LoCoMo conversations whose first speaker's core block is printed (default: 0 and 5)",
    )
    ap.add_argument("--json", type=Path, default=None, help="write the fact figures and profiles here")
    args = ap.parse_args(argv)
    data = locomo_path().parent
    if not locomo_path().exists():
        sys.exit(f"LoCoMo not found at {locomo_path()} (set ENGRAM_EVAL_DATA)")
    if not args.facts_only:
        locomo = parse_conversation_file(locomo_path().read_bytes())
        by_sample: dict[str, list] = {}
        for m in locomo:
            by_sample.setdefault(m.session_id.split("/")[0], []).append(m)
        corpus_figures("LoCoMo", list(by_sample.values()))
        lme = [parse_conversation_file(p.read_bytes()) for p in sorted((data / "longmemeval_s").glob("*.json"))]
        corpus_figures("LongMemEval-S", lme)
    samples = json.loads(locomo_path().read_bytes())
    figures = facts_figures(
        samples,
        args.conversations if args.conversations is not None else list(range(len(samples))),
        args.match_cosine,
        args.show,
    )
    profiles = {}
    for i in args.profiles:
        profiles[samples[i]["conversation"]["speaker_a"]] = block = profile(samples[i], i)
        print(
            f"core block of {samples[i]['conversation']['speaker_a']} after {locomo_sample_id(samples[i], i)} "
            f"(the first speaker as the user):"
        )
        print("\n".join(f"  {line}" for line in block.splitlines()) or "  (empty)")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "facts": figures,
                    "match_cosine": args.match_cosine,
                    "profiles": profiles,
                    "load": round(os.getloadavg()[0], 2),
                },
                indent=2,
                ensure_ascii=False,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
