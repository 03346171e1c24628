"""The collections of the vector store and what each holds: their names, named vectors (``VECTORS``), payload
indexes (``INDEXED_FIELDS``), and the filters every caller builds (``tenant_filter``).

Collections (shared by all tenants; ``tenant_id`` is in every payload and every filter): ``observations``,
the six memory types, and ``entities``. Each has a named dense vector ``text`` (384-d, cosine) and a named
sparse vector ``bm25`` (IDF modifier); ``entities`` also has ``face`` (128-d dlib face descriptor, Euclidean) and
``voice`` (256-d Resemblyzer d-vector, cosine), the centroids nearest-entity search runs on, and the samples they
are the means of as multivectors ``face_samples``/``voice_samples`` (a point may lack any of its named vectors);
``observations`` has ``sentences``, the multivector its dense search scores by MaxSim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engram.schemas.memories import MemoryType
from engram.workers.stores import models as qm

DENSE = "text"
SPARSE = "bm25"
DIM = 384
FACE = "face"
VOICE = "voice"
FACE_SAMPLES = "face_samples"
VOICE_SAMPLES = "voice_samples"
SENTENCES = "sentences"  # an observation's contextual vector and its sentences' (``workers.embed``), MaxSim
OBSERVATIONS = "observations"
ENTITIES = "entities"

COLLECTIONS = (OBSERVATIONS, *[t.value for t in MemoryType if t is not MemoryType.observation], ENTITIES)


@dataclass(frozen=True)
class VectorSpec:
    """One named dense vector of a collection: ``size`` dimensions, ``distance`` ('cosine' or 'euclid'),
    ``multi``: a multivector scored by MaxSim, ``searched``: False for vectors only read back (no HNSW graph)."""

    size: int
    distance: str = "cosine"
    multi: bool = False
    searched: bool = True


#: Every collection's named dense vectors (besides these, one sparse vector ``bm25`` with the IDF modifier).
VECTORS: dict[str, dict[str, VectorSpec]] = {name: {DENSE: VectorSpec(DIM)} for name in COLLECTIONS}
VECTORS[OBSERVATIONS][SENTENCES] = VectorSpec(DIM, multi=True)
VECTORS[ENTITIES].update(
    {
        FACE: VectorSpec(128, "euclid"),
        VOICE: VectorSpec(256),
        FACE_SAMPLES: VectorSpec(128, "euclid", multi=True, searched=False),
        VOICE_SAMPLES: VectorSpec(256, multi=True, searched=False),
    }
)

#: Collections whose dense search scores a multivector by MaxSim instead of the single ``text`` vector: the
#: multivector's first row is the point's own ``text`` vector (an observation: its contextual vector, then its
#: sentences'). A point written without it gets ``[text]`` as its one row (``complete_points``).
DENSE_SEARCH_MULTIVECTOR: dict[str, str] = {OBSERVATIONS: SENTENCES}

#: Payload indexes of every collection: what filters, tenancy and ``order_by`` (``newest``) use. ``tenant_id`` is
#: Qdrant's tenant index (points of one tenant stored together). ``superseded_by`` and ``archived``: every memory
#: search filters on them (``workers.memory.dynamics.active_filter``); without an index the engine read each
#: candidate memory's payload to check them (~4 ms of a search). A store made before an index was added gets it
#: when it is opened. The indexes are memory-mapped (``Memory.Cold``), not read into memory when a shard opens:
#: opening the observations of a 100 k store took 0.41 CPU s with them in memory (most of it building the
#: keyword maps and the numeric trees), 0.10 s memory-mapped, the warm search the same (14-15 ms p50 both, load
#: 5). Indexes made in memory by an earlier engram are moved to disk by ``EdgeVectorStore.optimize``.
INDEXED_FIELDS = {
    "tenant_id": "keyword",
    "user_id": "keyword",
    "device_id": "keyword",
    "kind": "keyword",
    "event_id": "keyword",
    "start_ts": "float",
    "end_ts": "float",
    "consolidated": "bool",
    "entity_ids": "keyword",
    "name_keys": "keyword",
    "superseded_by": "keyword",
    "archived": "bool",
}

#: Observation payload fields that only the observation itself needs (the chat context indexed with a turn, OCR
#: lines and the digests of the pixels read, ASR words, faces, voices): consolidation never reads them and leaves
#: them out of its scroll (``without=``), so less is copied out of the engine.
UNREAD_OBSERVATION_FIELDS = [
    "context_before",
    "context_after",
    "ocr_lines",
    "pixel_digests",
    "words",
    "faces",
    "speaker_voices",
    "voice_embedding",
]


def collection_for(memory_type: MemoryType) -> str:
    """Qdrant collection name of a memory type (``observation`` lives in ``observations``)."""
    return OBSERVATIONS if memory_type is MemoryType.observation else memory_type.value


def tenant_filter(tenant_id: str, user_id: str | None = None, **must: Any) -> qm.Filter:
    """A filter on tenant (always), user (when given) and exact payload values."""
    conds: list[qm.Condition] = [qm.FieldCondition(key="tenant_id", match=qm.MatchValue(value=tenant_id))]
    if user_id is not None:
        conds.append(qm.FieldCondition(key="user_id", match=qm.MatchValue(value=user_id)))
    for key, value in must.items():
        conds.append(qm.FieldCondition(key=key, match=qm.MatchValue(value=value)))
    return qm.Filter(must=conds)
