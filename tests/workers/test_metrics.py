"""Metrics and structured logs: the ledgers count each final transition once, reasons map to bounded
labels, and log lines carry tenant, event id, stage and task id (JSON with ``--log-format json``)."""

from __future__ import annotations

import json
import uuid

import pytest
from prometheus_client import REGISTRY

from engram.schemas.events import EventStatus
from engram.workers.metrics import reason_class
from tests.workers.stores.test_ledger import ledger, make_event  # noqa: F401  (the ledger fixture: SQLite and Redis)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize(
    ("status", "reason", "label"),
    [
        ("done", None, "none"),
        ("skipped", "exact duplicate of event 1234", "exact_duplicate"),
        ("skipped", "near-duplicate of the device's previous frame (event 9)", "near_duplicate"),
        ("failed", "stalled: no progress for 3600 s after 3 redeliveries", "stalled"),
        ("failed", "ConnectionError: refused (retries exhausted)", "retries_exhausted"),
        ("failed", "KeyError: 'x'", "error"),
        ("failed", "UnexpectedResponse: 500 (Internal Server Error)", "error"),
        ("failed", "Invalid conversation record at line 3: missing text", "bad_input"),
        ("failed", "corrupt or truncated PNG: image file is truncated", "bad_input"),
        ("done", "no content to store", "no_content"),
    ],
)
def test_reason_classes_are_bounded(status, reason, label):
    assert reason_class(status, reason) == label


def test_ledger_counts_each_transition_once(ledger):  # noqa: F811
    """Received once per new event; finished once per event, whatever marks it again afterwards."""
    kind = "screenshot"
    received = sample("engram_events_received_total", kind=kind)
    done = sample("engram_events_finished_total", kind=kind, status="done", stage="none", reason="none")
    failed = sample("engram_events_finished_total", kind=kind, status="failed", stage="perceive", reason="bad_input")

    a, b = make_event(content=f"a{uuid.uuid4()}".encode()), make_event(content=f"b{uuid.uuid4()}".encode())
    for ev in (a, b, a):
        ledger.record_queued(ev)
    ledger.expect_segments(a.event_id, 2)
    ledger.segment_done(a.event_id, 0, 1)
    ledger.segment_done(a.event_id, 1, 1)
    ledger.segment_done(a.event_id, 1, 1)  # redelivered
    ledger.mark(a.event_id, EventStatus.failed, stage="perceive", reason="corrupt")  # already final
    ledger.mark(b.event_id, EventStatus.failed, stage="perceive", reason="corrupt or truncated PNG")
    ledger.mark(b.event_id, EventStatus.failed, stage="perceive", reason="corrupt or truncated PNG")

    assert sample("engram_events_received_total", kind=kind) - received == 2
    assert sample("engram_events_finished_total", kind=kind, status="done", stage="none", reason="none") - done == 1
    assert (
        sample("engram_events_finished_total", kind=kind, status="failed", stage="perceive", reason="bad_input")
        - failed
        == 1
    )


def test_json_logs_carry_tenant_event_stage_and_task(engram_env, tmp_path):
    """``engram --log-format json`` writes one JSON object per log line; a failing event's line names the
    tenant, the event id, the stage and the task id."""
    from typer.testing import CliRunner

    from engram.api.cli.main import app

    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    result = CliRunner().invoke(
        app,
        [
            "--log-format",
            "json",
            "-v",
            "ingest",
            str(bad),
            "--tenant",
            "acme",
            "--user",
            "alice",
            "--device",
            "laptop",
            "--no-consolidate",
        ],
    )
    lines = [json.loads(ln) for ln in result.stderr.splitlines() if ln.startswith("{")]
    failed = [ln for ln in lines if ln.get("event") == "event failed"]
    assert failed, result.stderr
    line = failed[0]
    assert line["tenant"] == "acme" and line["stage"] == "ingest" and uuid.UUID(line["event_id"])
    assert "task_id" in line and line["level"] == "warning" and "timestamp" in line


def test_each_task_counts_its_cpu_seconds_once_in_the_outermost_task(engram_env, tmp_path):
    """An eager ``ingest`` runs its segment's whole chain inside it (a chat's perceive, then ``embed_batched`` and
    ``store_batched``, each applied in turn): the chain's CPU, model included, counts under ingest, and none under
    the inner tasks, so the family sums to the tasks' CPU. A task run alone counts under its own name."""
    from engram.api.local import classify, publish_file
    from engram.workers.consolidate import consolidate_user
    from engram.workers.ingest import ingest

    rt = engram_env
    path = tmp_path / "chat.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "message_id": f"m{i}",
                    "session_id": "s1",
                    "speaker": "Ann",
                    "text": f"I moved to Porto in spring, day {i}.",
                    "timestamp": f"2023-05-0{i + 1}T10:00:00Z",
                }
            )
            + "\n"
            for i in range(3)
        )
    )
    names = [
        "workers.ingest.ingest",
        "workers.perceive.perceive",
        "workers.embed.embed_batched",
        "workers.store.store_batched",
        "workers.consolidate.consolidate_user",
    ]
    before = {n: sample("engram_task_cpu_seconds_total", task=n) for n in names}
    event = publish_file(rt, classify(path), "t", "u", "d")
    ingest.delay(event)
    assert rt.ledger.get(event.event_id).status is EventStatus.done
    consolidate_user.delay("t", "u")
    grew = {n: sample("engram_task_cpu_seconds_total", task=n) - before[n] for n in names}
    assert grew["workers.ingest.ingest"] > 0 and grew["workers.consolidate.consolidate_user"] > 0, grew
    assert grew["workers.perceive.perceive"] == grew["workers.embed.embed_batched"] == 0, grew
    assert grew["workers.store.store_batched"] == 0, grew
