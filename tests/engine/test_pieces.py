"""Cutting a body into pieces as it passes: the same bytes give the same pieces however they
arrive, and a stored piece is named again only where a piece begins."""

from __future__ import annotations

from forkpoint.engine.pieces import Cutter


def test_the_same_bytes_give_the_same_pieces_however_they_arrive():
    one, other = Cutter(4), Cutter(4)
    cut = one.add(b"abcdefghij", 1.0) + one.close()
    spread = [blob for data in (b"ab", b"cdefg", b"hij") for blob in other.add(data, 2.0)]
    spread += other.close()
    assert [b.data for b in cut] == [b.data for b in spread] == [b"abcd", b"efgh", b"ij"]
    assert [p.digest for p in one.pieces] == [p.digest for p in other.pieces]


def test_a_stored_piece_is_named_only_where_a_piece_begins():
    stored = Cutter(4)
    (blob,) = stored.add(b"wxyz", 1.0)
    (piece,) = stored.pieces
    cutter = Cutter(4)
    assert cutter.name(piece, blob.data, 5.0) and cutter.pieces[0].offset_ms == 5.0
    cutter.add(b"a", 6.0)  # a piece is under way: the stored one must be cut like any bytes
    assert not cutter.name(piece, blob.data, 7.0)
