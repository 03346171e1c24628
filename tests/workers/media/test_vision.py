"""Vision perception: OCR (finds, webui word recall, cache by image hash), faces (deepface pairs, the Hamilton
clip against its reference faces), near-duplicate frames, VLM captions against a stub HTTP server, bad images
and clips. Real-data tests read ``ENGRAM_EVAL_DATA`` (default ``../shared/data``) and skip without it."""

from __future__ import annotations

import io
import random
import socket
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pydantic import TypeAdapter

from bench.lib import vision as ev
from bench.lib.speech import perceive_file
from engram.api.cli.main import ingest_paths
from engram.schemas.events import EventStatus
from engram.schemas.observations import OcrLine
from engram.workers.media import decode as media
from engram.workers.media import vision
from engram.workers.memory import vault
from engram.workers.models.faces import SAME_PERSON_DISTANCE, cluster_faces
from tests.llm_stub import ScriptedLlm
from tests.workers.media.test_bad_input import render_png

WHO = {"tenant": "acme", "user": "alice"}


def pixels(path: Path) -> np.ndarray:
    return np.asarray(media.load_image(path.read_bytes(), 60_000_000))


# --- OCR ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "needle"),
    [("screenpipe_testing_OCR.png", "receiver_count"), ("screenpipe_testing_OCR_chinese.png", "管理分支")],
)
def test_ocr_finds_the_named_strings(engram_env, eval_data, name, needle):
    lines = vision.ocr_lines(engram_env, "acme", pixels(eval_data / "screens" / name))
    assert any(needle in ln.text for ln in lines)
    assert all(0.5 <= ln.confidence <= 1 and ln.box[0] <= ln.box[2] and ln.box[1] <= ln.box[3] for ln in lines)


@pytest.mark.slow
def test_webui_viewport_word_recall(engram_env, eval_data):
    pages = ev.webui_pages(eval_data / "screens" / "webui")
    assert len(pages) == 4
    for viewport, shot, _ in pages:
        img = pixels(shot)
        ref = ev.webui_reference(shot, img.shape[0])
        lines = vision.ocr_lines(engram_env, "acme", img)
        recall, missed = ev.word_recall(ref, [w for ln in lines for w in ev.words(ln.text)])
        assert sum(ref.values()) >= 40
        assert recall >= 0.85, (viewport, recall, missed)


def test_webui_reference_counts_only_text_inside_the_image(eval_data):
    shot = ev.webui_pages(eval_data / "screens" / "webui")[0][1]  # 1280x720 viewport of a 1163 px page
    inside, page = ev.webui_reference(shot, 720), ev.webui_reference(shot, 10_000)
    assert sum(inside.values()) < sum(page.values())
    assert ev.words("signal.org/install © 2013–2022") == ["signal", "org", "install", "2013", "2022"]


def test_ocr_cache_is_keyed_by_pixels_and_read_back(engram_env, tmp_path):
    rt = engram_env
    shot = pixels(render_png(tmp_path / "a.png", ["Quarterly budget review"]))
    lines = vision.ocr_lines(rt, "acme", shot)
    assert "budget" in " ".join(ln.text for ln in lines).lower()
    from engram.workers.models import get_model
    from engram.workers.models.ocr import RapidOcr

    model_id = get_model("ocr", rt.settings).cache_id
    assert model_id.startswith("pp-ocr.rapidocr-") and model_id.endswith(f".det{RapidOcr.det_side}")
    # text a detector of another side read is kept apart (it finds other boxes on the same pixels)
    assert RapidOcr("pp-ocr", det_side=800).cache_id == model_id.removesuffix(f"{RapidOcr.det_side}") + "800"
    key = vision.ocr_cache_key("acme", model_id, vision.pixels_sha256(shot))
    assert b"budget" not in rt.objects.get_bytes(key).lower()  # sealed with the vault key: no plain text at rest
    # the same pixels re-encoded hash alike; what the cache holds is what a re-perceive returns (no model run),
    # and the confidence floor is applied on the way out
    buf = io.BytesIO()
    Image.fromarray(shot).save(buf, format="WEBP", lossless=True)
    again = np.asarray(Image.open(buf).convert("RGB"))
    assert vision.pixels_sha256(again) == vision.pixels_sha256(shot)
    planted = [
        OcrLine(text="from the cache", confidence=0.9, box=(0, 0, 1, 1)),
        OcrLine(text="too faint", confidence=0.1, box=(0, 2, 1, 3)),
    ]
    rt.objects.put_bytes(key, vault.seal(rt.settings, TypeAdapter(list[OcrLine]).dump_json(planted)))
    assert [ln.text for ln in vision.ocr_lines(rt, "acme", again)] == ["from the cache"]
    assert not rt.objects.exists(vision.ocr_cache_key("globex", model_id, vision.pixels_sha256(shot)))


