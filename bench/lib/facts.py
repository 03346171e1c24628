"""Fact precision and recall of the offline rules extractor on LoCoMo: its semantic drafts scored against the
dataset's ``observation`` annotations (facts its authors wrote per speaker and session, each citing the turns it
rests on), read here for scoring only; the extractor sees the dialog turns alone.

A draft matches an annotation when the annotation cites the turn the draft was read from and the MiniLM cosine of
the draft's summary and the annotation's text is at least ``MATCH_COSINE``. Precision: drafts matching some
annotation / drafts; recall: annotations matched by some draft / annotations. Used by ``bench/typed.py`` (the
figures) and ``tests/bench/test_typed_facts.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from bench.lib.locomo import parse_evidence
from engram.workers.extract.base import Seen
from engram.workers.extract.rules import RulesExtractor
from engram.workers.media.conversations import locomo_sample_messages

#: A draft matches an annotation when the annotation cites the draft's source turn and their MiniLM cosine is at
#: least this (0.6: "Melanie likes painting" scores 0.87 with "Painting is a fun way for Melanie to express her
#: feelings and get creative", 0.33 with "Melanie is going swimming with the kids"; "Deborah likes cats" 0.58 with
#: "Max, Deborah's mother's cat, is 8 years old").
MATCH_COSINE = 0.6

#: The issue-45 protocol: choices are made on LoCoMo conversations 0-4 and reported on 5-9 too.
HALVES = {"chosen_on": range(0, 5), "held_out": range(5, 10)}

Embed = Callable[[list[str]], np.ndarray]


def embedder() -> Embed:
    """The settings' embedding model (MiniLM by default) as texts -> L2-normalised float32 rows (n, dim)."""
    from engram.schemas.settings import get_settings  # on demand: the model loads only when scoring
    from engram.workers.models import get_model  # on demand: as above

    model = get_model("embedding", get_settings())

    def embed(texts: list[str]) -> np.ndarray:
        v = np.asarray(model.embed(texts), dtype=np.float32)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)

    return embed


def annotations(sample: dict) -> list[tuple[str, set[str]]]:
    """LoCoMo's ``observation`` annotations of one sample: (text, the turn ids it cites), for scoring only."""
    out = []
    for per_speaker in (sample.get("observation") or {}).values():
        for items in per_speaker.values():
            for item in items:
                text, evidence = item[0], item[1] if len(item) > 1 else []
                out.append((text, set(parse_evidence(evidence if isinstance(evidence, list) else [evidence]))))
    return out


def fact_scores(sample: dict, index: int, embed: Embed, threshold: float = MATCH_COSINE) -> dict:
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


def ratios(total: Counter) -> dict:
    """Precision and recall (rounded to 3 places) of summed ``fact_scores`` counts, with the counts."""
    precision = total["matched_drafts"] / total["drafts"] if total["drafts"] else 0.0
    recall = total["matched_annotations"] / total["annotations"] if total["annotations"] else 0.0
    return {"precision": round(precision, 3), "recall": round(recall, 3), **total}


def by_half(per: dict[int, Counter]) -> dict:
    """{'all': ratios, 'chosen_on': ..., 'held_out': ...} of per-conversation counts (``HALVES``; a half none of
    the conversations falls in is left out)."""
    out = {"all": ratios(sum(per.values(), Counter()))}
    for half, span in HALVES.items():
        if any(i in span for i in per):
            out[half] = ratios(sum((c for i, c in per.items() if i in span), Counter()))
    return out
