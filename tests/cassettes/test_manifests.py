"""Manifests: a request names what it repeats of its run's last one; readers resolve it."""

from __future__ import annotations

import orjson
import pytest

from forkpoint.cassettes import blobs
from forkpoint.cassettes.manifests import Blobs, Bodies, Packer
from tests.cassettes.test_contract import conversation


def packed(packer: Packer, step: int, body: bytes, new: dict) -> str:  # type: ignore[type-arg]
    return packer.pack_request("r1", step, body, new, stored=lambda digest: False)


def test_a_request_that_extends_the_last_refers_to_it():
    packer, new = Packer(), {}
    first = orjson.loads(packed(packer, 0, conversation(1), new))
    second = orjson.loads(packed(packer, 1, conversation(2), new))
    assert isinstance(first, list)
    assert second["step"] == 0 and second["take"] == len(first) - 1  # all but the tail
    reader = Bodies()
    assert reader.request(0, orjson.dumps(first).decode()) == first
    hashes = reader.request(1, orjson.dumps(second).decode())
    rows = [(digest, codec, data) for digest, _, codec, data in new.values()]
    assert Blobs(rows).join(hashes) == conversation(2)


def test_after_a_failed_write_nothing_refers_to_what_was_rolled_back():
    packer, new = Packer(), {}
    packed(packer, 0, conversation(1), new)
    packer.failed()
    assert isinstance(orjson.loads(packed(packer, 1, conversation(2), new)), list)


def test_a_reference_that_does_not_resolve_is_an_error():
    with pytest.raises(ValueError, match="refers to step 3, which does not read"):
        Bodies().request(5, '{"step": 3, "take": 1, "add": []}')
    with pytest.raises(ValueError, match="not a list of blob hashes"):
        Bodies().request(0, "[1, 2]")
    with pytest.raises(ValueError):
        Bodies.other("nope")


def test_a_blob_that_does_not_decompress_is_an_error():
    digest = blobs.content_hash(b"x")
    with pytest.raises(ValueError, match="does not decompress"):
        Blobs([(digest, "zstd", b"\x28\xb5\x2f\xfd\x00")]).join([digest])
    with pytest.raises(KeyError):
        Blobs([]).join([digest])