def test_an_image_without_text_reads_no_lines_and_prints_no_warning(engram_env, capfd):
    # rapidocr's constructor sets its own logger's level and handler: its "text detection result is empty" warning
    # printed itself on stderr once per frame without text, beside the progress bar of an ingest
    blank = np.full((300, 400, 3), 255, dtype=np.uint8)
    assert vision.ocr_lines(engram_env, "acme", blank) == []
    assert "RapidOCR" not in capfd.readouterr().err


def test_screenshot_keeps_lines_app_and_window(engram_env, tmp_path):
    shot = render_png(tmp_path / "mail.png", ["Re: quarterly budget review"])
    out = ingest_paths(
        [shot], **WHO, device="laptop", app_name="Thunderbird", window="Inbox", quiet=True, consolidate=False
    )
    assert [p.name for p, _ in out["done"]] == ["mail.png"]
    [point] = engram_env.vectors.scroll("observations", None)
    obs = point.payload
    assert obs["app"] == "Thunderbird" and obs["window"] == "Inbox"
    assert obs["text"].startswith("Thunderbird — Inbox\n")
    assert obs["ocr_lines"] and obs["ocr_lines"][0]["confidence"] > 0.5 and len(obs["ocr_lines"][0]["box"]) == 4


# --- near-duplicates -----------------------------------------------------------------------------------------


def test_static_screen_drops_and_new_content_is_kept(eval_data):
    from engram.schemas.settings import Settings

    s = Settings()
    sig = lambda img: media.frame_signature(img, s.near_duplicate_thumb_side)  # noqa: E731
    dup = lambda a, b: media.is_near_duplicate(a, b, s.near_duplicate_similarity, s.near_duplicate_ssim)  # noqa: E731
    base = Image.open(eval_data / "screens" / "screenpipe_testing_OCR.png").convert("RGB")
    frames = [sig(f) for f in ev.static_screen(base, 8)]
    assert all(dup(frames[0], f) for f in frames[1:])  # pointer and clock changes: all 7 repeats dropped
    for what, img in ev.changed_screens(base).items():
        assert not dup(frames[0], sig(img)), what
    real = [sig(Image.open(p).convert("RGB")) for p in sorted((eval_data / "screens").glob("screenpipe_*.png"))]
    assert not any(dup(a, b) for i, a in enumerate(real) for b in real[i + 1 :])
    # a signature stored before thumbnails were kept (a bare pHash) still compares by its hash
    assert dup(frames[0].split(":")[0], frames[1]) and media.frame_similarity(frames[0], frames[1])[1] > 0.99


# --- faces -----------------------------------------------------------------------------------------------------


def test_face_clustering_pairwise_f1(engram_env, eval_data):
    folder = eval_data / "faces" / "deepface"
    pairs = ev.deepface_pairs(folder)[:299]  # master.csv: 25 photos (the bench runs both lists, 61 photos)
    names = sorted({n for a, b, _ in pairs for n in (a, b)})
    faces = {n: ev.largest_face(folder / n) for n in names}
    assert all(faces.values())
    labels = dict(zip(names, cluster_faces([faces[n].embedding for n in names]), strict=True))
    scores = ev.pair_scores(pairs, lambda a, b: labels[a] == labels[b])
    assert scores["f1"] >= 0.9, scores


