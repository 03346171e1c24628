"""``engram import`` keeps each event's creation time: the ledger's ``created_at`` of an imported event is the one
it had where it was exported, not the time of the import (a time-scoped ``engram forget --since``, retention by
age and the web app's hours read it); both ledgers record the creation time they are given."""

from __future__ import annotations

import pytest

from tests.api.test_archive import _cli, exported  # noqa: F401 (a fixture)
from tests.workers.memory.test_records import T, template, use_data_dir  # noqa: F401 (a fixture)
from tests.workers.stores.test_ledger import ledger, make_event  # noqa: F401 (a fixture: SQLite and a real Redis)


@pytest.mark.slow
def test_an_imported_event_keeps_its_creation_time(exported, tmp_path, monkeypatch):  # noqa: F811
    from engram.workers.runtime import reset_runtimes, runtime

    archive = exported[0]
    source = use_data_dir(monkeypatch, tmp_path / "src")
    created = {r.event_id: r.created_at for r in source.ledger.user_events(T, "alice")}
    assert len(created) >= 3, created  # her chats and her screenshot
    use_data_dir(monkeypatch, tmp_path / "dest")
    run = _cli("import", str(archive))
    assert run.exit_code == 0, run.output
    reset_runtimes()
    got = {r.event_id: r.created_at for r in runtime().ledger.user_events(T, "alice")}
    assert got == created
    reset_runtimes()


def test_both_ledgers_record_an_event_with_the_creation_time_it_is_given(ledger):  # noqa: F811 (a fixture)
    from datetime import UTC, datetime

    then = datetime(2024, 5, 17, 9, 30, 12, 345678, tzinfo=UTC)
    old, new = make_event(content=b"old"), make_event(content=b"new")
    ledger.record_queued(old, created_at=then)
    ledger.record_queued(new)
    assert ledger.get(old.event_id).created_at == then  # as given, not now
    assert ledger.get(new.event_id).created_at > then  # now when not given
    assert [r.event_id for r in ledger.user_events("acme", "alice")] == [old.event_id, new.event_id]
