"""Entity-linking evaluation helpers: real media ingested through engram's whole path (ingest, perceive, embed,
link, store), then the entities their observations were linked to.

Used by ``bench/perception.py`` (the figures), ``bench/voices.py`` (the voice linking threshold chosen from measured
similarities: ``choose_threshold``) and the tests (the floors: ``tests/workers/memory/test_entities.py``,
``tests/workers/models/test_voices.py``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def jfk_halves(audio_dir: Path, out_dir: Path) -> list[Path]:
    """jfk.flac cut in two halves, written as two WAV recordings in ``out_dir``."""
    from engram.workers.media import decode as media

    audio = media.decode_audio(audio_dir / "jfk.flac")
    mid = len(audio) // 2
    paths = []
    for i, part in enumerate((audio[:mid], audio[mid:])):
        paths.append(out_dir / f"jfk-half{i}.wav")
        paths[-1].write_bytes(media.wav_bytes(part))
    return paths


def ingest_observations(paths: list[Path], tenant: str) -> dict[str, list]:
    """Ingest ``paths`` as events of ``tenant`` on the current runtime (without consolidation) and return
    {file name: its stored observations (``Observation``)}. Raises RuntimeError when a file fails."""
    from engram.api.cli.main import ingest_paths
    from engram.schemas.observations import Observation
    from engram.workers.runtime import runtime
    from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter

    result = ingest_paths(paths, tenant=tenant, user="bench", device="bench", consolidate=False, quiet=True)
    if result["failed"]:
        raise RuntimeError(f"ingest failed: {result['failed']}")
    out: dict[str, list] = {}
    for rec in runtime().vectors.scroll(OBSERVATIONS, tenant_filter(tenant)):
        payload = {k: v for k, v in rec.payload.items() if k in Observation.model_fields}
        out.setdefault(Path(rec.payload["source_name"]).name, []).append(Observation.model_validate(payload))
    return out


def voice_entities(observations: list) -> set[str]:
    """Ids of the entities the voices of ``observations`` were linked to."""
    return {e for o in observations if o.voice_embedding is not None for e in o.entity_ids}


def reference_matches(tenant: str, clip_observation, refs: dict[str, list[float]]) -> dict[str, tuple[str, float]]:
    """{person: (id of the clip's face entity whose face centroid is nearest the reference, its distance)}."""
    import uuid

    from engram.workers.memory.entities import EntityMemory, centroid
    from engram.workers.models.faces import face_distance
    from engram.workers.runtime import runtime

    memory = EntityMemory(runtime(), tenant)
    entities = {eid: memory.get(uuid.UUID(eid)) for eid in {f.entity_id for f in clip_observation.faces}}
    out = {}
    for person, ref in refs.items():
        dist = {eid: face_distance(centroid(e, "face"), ref) for eid, e in entities.items()}
        best = min(dist, key=dist.get)
        out[person] = (best, dist[best])
    return out


def choose_threshold(same: list[float], different: list[float], false_accepts: float = 0.02) -> float:
    """The linking threshold from measured similarities: the lowest value (to 0.01) that at most ``false_accepts``
    of different-speaker pairs reach, so two people are rarely linked (a wrong link joins two people for good and
    draws their later voices together; a missed one leaves two entities that merge later by name). Raised to
    the same-speaker pairs' minimum when that is higher (no same pair is lost by it). Raises ValueError
    without different-speaker pairs."""
    if not different:
        raise ValueError("no different-speaker pairs to choose a threshold from")
    ranked = sorted(different)
    top = ranked[max(0, int(np.ceil((1 - false_accepts) * len(ranked))) - 1)]  # at most that share lie above it
    t = float(np.ceil((top + 1e-9) * 100) / 100)
    if same and min(same) > t:
        t = float(np.floor(min(same) * 100) / 100)
    return round(t, 2)
