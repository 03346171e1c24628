"""``engram capture``'s CPU budget (issue 41): ``CpuBudget`` is a token bucket over the process's CPU seconds, and
the capture loop holds its grabs while the bucket is in debt or while a batch waits for an in-process pipeline, so a
busy screen is grabbed less often instead of costing more CPU. Under a real X server (Xvfb), the loop in this
process with a spool-only or a slow sink."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from engram.api.capture.agent import Capture, CaptureConfig, CpuBudget, PrivacyRules, spool_sink
from tests.xdesktop import Desktop, xvfb


def test_cpu_budget_is_a_token_bucket_over_cpu_seconds():
    clock, cpu = [0.0], [0.0]
    budget = CpuBudget(0.1, 1.0, clock=lambda: clock[0], cpu=lambda: cpu[0])
    assert budget.wait() == 0.0 and budget.tokens == 1.0  # starts full
    cpu[0] = 2.0  # 2 CPU s spent at once: 1 s in debt, paid back at 0.1 CPU s per second
    assert budget.wait() == pytest.approx(10.0)
    clock[0] = 10.0
    assert budget.wait() == pytest.approx(0.0)
    clock[0] = 1000.0  # idle: the bucket fills up to its burst, no further
    assert budget.update() == pytest.approx(1.0)
    assert budget.wait(ahead=1.5) == pytest.approx(5.0)  # frames queued that will cost 1.5 CPU s: 0.5 s short
    with pytest.raises(ValueError):
        CpuBudget(0, 1.0)


@pytest.fixture
def changing_screen(monkeypatch):
    """An Xvfb display (this process's DISPLAY) whose window's text changes every 0.3 s."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb not installed (`bash scripts/setup.sh --dev` installs it)")
    with xvfb() as display:
        monkeypatch.setenv("DISPLAY", display)
        stop = threading.Event()

        def draw() -> None:
            desk = Desktop(display)
            win = desk.window("notes - Editor", ("editor", "Editor"), "line 0")
            n = 0
            while not stop.wait(0.3):
                n += 1
                desk.draw(win, f"line {n} of the notes: item {n * 7919 % 1000}")
            desk.close()

        drawer = threading.Thread(target=draw, daemon=True)
        drawer.start()
        import mss  # noqa: F401 (imported and warm before the runs measure their ticks)
        from PIL import Image

        from engram.workers.media.decode import frame_signature, is_near_duplicate

        sig = frame_signature(Image.new("RGB", (64, 64)))
        is_near_duplicate(sig, sig, 0.9, 0.99)
        yield display
        stop.set()
        drawer.join(timeout=10)


def test_capture_holds_its_grabs_while_the_cpu_budget_is_spent(changing_screen, tmp_path):
    """Grabbing every 0.2 s a screen that always changes: with no budget every tick grabs; with a budget far
    below what grabbing costs the loop grabs a frame or two, then holds (``throttled_seconds``)."""

    def run(cpu_budget: float) -> object:
        config = CaptureConfig(
            spool=tmp_path / f"spool-{cpu_budget}",
            interval=0.2,
            max_interval=0.2,
            duration=4.0,
            pause_file=None,
            cpu_budget=cpu_budget,
            cpu_burst=0.01,
        )
        return Capture(config, spool_sink, PrivacyRules()).run()

    free, held = run(0.0), run(0.001)
    assert free.grabbed >= 4 and free.throttled_seconds == 0, free
    assert held.throttled_seconds > 2 and held.grabbed <= 2 < free.grabbed, held
    assert held.kept >= 1  # the first grabs are within the burst


def test_capture_holds_its_grabs_while_a_batch_waits_for_the_pipeline(changing_screen, tmp_path):
    """A sink as slow as an in-process pipeline: with ``max_backlog`` no frame is grabbed while that many kept
    frames wait to be published, so the frames kept are the frames the sink could take."""
    done = []

    def slow_sink(frames):
        time.sleep(1.0)
        done.extend(frames)
        return len(frames), 0

    config = CaptureConfig(
        spool=tmp_path / "spool", interval=0.2, max_interval=0.2, duration=3.0, batch=1, pause_file=None, max_backlog=1
    )
    stats = Capture(config, slow_sink, PrivacyRules()).run()
    assert stats.throttled_seconds > 1.0, stats
    assert stats.kept <= 5 and stats.published == stats.kept == len(done), stats  # ~1 s a frame, 3 s


def test_frames_gathered_for_a_batch_go_to_the_pipeline_when_the_budget_holds_the_grabs(changing_screen, tmp_path):
    """A batch of 5 the budget will not let fill: the frames kept so far are published as soon as the grabs are
    held, not ``flush_seconds`` (60) later nor at the end of the run."""
    arrived: list[tuple[float, int]] = []
    started = time.monotonic()

    def sink(frames):
        arrived.append((time.monotonic() - started, len(frames)))
        return len(frames), 0

    config = CaptureConfig(
        spool=tmp_path / "spool",
        interval=0.2,
        max_interval=0.2,
        duration=4.0,
        batch=5,
        flush_seconds=60.0,
        pause_file=None,
        cpu_budget=0.001,
        cpu_burst=0.1,  # a grab or two, then held
    )
    stats = Capture(config, sink, PrivacyRules()).run()
    assert stats.kept >= 1 and stats.throttled_seconds > 2, stats
    assert arrived and arrived[0][0] < 2.0 and arrived[0][1] < config.batch, arrived
