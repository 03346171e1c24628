"""Bad input: every broken file ends ``failed`` with a one-line reason and its stage, is kept in the ledger,
and never stops the good files of the same batch. Also: not-media files are skipped, duplicates dropped."""

from __future__ import annotations

import io
import json
import os
import random
import struct
import subprocess
import sys
import zlib
from pathlib import Path

from engram.api.cli.main import ingest_paths
from engram.schemas.events import EventStatus

REPO = Path(__file__).resolve().parents[3]
WHO = {"tenant": "acme", "user": "alice", "device": "laptop"}


def render_png(path: Path, lines: list[str], size: tuple[int, int] = (640, 200), corner: str = "") -> Path:
    """Write a PNG screenshot with ``lines`` of black text on white (DejaVu Sans 24 px when available)
    and an optional small ``corner`` label (bottom right); returns ``path``."""
    from PIL import Image, ImageDraw, ImageFont

    try:
        font = ImageFont.truetype("DejaVuSans.ttf", 24)
        small = ImageFont.truetype("DejaVuSans.ttf", 12)
    except OSError:
        font = small = ImageFont.load_default(size=24)
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((20, 20 + 40 * i), line, fill="black", font=font)
    if corner:
        draw.text((size[0] - 60, size[1] - 20), corner, fill="black", font=small)
    img.save(path, format="PNG")
    return path


def png_chunk(kind: bytes, data: bytes) -> bytes:
    """One PNG chunk: length, type, data, CRC."""
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bomb(width: int = 30000, height: int = 30000) -> bytes:
    """A ~100-byte PNG whose header declares ``width`` x ``height`` RGB pixels (a decompression bomb)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", zlib.compress(b"\x00" * 1024))
        + png_chunk(b"IEND", b"")
    )


def small_mp4() -> bytes:
    """A real 1 s, 64x64 MPEG-4 video made with PyAV (moov atom after the media data)."""
    import av
    import numpy as np

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        for i in range(10):
            frame = av.VideoFrame.from_ndarray(np.full((64, 64, 3), i * 20, np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


#: file name -> (bytes maker, words one of which the failure reason must contain)
BAD_FILES = {
    "a-empty.png": (lambda good: b"", ["empty"]),
    "b-truncated.png": (lambda good: good[: len(good) // 2], ["truncated"]),
    "c-truncated.jpg": (lambda good: _jpeg(good)[: len(_jpeg(good)) // 2], ["truncated"]),
    "d-garbled.png": (lambda good: _garble_idat(good), ["corrupt"]),
    "e-text-as-image.png": (lambda good: b"just some notes, not an image\n" * 3, ["not screenshot media"]),
    "f-text-as-video.mp4": (lambda good: b"just some notes, not a video\n" * 3, ["not clip media"]),
    "g-random-after-ftyp.mp4": (
        lambda good: b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom" + random.Random(7).randbytes(8000),
        ["not a readable", "cannot be decoded"],
    ),
    "h-truncated-real.mp4": (
        lambda good: small_mp4()[: len(small_mp4()) // 2],  # cut before its moov atom
        ["not a readable", "cannot be decoded", "neither audio nor video"],
    ),
    "i-empty.mp4": (lambda good: b"", ["empty"]),
    "z-bomb.png": (lambda good: png_bomb(), ["too large"]),
}


def _jpeg(png: bytes) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").save(out, format="JPEG", quality=90)
    return out.getvalue()


def _garble_idat(png: bytes) -> bytes:
    data = bytearray(png)
    at = data.find(b"IDAT") + 10
    data[at : at + 32] = bytes(b ^ 0xFF for b in data[at : at + 32])
    return bytes(data)


def make_bad_folder(folder: Path) -> Path:
    """``folder`` with every file of ``BAD_FILES``, one good screenshot (``m-good.png``, sorted in the
    middle of the batch) and a plain text file (``notes.txt``); returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    good = render_png(folder / "m-good.png", ["Quarterly budget review", "invoice total 4812 dollars"])
    good_bytes = good.read_bytes()
    for name, (make, _) in BAD_FILES.items():
        (folder / name).write_bytes(make(good_bytes))
    (folder / "notes.txt").write_text("a plain text note, not media and not a conversation\n")
    return folder


