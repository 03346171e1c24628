"""Both object stores through one test body: a local folder and S3 on a real SeaweedFS server."""

from __future__ import annotations

import uuid

import pytest

from engram.workers.stores.objects import LocalObjectStore, ObjectNotFound, ObjectStore, S3ObjectStore


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path) -> ObjectStore:
    """A LocalObjectStore under ``tmp_path``, or an S3ObjectStore on a new bucket of the SeaweedFS server."""
    if request.param == "local":
        return LocalObjectStore(tmp_path / "objects")
    server = request.getfixturevalue("seaweedfs_s3")
    bucket = f"engram-{uuid.uuid4().hex[:12]}"
    return S3ObjectStore(server.endpoint, server.access_key, server.secret_key, bucket)


def test_put_get_size_exists_delete(store: ObjectStore, tmp_path):
    key = "media/tenant-a/0123abcd.png"
    assert not store.exists(key)
    store.put_bytes(key, b"\x89PNG first", "image/png")
    assert store.exists(key)
    assert store.get_bytes(key) == b"\x89PNG first"
    assert store.size(key) == len(b"\x89PNG first")

    store.put_bytes(key, b"second", "image/png")  # overwrites
    assert store.get_bytes(key) == b"second"
    assert store.size(key) == 6

    store.delete(key)
    assert not store.exists(key)
    store.delete(key)  # deleting a missing key is not an error


def test_put_file_and_download_round_trip(store: ObjectStore, tmp_path):
    data = bytes(range(256)) * 9000  # ~2.3 MB, more than one 1 MiB copy block
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    store.put_file("derived/t/ev/seg-00000-audio.wav", src, "audio/wav")
    assert store.size("derived/t/ev/seg-00000-audio.wav") == len(data)

    out = tmp_path / "out.bin"
    store.download("derived/t/ev/seg-00000-audio.wav", out)
    assert out.read_bytes() == data
    assert store.get_bytes("derived/t/ev/seg-00000-audio.wav") == data


def test_local_file_is_the_object_where_it_lies_or_a_download_removed_after(store: ObjectStore, tmp_path):
    data = b'{"text": "hello"}\n' * 100
    store.put_bytes("media/t/chat.jsonl", data)
    with store.local_file("media/t/chat.jsonl") as path:
        assert path.read_bytes() == data
        if isinstance(store, LocalObjectStore):  # the store's own file: no temporary folder, no copy
            assert path.samefile(store.root / "media/t/chat.jsonl")
    if isinstance(store, LocalObjectStore):
        assert path.exists()  # still the object
    else:
        assert not path.exists() and not path.parent.exists()  # the download went with the context
    with pytest.raises(ObjectNotFound), store.local_file("media/t/missing.jsonl"):
        pass


def test_empty_object(store: ObjectStore):
    store.put_bytes("media/t/empty.bin", b"")
    assert store.exists("media/t/empty.bin")
    assert store.size("media/t/empty.bin") == 0
    assert store.get_bytes("media/t/empty.bin") == b""


def test_missing_keys_raise_object_not_found(store: ObjectStore, tmp_path):
    missing = "media/t/does-not-exist.png"
    assert not store.exists(missing)
    with pytest.raises(ObjectNotFound):
        store.get_bytes(missing)
    with pytest.raises(ObjectNotFound):
        store.size(missing)
    with pytest.raises(ObjectNotFound):
        store.download(missing, tmp_path / "never.bin")
    assert issubclass(ObjectNotFound, KeyError)


@pytest.mark.parametrize("key", ["../x", "/abs", "a//b", "a/../b", "a/./b", "", "a/"])
def test_invalid_keys_are_rejected(store: ObjectStore, tmp_path, key):
    src = tmp_path / "f.bin"
    src.write_bytes(b"x")
    with pytest.raises(ValueError, match="invalid object key"):
        store.put_bytes(key, b"x")
    with pytest.raises(ValueError, match="invalid object key"):
        store.put_file(key, src)
    with pytest.raises(ValueError, match="invalid object key"):
        store.get_bytes(key)
    with pytest.raises(ValueError, match="invalid object key"):
        store.size(key)
    with pytest.raises(ValueError, match="invalid object key"):
        store.delete(key)


def test_local_store_cannot_escape_its_root(tmp_path):
    store = LocalObjectStore(tmp_path / "objects")
    with pytest.raises(ValueError):
        store.put_bytes("../outside.txt", b"x")
    assert not (tmp_path / "outside.txt").exists()
    assert [p for p in (tmp_path / "objects").rglob("*")] == []


def test_s3_wrong_secret_key_is_refused(seaweedfs_s3):
    from minio.error import S3Error

    s3 = seaweedfs_s3
    good = S3ObjectStore(s3.endpoint, s3.access_key, s3.secret_key, "engram-auth")
    good.put_bytes("media/t/secret.txt", b"only for the right key")

    bad = S3ObjectStore(seaweedfs_s3.endpoint, seaweedfs_s3.access_key, "not-the-secret", "engram-auth")
    for attempt in (
        lambda: bad.get_bytes("media/t/secret.txt"),
        lambda: bad.size("media/t/secret.txt"),
        lambda: bad.put_bytes("media/t/other.txt", b"x"),
    ):
        with pytest.raises(S3Error) as info:
            attempt()
        assert info.value.code in ("SignatureDoesNotMatch", "AccessDenied", "InvalidAccessKeyId")
    assert not good.exists("media/t/other.txt")
    assert good.get_bytes("media/t/secret.txt") == b"only for the right key"


def test_s3_unknown_access_key_is_refused(seaweedfs_s3):
    from minio.error import S3Error

    bad = S3ObjectStore(seaweedfs_s3.endpoint, "nobody", "nothing", "engram-auth-unknown")
    with pytest.raises(S3Error) as info:
        bad.put_bytes("media/t/x.txt", b"x")
    assert info.value.code in ("InvalidAccessKeyId", "AccessDenied", "SignatureDoesNotMatch")


def test_s3_delete_on_a_versioned_bucket_leaves_no_version(seaweedfs_s3):
    """On a bucket that keeps versions a plain S3 delete only adds a delete marker; engram's delete removes every
    version of the key and the marker (issue 44: deletion leaves nothing), and no other key's versions."""
    import uuid

    from minio.versioningconfig import ENABLED, VersioningConfig

    s3 = seaweedfs_s3
    store = S3ObjectStore(s3.endpoint, s3.access_key, s3.secret_key, f"vers-{uuid.uuid4().hex[:12]}")
    store.put_bytes("media/t/note.txt", b"first")
    store.client.set_bucket_versioning(store.bucket, VersioningConfig(ENABLED))
    for data in (b"second", b"third"):
        store.put_bytes("media/t/note.txt", data)
    store.put_bytes("media/t/note.txt.kept", b"another key sharing the prefix")

    def versions(key: str) -> list:
        return [
            v for v in store.client.list_objects(store.bucket, prefix=key, include_version=True) if v.object_name == key
        ]

    assert len(versions("media/t/note.txt")) == 3
    store.delete("media/t/note.txt")
    assert versions("media/t/note.txt") == [] and not store.exists("media/t/note.txt")
    assert store.get_bytes("media/t/note.txt.kept") == b"another key sharing the prefix"
    store.delete("media/t/never-stored.txt")  # nothing to delete: no error