def test_clip_faces_match_the_reference_faces(engram_env, eval_data):
    video = eval_data / "video"
    faces = ev.clip_faces(video / "short_hamilton_clip.mp4")
    assert faces and all(f.frame_s is not None and 0 <= f.frame_s <= 10.1 and len(f.embedding) == 128 for f in faces)
    assert all(0 <= f.box[0] < f.box[2] <= 640 and 0 <= f.box[1] < f.box[3] <= 360 for f in faces)
    best = ev.match_references(faces, ev.reference_faces(video))
    assert set(best) == {"alex-lacamoire", "lin-manuel-miranda"}
    assert all(d < SAME_PERSON_DISTANCE for d in best.values()), best


def test_large_frames_are_downscaled_and_boxes_mapped_back(engram_env, eval_data):
    from engram.workers.models import get_model

    path = eval_data / "faces" / "deepface" / "img1.jpg"  # 1382x1868: detected on a 758x1024 copy
    face = ev.largest_face(path)
    assert 0 <= face.box[0] < face.box[2] <= 1382 and 0 <= face.box[1] < face.box[3] <= 1868
    half = Image.open(path).convert("RGB").resize((691, 934))
    [[small, *_]] = get_model("faces", engram_env.settings).detect([np.asarray(half)])
    assert all(abs(a - 2 * b) < 40 for a, b in zip(face.box, small.box, strict=True)), (face.box, small.box)


# --- captions (a stub HTTP server stands in for the VLM endpoint) ------------------------------------------


@pytest.fixture
def vlm_stub():
    """A local HTTP server (tests.llm_stub) answering OpenAI chat completions and Gemini generateContent with
    one caption; yields its URL and the (path, JSON body) of each request it got."""
    with ScriptedLlm([" A mail client inbox. "] * 20) as stub:
        yield stub.url, stub.requests


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_compatible_caption(engram_env, vlm_stub, monkeypatch, tmp_path):
    url, requests = vlm_stub
    monkeypatch.setenv("ENGRAM_MODELS__VLM_PROVIDER", "openai")
    monkeypatch.setenv("ENGRAM_MODELS__VLM_BASE_URL", f"{url}/v1")
    monkeypatch.setenv("ENGRAM_MODELS__VLM_MODEL", "qwen2.5-vl")
    [obs] = perceive_file(render_png(tmp_path / "mail.png", ["Inbox (3) - Mail"]))
    assert obs.caption == "A mail client inbox."
    assert obs.text.endswith("[caption] A mail client inbox.")
    [(path, body)] = requests
    assert path == "/v1/chat/completions" and body["model"] == "qwen2.5-vl"
    text, image = body["messages"][0]["content"]
    assert text["type"] == "text" and "Describe" in text["text"]
    assert image["image_url"]["url"].startswith("data:image/jpeg;base64,")


def test_gemini_caption(engram_env, vlm_stub, monkeypatch, tmp_path):
    url, requests = vlm_stub
    monkeypatch.setenv("ENGRAM_MODELS__VLM_PROVIDER", "gemini")
    monkeypatch.setenv("ENGRAM_MODELS__VLM_BASE_URL", url)
    monkeypatch.setenv("ENGRAM_MODELS__VLM_MODEL", "gemini-2.5-flash")
    [obs] = perceive_file(render_png(tmp_path / "mail.png", ["Inbox (3) - Mail"]))
    assert obs.caption == "A mail client inbox."
    [(path, body)] = requests
    assert path.endswith("/models/gemini-2.5-flash:generateContent")
    parts = body["contents"][0]["parts"]
    inline = [p.get("inlineData") or p.get("inline_data") for p in parts]
    assert any(d and (d.get("mimeType") or d.get("mime_type")) == "image/jpeg" and d["data"] for d in inline), parts