def test_bad_files_fail_with_reasons_and_do_not_stop_good_ones(engram_env, tmp_path):
    folder = make_bad_folder(tmp_path / "batch")
    out = ingest_paths([folder], **WHO, quiet=True)

    assert [p.name for p, _ in out["done"]] == ["m-good.png"]
    assert out["done"][0][1].observations >= 1
    assert [(p.name, why) for p, why in out["ignored"]] == [("notes.txt", "not media or a conversation file")]
    assert out["skipped"] == []
    failed = {p.name: rec for p, rec in out["failed"]}
    assert sorted(failed) == sorted(BAD_FILES)
    for name, (_, words) in BAD_FILES.items():
        rec = failed[name]
        assert rec.status is EventStatus.failed
        assert rec.stage == "ingest", name
        assert rec.reason and "\n" not in rec.reason, name
        assert any(w in rec.reason.lower() for w in words), f"{name}: {rec.reason!r} lacks one of {words}"

    # the ledger keeps every failure (the quarantine) with its stage and reason
    ledger = engram_env.ledger
    quarantined = {Path(r.source_name).name: r for r in ledger.records("acme", EventStatus.failed)}
    assert sorted(quarantined) == sorted(BAD_FILES)
    for name, rec in quarantined.items():
        assert (rec.stage, rec.reason) == (failed[name].stage, failed[name].reason)
        assert rec.object_key.startswith("media/acme/")
    assert ledger.counts("acme") == {EventStatus.failed: len(BAD_FILES), EventStatus.done: 1}


def test_image_bomb_is_refused_without_decoding(tmp_path):
    """In a process limited to 1 GiB of address space: refused by its header, not a MemoryError."""
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_bomb())
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
        "from engram.workers.media.decode import MediaError, load_image; data = open(sys.argv[1], 'rb').read()\n"
        "try:\n    load_image(data, 60_000_000)\nexcept MediaError as exc:\n    print('refused:', exc)\n"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", code, str(bomb)], capture_output=True, text=True, cwd=REPO, env=env, timeout=60
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("refused: image too large: declared 30000x30000")


def test_plain_text_is_skipped_not_failed(engram_env, tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "readme.txt").write_text("hello\n")
    (folder / "config.json").write_text('{"theme": "dark"}')
    out = ingest_paths([folder], **WHO, quiet=True)
    assert sorted(p.name for p, _ in out["ignored"]) == ["config.json", "readme.txt"]
    assert all("not media" in why for _, why in out["ignored"])
    assert out["failed"] == [] and out["done"] == []
    assert engram_env.ledger.counts("acme") == {}  # never published


def test_same_file_twice_is_an_exact_duplicate(engram_env, tmp_path):
    shot = render_png(tmp_path / "shot.png", ["Standup notes", "ship the ledger fix"])
    first = ingest_paths([shot], **WHO, quiet=True, consolidate=False)
    [(_, rec1)] = first["done"]
    second = ingest_paths([shot], **WHO, quiet=True, consolidate=False)
    assert second["done"] == [] and second["failed"] == []
    [(_, rec2)] = second["skipped"]
    assert rec2.status is EventStatus.skipped and rec2.stage == "ingest"
    assert "exact duplicate" in rec2.reason and str(rec1.event_id) in rec2.reason
    # another tenant may hold the same content
    other = ingest_paths([shot], tenant="globex", user="bob", device="laptop", quiet=True, consolidate=False)
    assert [p.name for p, _ in other["done"]] == ["shot.png"]


def test_each_user_of_a_tenant_gets_their_own_copy_of_shared_content(engram_env, tmp_path):
    """One file published by two users of a tenant: stored once (one object), observed once per user; forgetting
    one user leaves the other's observations and the object."""
    from engram.schemas.search import SearchRequest
    from engram.workers.memory.records import forget_user
    from engram.workers.memory.search import search

    chat = tmp_path / "shared.jsonl"
    chat.write_text(
        json.dumps(
            {
                "message_id": "m1",
                "session_id": "s1",
                "speaker": "Ann",
                "text": "The offsite is in Lisbon on June 3",
                "timestamp": "2024-05-02T18:03:00Z",
            }
        )
    )
    runs = {
        u: ingest_paths([chat], tenant="acme", user=u, device="laptop", quiet=True, consolidate=False)
        for u in ("alice", "bob")
    }
    assert all(len(out["done"]) == 1 and not out["skipped"] for out in runs.values()), runs
    [(_, rec_a)], [(_, rec_b)] = runs["alice"]["done"], runs["bob"]["done"]
    assert rec_a.object_key == rec_b.object_key  # one object

    def found(user: str) -> list[str]:
        resp = search(
            engram_env, SearchRequest(query="where is the offsite", tenant_id="acme", user_id=user, reinforce=False)
        )
        return [h.text for h in resp.hits if h.user_id == user]

    assert any("Lisbon" in t for t in found("alice")) and any("Lisbon" in t for t in found("bob"))
    forget_user(engram_env, "acme", "alice")
    assert not found("alice") and any("Lisbon" in t for t in found("bob"))
    assert engram_env.objects.exists(rec_b.object_key)


