"""A forget deletes the OCR text cached for a screenshot without decoding it (issue 46): perceive keeps the digest of
the pixels it read with the observation (``pixel_digests``, the OCR cache's key), so the cached text goes even when
the original is gone already (retention removed it) or no longer decodes; an observation stored without the digest
(before it was kept) has its image decoded, as before."""

from __future__ import annotations

import pytest

from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter
from tests.workers.media.test_bad_input import render_png
from tests.workers.memory.test_records import use_data_dir

T, USER = "default", "alice"
SHOTS = {
    "gone.png": ["Invoice QX7731 approved by Marguerite", "Wire transfer on Monday"],
    "old.png": ["Quarterly roadmap review", "Design team, room 4"],
    "broken.png": ["Dentist appointment moved", "Thursday at 15:30"],
}


def cached(rt, digest: str) -> list[str]:
    """The OCR cache's entries for the pixels of ``digest`` (by any OCR model)."""
    return [k for k in rt.objects.keys(f"cache/{T}/ocr/") if k.endswith(f"/{digest}.json")]


@pytest.fixture
def shots(tmp_path, monkeypatch):
    """Three screenshots of alice's ingested on a fresh embedded default; yields (Runtime, {file name: payload})."""
    from engram.api.embedded import ingest_paths
    from engram.workers.runtime import reset_runtimes

    rt = use_data_dir(monkeypatch, tmp_path / "data")
    paths = [render_png(tmp_path / name, lines) for name, lines in SHOTS.items()]
    out = ingest_paths(paths, T, USER, "laptop", consolidate=False, quiet=True)
    assert len(out["done"]) == 3, out
    names = {r.object_key: r.source_name.rsplit("/", 1)[-1] for r in rt.ledger.user_events(T, USER)}
    points = rt.vectors.scroll(OBSERVATIONS, tenant_filter(T, USER))
    yield rt, {names[p.payload["object_key"]]: p.payload | {"id": str(p.id)} for p in points}
    reset_runtimes()


@pytest.mark.slow  # ~30 s: three screenshots read with OCR, three forgets each compacting the store
def test_forget_deletes_the_cached_ocr_by_the_kept_digest(shots):
    from engram.workers.memory.records import delete_memory, forget_user

    rt, obs = shots
    assert set(obs) == set(SHOTS)
    digest = {name: p["pixel_digests"][p["object_key"]] for name, p in obs.items()}
    assert all(len(cached(rt, d)) == 1 for d in digest.values())  # each screenshot's text is cached by its digest

    # the original is gone (as retention removes it): nothing to decode, the digest kept is read
    rt.objects.delete(obs["gone.png"]["object_key"])
    assert delete_memory(rt, T, obs["gone.png"]["id"]) is not None
    assert cached(rt, digest["gone.png"]) == [] and cached(rt, digest["old.png"])

    # an observation stored before the digest was kept: its image is decoded to find the cache entry
    rt.vectors.set_payload(OBSERVATIONS, [obs["old.png"]["id"]], {"pixel_digests": {}})
    assert delete_memory(rt, T, obs["old.png"]["id"]) is not None
    assert cached(rt, digest["old.png"]) == [] and cached(rt, digest["broken.png"])

    # forgetting the user: the original no longer decodes (its bytes replaced), the digest kept still finds the text
    broken = obs["broken.png"]["object_key"]
    rt.objects.put_bytes(broken, b"not an image any more", "image/png")
    report = forget_user(rt, T, USER)
    assert cached(rt, digest["broken.png"]) == [] and broken in report.objects_deleted
    assert rt.objects.keys(f"cache/{T}/ocr/") == []