@pytest.mark.parametrize(("provider", "path"), [("openai", "/v1"), ("gemini", "")])
def test_caption_endpoint_down_is_skipped_with_a_warning(engram_env, monkeypatch, tmp_path, provider, path):
    import structlog
    from structlog.testing import capture_logs

    structlog.reset_defaults()  # a CLI test run before in this process may have set a level that drops warnings
    monkeypatch.setenv("ENGRAM_MODELS__VLM_PROVIDER", provider)
    monkeypatch.setenv("ENGRAM_MODELS__VLM_BASE_URL", f"http://127.0.0.1:{_closed_port()}{path}")
    monkeypatch.setenv("ENGRAM_MODELS__VLM_MAX_RETRIES", "0")
    with capture_logs() as logs:
        [obs] = perceive_file(render_png(tmp_path / "mail.png", ["Inbox (3) - Mail"]))
    assert obs.caption is None and "Inbox" in obs.text
    [warning] = [e for e in logs if e["event"] == "caption skipped"]
    assert "Connect" in warning["reason"] and "127.0.0.1" in warning["reason"]


def test_caption_endpoint_down_fails_the_event_when_required(engram_env, monkeypatch, tmp_path):
    monkeypatch.setenv("ENGRAM_MODELS__VLM_PROVIDER", "openai")
    monkeypatch.setenv("ENGRAM_MODELS__VLM_BASE_URL", f"http://127.0.0.1:{_closed_port()}/v1")
    monkeypatch.setenv("ENGRAM_MODELS__VLM_MAX_RETRIES", "0")
    monkeypatch.setenv("ENGRAM_MODELS__VLM_REQUIRED", "true")
    shot = render_png(tmp_path / "mail.png", ["Inbox (3) - Mail"])
    out = ingest_paths([shot], **WHO, device="laptop", quiet=True, consolidate=False)
    [(path, rec)] = out["failed"]
    assert path.name == "mail.png" and rec.stage == "perceive"
    assert "captioning with 'gpt-4o-mini' at http://127.0.0.1" in rec.reason and "retries exhausted" in rec.reason


# --- bad input ---------------------------------------------------------------------------------------------------


def _broken_clip(seconds: int = 4) -> bytes:
    """A real MPEG-4 video (64x64, 10 fps, changing frames) with random bytes over the middle of its stream."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        rng = np.random.default_rng(3)
        for _ in range(10 * seconds):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    data = bytearray(buf.getvalue())
    lo, hi = len(data) // 3, 2 * len(data) // 3
    data[lo:hi] = random.Random(5).randbytes(hi - lo)
    return bytes(data)


def test_blank_tiny_and_broken_media_end_clearly(engram_env, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    Image.new("RGB", (640, 200), "white").save(folder / "a-blank.png")
    Image.new("RGB", (1, 1), (200, 30, 30)).save(folder / "b-one-pixel.png")
    (folder / "c-broken-stream.mp4").write_bytes(_broken_clip())
    render_png(folder / "d-good.png", ["Quarterly budget review"])
    for path in sorted(folder.iterdir()):  # one device each: no frame is a near-duplicate of another
        ingest_paths([path], **WHO, device=path.stem, quiet=True, consolidate=False)
    records = {Path(r.source_name).name: r for r in engram_env.ledger.records("acme")}
    assert records["a-blank.png"].status is EventStatus.done  # no text, no face: stored nothing, done
    assert records["b-one-pixel.png"].status is EventStatus.done
    broken = records["c-broken-stream.mp4"]  # corrupt bytes over the middle third of the stream
    assert broken.status is EventStatus.failed and broken.stage == "ingest"
    assert broken.reason.startswith("video cannot be decoded: ")
    assert records["d-good.png"].status is EventStatus.done
    texts = [p.payload["text"] for p in engram_env.vectors.scroll("observations", None)]
    assert len(texts) == 1 and "budget" in texts[0].lower()