def test_near_identical_screenshots_from_one_device(engram_env, tmp_path):
    lines = ["Inbox (3) - Mail", "Re: quarterly budget review", "Meeting moved to Thursday"]
    a = render_png(tmp_path / "a.png", lines, corner="10:41")
    b = render_png(tmp_path / "b.png", lines, corner="10:42")  # only the clock changed
    assert a.read_bytes() != b.read_bytes()
    out = ingest_paths([a, b], **WHO, quiet=True, consolidate=False)
    assert [p.name for p, _ in out["done"]] == ["a.png"]
    [(path, rec)] = out["skipped"]
    assert path.name == "b.png"
    assert "near-duplicate" in rec.reason and str(out["done"][0][1].event_id) in rec.reason
    # a near-identical frame from another device is that device's first frame: kept
    c = render_png(tmp_path / "c.png", lines, corner="10:43")
    other = ingest_paths([c], tenant="acme", user="alice", device="phone", quiet=True, consolidate=False)
    assert [p.name for p, _ in other["done"]] == ["c.png"]


def test_cli_prints_one_line_per_bad_file(engram_env, tmp_path):
    from typer.testing import CliRunner

    from engram.api.cli.main import app

    folder = make_bad_folder(tmp_path / "cli")
    result = CliRunner().invoke(
        app, ["ingest", str(folder), "--tenant", "acme", "--user", "alice", "--device", "laptop", "--no-consolidate"]
    )
    assert result.exit_code == 0, result.output  # one file was good
    failed_lines = [ln for ln in result.stderr.splitlines() if ln.startswith("failed ")]
    assert len(failed_lines) == len(BAD_FILES), result.stderr
    for name, (_, words) in BAD_FILES.items():
        mine = [ln for ln in failed_lines if f"{folder / name}: " in ln]
        assert len(mine) == 1, f"{name}: {mine}"
        assert any(w in mine[0].lower() for w in words), mine[0]
        assert "(stage ingest)" in mine[0]
    assert "m-good.png" not in result.stderr
    assert "1 done" in result.stdout and f"{len(BAD_FILES)} failed" in result.stdout
    [skip_line] = [ln for ln in result.stdout.splitlines() if "notes.txt" in ln]
    assert skip_line.strip().startswith("skipped ") and "not media" in skip_line


def test_cli_exits_non_zero_when_every_file_failed(engram_env, tmp_path):
    from typer.testing import CliRunner

    from engram.api.cli.main import app

    folder = tmp_path / "allbad"
    folder.mkdir()
    (folder / "empty.png").write_bytes(b"")
    (folder / "bomb.png").write_bytes(png_bomb())
    result = CliRunner().invoke(
        app, ["ingest", str(folder), "--tenant", "acme", "--user", "alice", "--device", "laptop", "--no-consolidate"]
    )
    assert result.exit_code == 1
    assert "empty.png: empty file (0 bytes)" in result.stderr
    assert "bomb.png: image too large" in result.stderr


def test_cli_reports_a_missing_path(engram_env, tmp_path):
    from typer.testing import CliRunner

    from engram.api.cli.main import app

    result = CliRunner().invoke(app, ["ingest", str(tmp_path / "missing.png"), "--no-consolidate"])
    assert result.exit_code == 2
    assert "missing.png" in result.stderr and "no such file" in result.stderr


def test_invalid_conversation_fails_with_its_location_other_json_is_skipped(engram_env, tmp_path):
    folder = tmp_path / "convs"
    folder.mkdir()
    good = {"message_id": "m1", "session_id": "s1", "speaker": "Ann", "text": "hi", "timestamp": "2024-05-01T10:00:00Z"}
    (folder / "broken.jsonl").write_text(json.dumps(good) + "\n" + json.dumps({**good, "speaker": ""}) + "\n")
    (folder / "cut.jsonl").write_text(json.dumps(good) + "\n" + json.dumps({**good, "message_id": "m2"})[:30])
    (folder / "settings.json").write_text(json.dumps({"theme": "dark", "tests": [1, 2]}))
    out = ingest_paths([folder], **WHO, quiet=True)
    failed = {p.name: r for p, r in out["failed"]}
    assert set(failed) == {"broken.jsonl", "cut.jsonl"}
    assert "invalid conversation record at 1.speaker" in failed["broken.jsonl"].reason
    assert "invalid conversation record at line 2: not JSON" in failed["cut.jsonl"].reason  # failed, not ignored
    assert [p.name for p, _ in out["ignored"]] == ["settings.json"]
