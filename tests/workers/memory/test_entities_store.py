"""The entities collection on its own (no real media needed): an entities collection written before faces and
voices is rebuilt with their vectors and its people kept; chat speakers and spoken names bind to entities."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import numpy as np
from qdrant_client import models as qm

from engram.schemas.events import MediaKind
from engram.schemas.observations import Observation


def _observation(tenant: str, n: int, **fields) -> Observation:
    event = uuid.uuid5(uuid.NAMESPACE_URL, f"{tenant}-{n}")
    return Observation(
        id=uuid.uuid5(event, "obs"),
        tenant_id=tenant,
        user_id="u",
        device_id="d",
        event_id=event,
        segment_index=0,
        captured_at=datetime(2024, 5, 1, 9, n, tzinfo=UTC),
        object_key="media/x",
        **fields,
    )


def test_an_old_entities_collection_on_a_server_is_rebuilt_and_its_people_kept(tmp_path):
    """A Qdrant server's entities collection made by the first link stage (``text`` only) gets the face and voice
    vectors when engram first uses it: rebuilt with them (a server cannot add a named vector in place), its
    people kept. qdrant-client's local mode stands in for the server."""
    from qdrant_client import QdrantClient

    from engram.workers.memory.entities import entity_id
    from engram.workers.stores.vectors import ENTITIES, FACE, VOICE, ClientVectorStore

    client = QdrantClient(path=str(tmp_path / "server"))
    old = entity_id("t", "Alice")
    client.create_collection(
        ENTITIES, vectors_config={"text": qm.VectorParams(size=384, distance=qm.Distance.COSINE)}
    )  # as the first link stage made it
    client.upsert(
        ENTITIES,
        [
            qm.PointStruct(
                id=str(old),
                vector={"text": [1.0] + [0.0] * 383},
                payload={
                    "tenant_id": "t",
                    "entity_type": "person",
                    "names": ["Alice"],
                    "first_seen_ts": 100.0,
                    "last_seen_ts": 200.0,
                },
            )
        ],
    )
    store = ClientVectorStore(client, local=True)
    store.ensure(ENTITIES)
    assert {FACE, VOICE} <= set(client.get_collection(ENTITIES).config.params.vectors)
    (alice,) = store.retrieve(ENTITIES, [old], with_vectors=True)
    assert alice.payload["names"] == ["Alice"] and alice.payload["first_seen_ts"] == 100.0
    assert alice.vector["text"][0] == 1.0
    store.close()


def test_a_name_in_an_utterance_binds_to_its_voice_and_chat_names_stay_apart(engram_env):
    from engram.workers.link import link_observations
    from engram.workers.memory.entities import EntityMemory, entity_names, list_entities

    rt = engram_env
    rng = np.random.default_rng(0)
    voice = rng.normal(size=256)
    voice /= np.linalg.norm(voice)
    said = _observation(
        "t",
        1,
        kind=MediaKind.audio,
        text="Hi, my name is Carol and I run the budget review.",
        transcript="Hi, my name is Carol and I run the budget review.",
        start_s=0.0,
        end_s=3.0,
        voice_embedding=voice.tolist(),
        speaker_label="spk0",
    )
    later = _observation(
        "t",
        2,
        kind=MediaKind.audio,
        text="The review moved to Friday.",
        start_s=0.0,
        end_s=2.0,
        transcript="The review moved to Friday.",
        voice_embedding=voice.tolist(),
        speaker_label="spk0",
    )
    other = rng.normal(size=256)
    stranger = _observation(
        "t",
        3,
        kind=MediaKind.audio,
        text="I'm going home.",
        transcript="I'm going home.",
        start_s=0.0,
        end_s=1.0,
        voice_embedding=(other / np.linalg.norm(other)).tolist(),
    )
    for obs in (said, later, stranger):
        link_observations(EntityMemory(rt, "t"), [obs])
    assert said.entity_ids == later.entity_ids != stranger.entity_ids
    people = {str(e.id): e for e in list_entities(rt, "t")}
    assert people[said.entity_ids[0]].names == ["Carol"] and people[said.entity_ids[0]].voices == 2
    assert people[stranger.entity_ids[0]].names == []
    chat = _observation("t", 4, kind=MediaKind.text, text="see you there", speaker="Carol")
    link_observations(EntityMemory(rt, "t"), [chat])
    assert chat.entity_ids == said.entity_ids  # the chat speaker is the entity holding that name
    # what query's name matching reads: named entities only, names without samples or links
    assert entity_names(rt, "t") == [(said.entity_ids[0], ["Carol"])] and entity_names(rt, "nobody") == []


def test_engram_entities_lists_and_merges(engram_env, capsys):
    from engram.api.cli.main import show_entities
    from engram.workers.link import link_observations
    from engram.workers.memory.entities import EntityMemory, list_entities

    rt = engram_env
    turns = [
        _observation("t", n, kind=MediaKind.text, text=f"turn {n}", speaker=s)
        for n, s in enumerate(["Ann", "Ben", "Ann", "u"])
    ]  # "u": the user id, the user's own entity
    link_observations(EntityMemory(rt, "t"), turns)
    people = list_entities(rt, "t")
    ann, ben = (str(e.id) for e in people if e.role == "person")  # most observations first
    (me,) = (str(e.id) for e in people if e.role == "self")
    show_entities(tenant="t", merge=None)  # the command's body, without the CLI's logging set-up
    out = capsys.readouterr().out
    assert "Ann" in out and "Ben" in out and ann[:8] in out
    assert next(line for line in out.splitlines() if me[:8] in line).split("│")[2].strip() == "you"
    show_entities(tenant="t", merge=(ann, ben))
    out = capsys.readouterr().out
    assert f"merged {ben} into {ann}" in out
    person, _ = list_entities(rt, "t")
    assert person.names == ["Ann", "Ben"] and person.observations == 3 and person.merged_from == [ben]
