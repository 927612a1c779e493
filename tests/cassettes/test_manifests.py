"""Manifests: a request names what it repeats of its run's last one; readers resolve it."""

from __future__ import annotations

import random

import orjson
import pytest

from forkpoint.cassettes import blobs
from forkpoint.cassettes.manifests import BlobRow, Blobs, Bodies, Fetch, Packer
from tests.cassettes.test_contract import conversation


def packed(packer: Packer, step: int, body: bytes, new: dict) -> str:  # type: ignore[type-arg]
    return packer.pack_request("r1", step, body, new, stored=lambda digest: False).dump()


def by_hash(new: dict[str, BlobRow]) -> Fetch:
    """The blobs a packer made, as a store that names them by hash gives them."""
    return lambda keys: [(k, new[k][2], new[k][3], None, None) for k in keys if k in new]


def test_a_request_that_extends_the_last_refers_to_it():
    packer, new = Packer(), {}
    first = orjson.loads(packed(packer, 0, conversation(1), new))
    second = orjson.loads(packed(packer, 1, conversation(2), new))
    assert isinstance(first, list)
    assert second["step"] == 0 and second["take"] == len(first) - 1  # all but the tail
    reader = Bodies()
    assert reader.request(0, orjson.dumps(first).decode()) == first
    hashes = reader.request(1, orjson.dumps(second).decode())
    assert Blobs(by_hash(new)).load(hashes).join(hashes) == conversation(2)


def test_after_a_failed_write_nothing_refers_to_what_was_rolled_back():
    packer, new = Packer(), {}
    packed(packer, 0, conversation(1), new)
    packer.failed()
    assert isinstance(orjson.loads(packed(packer, 1, conversation(2), new)), list)


def test_a_reference_that_does_not_resolve_is_an_error():
    with pytest.raises(ValueError, match="refers to step 3, which does not read"):
        Bodies().request(5, '{"step": 3, "take": 1, "add": []}')
    with pytest.raises(ValueError, match="not a list of blobs"):
        Bodies().request(0, "[1.5, true]")
    with pytest.raises(ValueError):
        Bodies.other("nope")


def test_a_blob_that_does_not_decompress_is_an_error():
    digest = blobs.content_hash(b"x")
    stored = Blobs(lambda keys: [(digest, "zstd", b"\x28\xb5\x2f\xfd\x00", None, None)])
    with pytest.raises(ValueError, match="does not decompress"):
        stored.load([digest]).join([digest])
    with pytest.raises(KeyError):
        Blobs(lambda keys: []).load([digest]).join([digest])


@pytest.mark.parametrize(
    ("added", "as_delta"),
    [
        (b"", True),  # a delta of a few bytes: kept without compressing the blob alone
        (bytes(range(256)) * 2, True),  # a delta past a sixteenth, still under half of alone
        (None, False),  # nothing like the keyframe: stored alone, a keyframe itself
    ],
)
def test_a_blob_is_kept_as_a_delta_when_that_at_least_halves_it(added, as_delta):
    noise = random.Random(5).randbytes(3000)  # zstd cannot shrink it alone
    packer, new = Packer(compact=True), {}
    packer.pack_response(noise, new, lambda _: False, "r1")  # the run's keyframe
    blob = bytes(reversed(noise)) if added is None else noise[:2000] + added + b"!"
    digest = packer.pack_response(blob, new, lambda _: False, "r1").hashes[0]
    codec = new[digest][2]
    assert codec == (blobs.Codec.ZSTD_DICT if as_delta else blobs.Codec.RAW), codec
    keyframe = new[packer.pack_response(noise, {}, lambda _: False, "r1").hashes[0]]
    assert (keyframe[0] in new[digest][4]) is as_delta  # compressed against it
