"""People without noise (issue 41), on the embedded store: an assistant export's speakers and the user id are the
user's own entity and one assistant, never new people; a name held by two entities joins them; voices that one
recording's clustering separated never share an entity, and a voice that matches no entity clearly founds its own.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import numpy as np

from engram.schemas.events import MediaKind
from engram.schemas.observations import Observation
from tests.workers.media.test_importers import chatgpt_export


def _observation(tenant: str, n: int, event: uuid.UUID | None = None, **fields) -> Observation:
    event = event or uuid.uuid5(uuid.NAMESPACE_URL, f"{tenant}-{n}")
    return Observation(
        id=uuid.uuid5(event, f"obs-{n}"),
        tenant_id=tenant,
        user_id=fields.pop("user_id", "sam"),
        device_id="d",
        event_id=event,
        segment_index=0,
        captured_at=datetime(2024, 5, 1, 9, n, tzinfo=UTC),
        object_key="media/x",
        **fields,
    )


def _people(rt, tenant: str) -> dict[str, list]:
    from engram.workers.memory.entities import list_entities

    out: dict[str, list] = {}
    for e in list_entities(rt, tenant):
        out.setdefault(e.role, []).append(e)
    return out


def test_an_assistant_export_and_added_memories_are_one_user_and_one_assistant(engram_env, tmp_path):
    """A ChatGPT export (user, assistant, system and tool turns), then `engram add` (the speaker defaults to the
    user id) and a conversation naming its speakers ``user``, ``assistant`` and ``Sam``: one entity for the user,
    named by the user id and marked ``self``, one ``assistant``, no other people."""
    from engram.api.add import add_embedded
    from engram.api.embedded import ingest_paths
    from engram.schemas.add import AddMemoryRequest

    rt = engram_env
    (tmp_path / "conversations.json").write_text(json.dumps(chatgpt_export()))
    result = ingest_paths(
        [tmp_path / "conversations.json"], tenant="t", user="sam", device="d", consolidate=False, quiet=True
    )
    assert not result["failed"]
    add_embedded(rt, AddMemoryRequest(text="I moved to Leeds in March.", user_id="sam"), "t", "d", consolidate=False)
    add_embedded(
        rt,
        AddMemoryRequest(
            user_id="sam",
            messages=[
                {"speaker": "user", "text": "Book the ferry."},
                {"speaker": "assistant", "text": "Booked for 09:00."},
                {"speaker": "Sam", "text": "Thanks!"},
                {"speaker": "tool", "text": "booking ok"},
            ],
        ),
        "t",
        "d",
        consolidate=False,
    )
    people = _people(rt, "t")
    assert set(people) == {"self", "assistant"}, people
    (me,), (assistant,) = people["self"], people["assistant"]
    assert me.names == ["Sam"] and assistant.names == ["assistant"]
    assert me.observations == 2 + 1 + 2 and assistant.observations == 2 + 2


def test_the_users_full_name_and_a_name_held_twice_join(engram_env):
    """A chat speaker "Sam Carter" of user ``sam`` is the user (their full name, which names their own entity from
    then on; a "Sam Carter" another user knew joins it); once it is known, "Sam Smith" is someone else. An entity
    named as another is joins it: by hand (``name_entity``) and by a voice saying "my name is Dana"."""
    from engram.workers.link import link_observations
    from engram.workers.memory.entities import EntityMemory, name_entity

    rt = engram_env
    friend = _observation("t", 0, kind=MediaKind.text, text="hi", speaker="Sam Carter", user_id="maya")
    link_observations(EntityMemory(rt, "t"), [friend])
    assert [p.names for p in _people(rt, "t")["person"]] == [["Sam Carter"]]
    turns = [
        _observation("t", n, kind=MediaKind.text, text=f"turn {n}", speaker=s)
        for n, s in enumerate(["sam", "Sam Carter", "Dana", "Sam Smith"], 1)
    ]
    link_observations(EntityMemory(rt, "t"), turns)
    people = _people(rt, "t")
    (me,) = people["self"]
    assert me.names == ["Sam Carter", "sam"] and me.observations == 3 and len(me.merged_from) == 1
    assert sorted(p.names[0] for p in people["person"]) == ["Dana", "Sam Smith"]
    assert turns[0].entity_ids == turns[1].entity_ids == [str(me.id)] != friend.entity_ids  # merged away

    smith = next(p for p in people["person"] if p.names == ["Sam Smith"])
    kept = name_entity(rt, "t", smith.id, "Dana")  # the same person, says the user
    assert kept.names == ["Dana", "Sam Smith"] and kept.observation_count == 2
    assert [p.names for p in _people(rt, "t")["person"]] == [["Dana", "Sam Smith"]]

    voice = np.random.default_rng(1).normal(size=256)
    said = _observation(
        "t",
        6,
        kind=MediaKind.audio,
        text="Hi, my name is Dana.",
        transcript="Hi, my name is Dana.",
        start_s=0.0,
        end_s=2.0,
        voice_embedding=(voice / np.linalg.norm(voice)).tolist(),
        speaker_label="spk0",
    )
    link_observations(EntityMemory(rt, "t"), [said])
    (dana,) = _people(rt, "t")["person"]
    assert said.entity_ids == [str(dana.id)] and dana.voices == 1 and dana.observations == 3


def test_two_users_own_entities_never_join(engram_env):
    """Each user of a tenant has one own entity: naming bea's as ann's is named does not merge them."""
    from engram.workers.link import link_observations
    from engram.workers.memory.entities import EntityMemory, name_entity, own_id

    rt = engram_env
    turns = [
        _observation("t", n, kind=MediaKind.text, text="hi", speaker="user", user_id=u)
        for n, u in enumerate(["ann", "bea"])
    ]
    link_observations(EntityMemory(rt, "t"), turns)
    kept = name_entity(rt, "t", own_id("t", "self", "bea"), "ann")
    assert kept.id == own_id("t", "self", "bea") and kept.user_id == "bea"
    assert sorted(tuple(p.names) for p in _people(rt, "t")["self"]) == [("ann",), ("ann", "bea")]


def _unit(*parts: tuple[float, int]) -> list[float]:
    """A unit 256-d vector: sum of weight * basis vector ``i``, normalised."""
    v = np.zeros(256)
    for w, i in parts:
        v[i] += w
    return (v / np.linalg.norm(v)).tolist()


def _utterance(tenant: str, n: int, event: uuid.UUID, label: str, voice: list[float]) -> Observation:
    return _observation(
        tenant,
        n,
        event,
        kind=MediaKind.audio,
        text=f"utterance {n}",
        transcript=f"utterance {n}",
        start_s=float(n),
        end_s=n + 2.0,
        voice_embedding=voice,
        speaker_label=label,
    )


def test_speakers_a_recording_separated_never_share_an_entity(engram_env):
    """A first recording's speaker founds an entity; a second recording's two speakers are both similar to it
    (0.95 and 0.93 cosine): the closer takes it, the other founds its own. Within one recording the two never
    share an entity, even when each alone would have joined it."""
    from engram.workers.link import link_observations
    from engram.workers.memory.entities import EntityMemory

    rt = engram_env
    first = uuid.uuid4()
    link_observations(EntityMemory(rt, "t"), [_utterance("t", 0, first, "spk0", _unit((1.0, 0)))])
    second = uuid.uuid4()
    a = _utterance("t", 1, second, "spk0", _unit((0.95, 0), (0.312, 1)))
    b = _utterance("t", 2, second, "spk1", _unit((0.93, 0), (0.367, 2)))
    link_observations(EntityMemory(rt, "t"), [a, b])
    assert a.entity_ids != b.entity_ids and len(_people(rt, "t")["person"]) == 2
    # a third recording whose speaker sounds like the second one's spk1 joins it
    c = _utterance("t", 3, uuid.uuid4(), "spk0", _unit((0.93, 0), (0.367, 2)))
    link_observations(EntityMemory(rt, "t"), [c])
    assert c.entity_ids == b.entity_ids


def test_a_voice_between_two_entities_founds_its_own(engram_env):
    """Two entities (two speakers of one recording, 0.8 cosine apart), then a voice equally similar to both (0.95):
    no clear match, so a third entity; a voice clearly nearer one of them joins it."""
    from engram.workers.link import link_observations
    from engram.workers.memory.entities import EntityMemory

    rt = engram_env
    event = uuid.uuid4()
    x = _utterance("t", 0, event, "spk0", _unit((1.0, 0)))
    y = _utterance("t", 1, event, "spk1", _unit((0.8, 0), (0.6, 1)))  # 0.8 cosine: apart only by the constraint
    link_observations(EntityMemory(rt, "t"), [x, y])
    assert x.entity_ids != y.entity_ids
    between = _utterance("t", 2, uuid.uuid4(), "spk0", _unit((1.8, 0), (0.6, 1)))  # 0.95 to both
    link_observations(EntityMemory(rt, "t"), [between])
    assert between.entity_ids not in (x.entity_ids, y.entity_ids)
    near_x = _utterance("t", 3, uuid.uuid4(), "spk0", _unit((1.0, 0), (0.01, 5)))
    link_observations(EntityMemory(rt, "t"), [near_x])
    assert near_x.entity_ids == x.entity_ids
    assert len(_people(rt, "t")["person"]) == 3
