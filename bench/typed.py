"""Figures of the typed-memory extractor and the vault's secret detection on the real conversations.

    python bench/typed.py                        # LoCoMo (all 10) and the LongMemEval-S public split
    python bench/typed.py --facts-only --conversations 0 1 2   # fact precision and recall only, 3 conversations
    python bench/typed.py --json bench/results/typed.json      # the figures docs/figures.md shows

Prints, per corpus: messages, what the vault detector finds per entry type (each a redaction: on these
benchmark chats every hit is a business phone number, e-mail or street address quoted in a reply; no key,
password or card), what the offline rules extractor drafts per memory type, and the median time per
message of each. Reads ``ENGRAM_EVAL_DATA`` (default ``../shared/data``).

Then the fact precision and recall of the rules extractor's semantic drafts on LoCoMo, with the dataset's
``observation`` annotations (facts its authors wrote per speaker and session, each citing the turns it rests on)
as the truth. The annotations are read here for scoring only; the extractor sees the dialog turns alone. A
draft matches an annotation when the annotation cites the turn the draft was read from and the MiniLM cosine of
the draft's summary and the annotation's text is at least ``MATCH_COSINE`` (0.6: "Melanie likes painting" scores
0.87 with "Painting is a fun way for Melanie to express her feelings and get creative", 0.33 with "Melanie is going
swimming with the kids"; "Deborah likes cats" 0.58 with "Max, Deborah's mother's cat, is 8 years old").
Precision: drafts matching some annotation / drafts; recall: annotations matched by some draft / annotations.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib.locomo import locomo_path, parse_evidence  # noqa: E402
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


#: A draft matches an annotation when the annotation cites the draft's source turn and their MiniLM cosine is
#: at least this (see the module docstring).
MATCH_COSINE = 0.6


def annotations(sample: dict) -> list[tuple[str, set[str]]]:
    """LoCoMo's ``observation`` annotations of one sample: (text, the turn ids it cites), for scoring only."""
    out = []
    for per_speaker in (sample.get("observation") or {}).values():
        for items in per_speaker.values():
            for item in items:
                text, evidence = item[0], item[1] if len(item) > 1 else []
                out.append((text, set(parse_evidence(evidence if isinstance(evidence, list) else [evidence]))))
    return out


def fact_scores(sample: dict, index: int, embed, threshold: float = MATCH_COSINE) -> dict:
    """The rules extractor's semantic drafts on one LoCoMo sample's turns scored against its ``observation``
    annotations: {'drafts', 'matched_drafts', 'annotations', 'matched_annotations', 'pairs'} where ``pairs`` lists
    (draft summary, best annotation, cosine) of each draft. ``embed``: texts -> L2-normalised vectors."""
    messages = locomo_sample_messages(sample, index)
    seen = [
        Seen(text=m.display_text(), kind="text", captured_at=m.timestamp, speaker=m.speaker, message_id=m.message_id)
        for m in messages
    ]
    drafts = RulesExtractor().extract(seen, "user").semantic
    truth = annotations(sample)
    matched_drafts, matched_truth, pairs = 0, set(), []
    if drafts and truth:
        sims = embed([d.summary for d in drafts]) @ embed([t for t, _ in truth]).T
        for di, d in enumerate(drafts):
            turns = {seen[s].message_id for s in d.sources}
            cands = [(float(sims[di, ti]), ti) for ti, (_, ev) in enumerate(truth) if ev & turns]
            hits = [ti for c, ti in cands if c >= threshold]
            matched_drafts += bool(hits)
            matched_truth.update(hits)
            best = max(cands, default=(0.0, None))
            pairs.append((d.summary, truth[best[1]][0] if best[1] is not None else "", best[0]))
    return {
        "drafts": len(drafts),
        "matched_drafts": matched_drafts,
        "annotations": len(truth),
        "matched_annotations": len(matched_truth),
        "pairs": pairs,
    }


#: The issue-45 protocol: choices are made on LoCoMo conversations 0-4 and reported on 5-9 too
HALVES = {"chosen_on": range(0, 5), "held_out": range(5, 10)}


def _ratios(total: Counter) -> dict:
    precision = total["matched_drafts"] / total["drafts"] if total["drafts"] else 0.0
    recall = total["matched_annotations"] / total["annotations"] if total["annotations"] else 0.0
    return {"precision": round(precision, 3), "recall": round(recall, 3), **total}


def facts_figures(samples: list[dict], indices: list[int], threshold: float, show: int) -> dict:
    """Fact precision and recall over the LoCoMo samples ``indices``, printed per conversation, per half
    (``HALVES``: "chosen on" 0-4, "held out" 5-9, side by side) and in total: {'all': {...}, 'chosen_on': {...},
    'held_out': {...}}, each {'precision', 'recall', 'drafts', 'matched_drafts', 'annotations',
    'matched_annotations'} (a half none of ``indices`` falls in is left out)."""
    from engram.schemas.settings import get_settings
    from engram.workers.models import get_model

    model = get_model("embedding", get_settings())

    def embed(texts: list[str]) -> np.ndarray:
        v = np.asarray(model.embed(texts), dtype=np.float32)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)

    per: dict[int, Counter] = {}
    print(
        f"LoCoMo facts (rules extractor vs observation annotations; match: same turn and MiniLM cosine >= {threshold}):"
    )
    for i in indices:
        got = fact_scores(samples[i], i, embed, threshold)
        per[i] = Counter({k: v for k, v in got.items() if k != "pairs"})
        print(
            f"  {locomo_sample_id(samples[i], i)}: {got['drafts']} drafts, {got['matched_drafts']} matching; "
            f"{got['matched_annotations']} of {got['annotations']} annotations found"
        )
        for summary, best, cos in got["pairs"][:show]:
            print(f"    {cos:.2f}  {summary!r}  ~  {best!r}")
    out = {"all": _ratios(sum(per.values(), Counter()))}
    for half, span in HALVES.items():
        if any(i in span for i in per):
            out[half] = _ratios(sum((c for i, c in per.items() if i in span), Counter()))
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
    ap.add_argument("--match-cosine", type=float, default=MATCH_COSINE, help="cosine a match needs")
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
