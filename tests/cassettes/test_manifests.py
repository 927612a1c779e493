"""Manifests: a request names what it repeats of its run's last one; readers resolve it."""

from __future__ import annotations

import random

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_after_a_failed_write_what_repeats_it_is_stored_again():
    packer = Packer()
    packed(packer, 0, conversation(3), {})
    packer.failed()  # its blobs were rolled back: a request repeating it has them all again
    new: dict[str, BlobRow] = {}
    packed(packer, 1, conversation(4), new)
    assert set(new) == {blobs.content_hash(s) for s in blobs.split(conversation(4))}


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


# Pieces of bodies that a cut looks at (objects that open with "role" or "type", whitespace,
# commas, list ends) and filler long enough to make segments.
_PIECES = st.sampled_from([
    b'{"role"', b'{ "type"', b'{\n\t"role"', b"{", b"   ", b",", b", ", b"}", b"]", b"}\n]",
    b'"role"', b'"type"', b"x" * 300, b"y" * 90, b"\\", b'"',
])  # fmt: skip
_BODIES = st.lists(_PIECES, max_size=60).map(b"".join)


@given(_BODIES)
@settings(max_examples=400, deadline=None)
def test_a_body_cut_from_any_cut_it_made_is_cut_as_it_was_whole(body: bytes):
    whole = blobs.split(body)
    end = 0
    for index, segment in enumerate(whole[:-2]):  # the last two are cut apart from the matches
        end += len(segment)
        assert blobs.split(body, end) == whole[index + 1 :]


def _conversation(turns: list[bytes], tail: bytes) -> bytes:
    messages = [orjson.dumps({"role": "user", "content": turn.decode("latin-1")}) for turn in turns]
    return b'{"messages": [' + b", ".join(messages) + b"], " + tail + b"}"


_EDITS = st.sampled_from(["grow", "grow", "grow", "edit", "drop", "same", "extend", "other"])
_TAILS = st.sampled_from([b'"model": "gpt-4o"', b'"tools": [{"type": "function"}]', b""])


@given(st.lists(st.tuples(_EDITS, _BODIES, _TAILS), min_size=1, max_size=12))
@settings(max_examples=150, deadline=None)
def test_a_request_that_repeats_the_last_packs_as_if_cut_whole(edits):
    """A run's requests, each the last one grown, edited in the middle, cut short, the same
    again, the last with bytes added after its end, or another body: each reads back as the
    hashes of its segments cut whole, every one of them stored or about to be (a packer takes
    what repeats its run's last request from that request's cut)."""
    turns: list[bytes] = [b"You are terse. " * 30]
    packer, new, reader = Packer(compact=True), {}, Bodies()
    body = b""
    for step, (edit, text, tail) in enumerate(edits):
        if edit == "grow":
            turns.append(text)
        elif edit == "edit" and len(turns) > 1:
            turns[len(turns) // 2] = text
        elif edit == "drop" and len(turns) > 1:
            turns.pop()
        if edit == "other":
            body = text
        elif edit == "extend":
            body += text
        else:
            body = _conversation(turns, tail)
        manifest = packer.pack_request("r1", step, body, new, lambda _: False)
        whole = [blobs.content_hash(segment) for segment in blobs.split(body)]
        assert reader.request(step, manifest.dump()) == whole
        assert set(whole) <= new.keys()
