"""Capture time from the content: EXIF in a photo, creation_time in an MP4, a date tag in a FLAC; the file's
time when the content has none (or an unset clock's 1970); the source recorded on the event."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime

import pytest
from PIL import Image

from engram.api.local import classify, publish_file
from engram.schemas.events import MediaKind
from engram.workers.media import decode as media

MTIME = datetime(2020, 2, 3, 4, 5, 6, tzinfo=UTC)


def _age(path) -> None:
    os.utime(path, (MTIME.timestamp(), MTIME.timestamp()))


def _photo(path, original: str | None, offset: str | None = None) -> None:
    exif = Image.Exif()
    if original:
        ifd = exif.get_ifd(0x8769)
        ifd[0x9003] = original
        if offset:
            ifd[0x9011] = offset
    Image.new("RGB", (64, 48), (200, 120, 40)).save(path, format="JPEG", exif=exif)
    _age(path)


def _ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True, timeout=120)


def test_exif_time_with_and_without_an_offset(tmp_path, monkeypatch):
    p = tmp_path / "a.jpg"
    _photo(p, "2023:07:14 09:30:00", "+02:00")
    assert media.content_capture_time(p, MediaKind.screenshot) == (
        datetime(2023, 7, 14, 7, 30, tzinfo=UTC),
        "exif:DateTimeOriginal",
    )
    _photo(p, "2023:07:14 09:30:00")  # no offset: the camera's local time, read in ENGRAM_TIMEZONE's zone
    monkeypatch.setenv("ENGRAM_TIMEZONE", "America/Los_Angeles")  # PDT, UTC-7
    assert media.content_capture_time(p, MediaKind.screenshot) == (
        datetime(2023, 7, 14, 16, 30, tzinfo=UTC),
        "exif:DateTimeOriginal",
    )
    _photo(p, "1970:01:01 00:00:00")  # an unset clock
    assert media.content_capture_time(p, MediaKind.screenshot) is None


def test_video_creation_time_and_audio_date_tag(tmp_path):
    clip, song = tmp_path / "c.mp4", tmp_path / "s.flac"
    _ffmpeg(
        "-f",
        "lavfi",
        "-i",
        "testsrc=duration=1:size=64x64:rate=5",
        "-metadata",
        "creation_time=2022-03-04T05:06:07Z",
        "-pix_fmt",
        "yuv420p",
        str(clip),
    )
    _ffmpeg("-f", "lavfi", "-i", "sine=duration=1", "-metadata", "date=2021-11-12", str(song))
    assert media.content_capture_time(clip, MediaKind.clip) == (
        datetime(2022, 3, 4, 5, 6, 7, tzinfo=UTC),
        "container:creation_time",
    )
    assert media.content_capture_time(song, MediaKind.audio) == (datetime(2021, 11, 12, tzinfo=UTC), "tag:date")
    (tmp_path / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 40)
    assert media.content_capture_time(tmp_path / "broken.mp4", MediaKind.clip) is None


@pytest.mark.parametrize("given", [None, datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)])
def test_the_event_records_where_its_time_came_from(engram_env, tmp_path, given):
    photo, plain = tmp_path / "photo.jpg", tmp_path / "plain.png"
    _photo(photo, "2023:07:14 09:30:00", "+00:00")
    Image.new("RGB", (64, 48), (10, 20, 30)).save(plain)
    _age(plain)
    got = {p.name: publish_file(engram_env, classify(p), "t", "u", "d", captured_at=given) for p in (photo, plain)}
    if given is None:
        assert (got["photo.jpg"].captured_at, got["photo.jpg"].captured_at_source) == (
            datetime(2023, 7, 14, 9, 30, tzinfo=UTC),
            "exif:DateTimeOriginal",
        )
        assert (got["plain.png"].captured_at, got["plain.png"].captured_at_source) == (MTIME, "file")
    else:
        assert all(e.captured_at == given and e.captured_at_source == "given" for e in got.values())
