"""Voice entities across recordings (issue 41): how well entity linking gives one person one voice entity.

    python bench/voices.py --json bench/results/voices.json

Recordings: the shared data's multi-speaker files, each file's speakers as truth (``leopard_diarization_test.wav``,
3 speakers, a ``speaker_tag`` per word; ``pyannote_sample.wav``, 2 speakers, RTTM), jfk.flac cut in two recordings
(one speaker in both), ``leopard_test.wav``, plus ``SYNTHETIC`` multi-speaker recordings made here: eight espeak-ng
voices (``VOICES``: different voices, pitches and speeds), each speaking in two or three recordings, two turns a
recording. Every recording goes through engram's ingest plan and perceive task (ASR, speaker clustering, voice
embeddings); each ASR word takes its reference speaker (by time, or by word alignment for leopard).

Printed and written (``--json``):

- **similarities**: cosine similarity of engram's per-speaker voices (one per reference speaker of a recording: the
  duration-weighted mean of the d-vectors of the utterances most of whose words are theirs): the same speaker in
  two recordings, different speakers in two recordings (the pairs the linking threshold decides; within one
  recording the clustering and the cannot-link constraint decide), and the threshold chosen from them
  (``bench.lib.entities.choose_threshold``);
- **pairwise F1** of voice entities over every pair of words of all recordings (a pair is positive when both words
  are one person's): engram's linking at the chosen threshold (recordings linked one by one, as they arrive), at
  the previous default 0.72, "one entity per speaker per file" (perfect clustering within a file, no linking
  across files) and "one entity for all".

Reads ``ENGRAM_EVAL_DATA`` (default ``../shared/data``); needs espeak-ng. Runs on a data dir of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib import entities as be  # noqa: E402
from bench.lib import speech as bs  # noqa: E402

#: (name, espeak-ng voice with its variant, pitch 0-99, words per minute)
VOICES = [
    ("v0", "en-us+m3", 40, 150),
    ("v1", "en-gb+f2", 65, 165),
    ("v2", "en-gb-scotland+m1", 30, 140),
    ("v3", "en-us+f4", 75, 175),
    ("v4", "en-029+m7", 50, 130),
    ("v5", "en-gb-x-rp+f1", 55, 155),
    ("v6", "en-us-nyc+m5", 20, 160),
    ("v7", "en-gb-x-gbcwmd+f5", 85, 145),
]
#: The voices of each synthetic recording, in turn order (each speaks twice); every voice is in 2-3 recordings.
SYNTHETIC = [(0, 1, 2), (3, 4), (5, 6, 7), (0, 3, 5), (1, 4, 6), (2, 7), (0, 6), (1, 3, 7)]
SENTENCES = [
    "The quarterly budget review moved to Thursday afternoon at three.",
    "Please bring the updated hiring plan and the cloud cost numbers.",
    "I booked the flights to Lisbon for the middle of May.",
    "The release ships on Friday with offline sync for the mobile app.",
    "We should call the landlord about the lease renewal before March.",
    "The replication slot on the database server filled the disk again.",
    "My sister is visiting next weekend, so I will be away on Saturday.",
    "Can someone send me the slides from yesterday's planning meeting?",
    "The new espresso machine in the kitchen makes surprisingly good coffee.",
    "Search is forty percent faster since we changed the index settings.",
    "I think the ferry leaves from the south harbour at nine in the morning.",
    "Our team dinner is booked at the seafood place near the market.",
    "The printer on the second floor has been jammed since Monday.",
    "Remember to renew the domain name before the end of the month.",
    "The children's football match was cancelled because of the rain.",
    "I finished reading the report and left comments in the margins.",
    "The train was delayed by twenty minutes outside the central station.",
    "We need two more volunteers for the charity run in October.",
    "The garden needs watering every evening while the weather is this hot.",
    "Let's move the design review to next week when everyone is back.",
    "The invoice batches did not match the ledger by a few pounds.",
    "I left my umbrella in the meeting room on the third floor.",
    "The museum opens late on Thursdays, so we could go after work.",
    "Our internet connection dropped twice during the customer call.",
]
GAP_S = 0.6  # silence between turns
OLD_THRESHOLD = 0.72  # the default before issue 41


def synthetic(out_dir: Path) -> list[tuple[Path, list[bs.Turn]]]:
    """The ``SYNTHETIC`` recordings as 16 kHz WAV files in ``out_dir`` with their reference turns (speaker
    ``syn:<voice>``). Raises FileNotFoundError when espeak-ng is missing."""
    from engram.workers.media.decode import SAMPLE_RATE, decode_audio, wav_bytes

    out, said = [], 0
    for r, voices in enumerate(SYNTHETIC):
        parts, turns, t = [], [], 0.0
        for turn, v in enumerate([*voices, *voices]):
            name, voice, pitch, speed = VOICES[v]
            wav = out_dir / f"turn-{r}-{turn}.wav"
            subprocess.run(
                [
                    "espeak-ng",
                    "-v",
                    voice,
                    "-p",
                    str(pitch),
                    "-s",
                    str(speed),
                    "-w",
                    str(wav),
                    SENTENCES[said % len(SENTENCES)],
                ],
                check=True,
                capture_output=True,
            )
            said += 1
            audio = decode_audio(wav)
            parts += [audio, np.zeros(int(GAP_S * SAMPLE_RATE), dtype=np.float32)]
            turns.append(bs.Turn(t, t + len(audio) / SAMPLE_RATE, f"syn:{name}"))
            t += len(audio) / SAMPLE_RATE + GAP_S
            wav.unlink()
        path = out_dir / f"synthetic-{r}.wav"
        path.write_bytes(wav_bytes(np.concatenate(parts)))
        out.append((path, turns))
    return out


def real(audio_dir: Path, out_dir: Path) -> list[tuple[Path, list[bs.Turn] | str]]:
    """The shared recordings with their truth: reference turns, or ``"leopard"`` (words aligned to the
    reference's ``speaker_tag``)."""
    one = lambda p, who: (p, [bs.Turn(0.0, 1e9, who)])  # noqa: E731
    halves = be.jfk_halves(audio_dir, out_dir)
    rttm = bs.read_rttm(audio_dir / "pyannote_sample.rttm")
    pyannote = [bs.Turn(x.start, x.end, f"pyannote:{x.speaker}") for x in rttm]
    return [
        one(halves[0], "jfk"),
        one(halves[1], "jfk"),
        one(audio_dir / "leopard_test.wav", "leopard-test"),
        (audio_dir / "pyannote_sample.wav", pyannote),
        (audio_dir / "leopard_diarization_test.wav", "leopard"),
    ]


def word_truth(observations: list, truth: list[bs.Turn] | str, audio_dir: Path) -> list[list[str | None]]:
    """The reference speaker of each word of each observation (None where unknown or overlapping)."""
    if truth == "leopard":
        words = [w.word for o in observations for w in o.words]
        labels = iter(bs.align_labels([(w, f"leopard:{s}") for w, s in bs.leopard_speaker_words(audio_dir)], words))
        return [[next(labels) for _ in o.words] for o in observations]
    return [[bs.speaker_at(truth, (w.start_s + w.end_s) / 2) for w in o.words] for o in observations]


def speaker_voices(files: dict[str, tuple[list, list]]) -> list[tuple[str, str, np.ndarray]]:
    """(file, reference speaker, voice) of every speaker of every recording: the duration-weighted mean of the
    voices of the utterances most of whose words are that speaker's, L2-normalised: engram's voice of each
    speaker, apart from its clustering's mistakes. ``files``: {file: (observations, their words' truth)}."""
    out = []
    for name, (observations, truths) in files.items():
        groups: dict[str, list] = {}
        for obs, truth in zip(observations, truths, strict=True):
            who = Counter(t for t in truth if t is not None).most_common(1)
            if obs.voice_embedding is not None and who:
                groups.setdefault(who[0][0], []).append(obs)
        for who, members in groups.items():
            mean = np.average(
                [o.voice_embedding for o in members],
                axis=0,
                weights=[max((o.end_s or 0) - (o.start_s or 0), 1e-3) for o in members],
            )
            out.append((name, who, mean / np.linalg.norm(mean)))
    return out


def similarities(found: list[tuple[str, str, np.ndarray]]) -> dict[str, list[float]]:
    """Cosine similarities of every pair of speaker voices: ``same`` speaker (in two recordings), ``different``
    speakers in two recordings (what the linking threshold decides) and ``different_within`` a recording (what
    the recording's speaker clustering and the cannot-link constraint decide)."""
    out: dict[str, list[float]] = {"same": [], "different": [], "different_within": []}
    for i, (fa, a, va) in enumerate(found):
        for fb, b, vb in found[i + 1 :]:
            kind = "same" if a == b else "different" if fa != fb else "different_within"
            out[kind].append(float(va @ vb))
    return out


def linked(files: dict[str, tuple[list, list]], threshold: float, margin: float | None = None) -> dict[str, list]:
    """Each observation's voice entity (its first entity id) after linking the recordings one by one, in order,
    into a fresh tenant at this threshold: {file: [entity id or None per observation]}."""
    from engram.workers.link import link_observations
    from engram.workers.memory.entities import EntityMemory
    from engram.workers.runtime import runtime

    tenant = f"voices-{uuid.uuid4().hex[:8]}"
    env = {"ENGRAM_ENTITY_VOICE_SIMILARITY": str(threshold)}
    if margin is not None:
        env["ENGRAM_ENTITY_VOICE_MARGIN"] = str(margin)
    out = {}
    with bs.settings_env(**env):
        for name, (observations, _) in files.items():
            copies = [o.model_copy(deep=True, update={"tenant_id": tenant, "entity_ids": []}) for o in observations]
            link_observations(EntityMemory(runtime(), tenant), copies)
            out[name] = [o.entity_ids[0] if o.entity_ids else None for o in copies]
    return out


def f1(files: dict[str, tuple[list, list]], predicted: dict[str, list]) -> dict:
    """Pairwise precision, recall and F1 over every word with a reference speaker (``bs.pairwise_f1``), each word
    labelled by its observation's predicted label."""
    ref, pred = [], []
    for name, (_, truths) in files.items():
        for label, truth in zip(predicted[name], truths, strict=True):
            ref += truth
            pred += [label] * len(truth)
    p, r, f = bs.pairwise_f1(ref, pred)
    return {"precision": round(p, 3), "recall": round(r, 3), "f1": round(f, 3)}


def perceived(recordings: list, audio_dir: Path) -> dict[str, tuple[list, list]]:
    """{file: (its observations through ingest and perceive, their words' truth)}, utterances with words only."""
    out = {}
    for path, truth in recordings:
        observations = sorted(
            (o for o in bs.perceive_file(Path(path)) if o.words), key=lambda o: (o.segment_index, o.start_s or 0.0)
        )
        out[Path(path).name] = (observations, word_truth(observations, truth, audio_dir))
    return out


def spread(values: list[float]) -> dict:
    """min, median, max and count, rounded."""
    return (
        {
            "min": round(min(values), 3),
            "median": round(statistics.median(values), 3),
            "max": round(max(values), 3),
            "n": len(values),
        }
        if values
        else {"n": 0}
    )


def measure(audio_dir: Path, work: Path) -> dict:
    """Every figure of the module docstring, on a data dir under ``work``."""
    files = perceived([*real(audio_dir, work), *synthetic(work)], audio_dir)
    sims = similarities(speaker_voices(files))
    same, different = sims["same"], sims["different"]
    threshold = be.choose_threshold(same, different)
    baseline = {
        name: [f"{name}:{Counter(t for t in ts if t).most_common(1)[0][0] if any(ts) else None}" for ts in truths]
        for name, (_, truths) in files.items()
    }
    single = {name: ["all"] * len(obs) for name, (obs, _) in files.items()}
    speakers = {t for _, truths in files.values() for ts in truths for t in ts if t}
    return {
        "recordings": len(files),
        "speakers": len(speakers),
        "words": sum(1 for _, truths in files.values() for ts in truths for t in ts if t),
        "similarity": {
            "same_speaker": spread(same),
            "different_speakers": spread(different),
            "different_speakers_within_a_recording": spread(sims["different_within"]),
            "different_above_threshold": sum(d >= threshold for d in different),
            "same_below_threshold": sum(s < threshold for s in same),
        },
        "threshold": threshold,
        "pairwise_f1": {
            f"engram (threshold {threshold})": f1(files, linked(files, threshold)),
            f"engram (threshold {OLD_THRESHOLD})": f1(files, linked(files, OLD_THRESHOLD)),
            "one entity per speaker per file": f1(files, baseline),
            "one entity for all": f1(files, single),
        },
        "load": Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    data = Path(os.environ.get("ENGRAM_EVAL_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    audio_dir = data / "audio"
    with tempfile.TemporaryDirectory(prefix="engram-voices-") as tmp:
        os.environ["ENGRAM_DATA_DIR"] = str(Path(tmp) / "data")
        for var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT"):
            os.environ.pop(var, None)
        from engram.workers.runtime import reset_runtimes

        try:
            results = measure(audio_dir, Path(tmp))
        finally:
            reset_runtimes()  # the store closes before its folder goes
    sim = results["similarity"]
    print(f"{results['recordings']} recordings, {results['speakers']} speakers, {results['words']} words")
    print("cosine similarity of per-speaker voices:")
    for kind in ("same_speaker", "different_speakers", "different_speakers_within_a_recording"):
        s = sim[kind]
        print(
            f"  {kind.replace('_', ' '):38} n={s['n']:4}  min {s['min']:.3f}  median {s['median']:.3f}  "
            f"max {s['max']:.3f}"
        )
    print(
        f"chosen threshold {results['threshold']}: {sim['different_above_threshold']} different-speaker pairs "
        f"above it, {sim['same_below_threshold']} same-speaker pairs below"
    )
    print("pairwise F1 of voice entities over all words (precision / recall / F1):")
    for name, m in results["pairwise_f1"].items():
        print(f"  {name:34} {m['precision']:.3f} / {m['recall']:.3f} / {m['f1']:.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
