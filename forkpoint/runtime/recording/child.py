"""The writer process: reads pickled items on stdin, commits them, acknowledges on stdout.

Started by `process.ProcessRecorder`. Frames are an 8-byte big-endian length and a pickle
(the journal's own frames); the first holds the cassette's path, the parent's `sys.path` and
the match settings, each later one a run, an exchange or a snapshot. After committing a batch
(one or more frames) the child writes its item count as 8 bytes. At end of input (the proxy
closed it, or died) it commits what it has read and exits, so nothing the proxy handed over is
lost with it. When the store takes no writes it exits with status HELD, and the proxy writes
(and holds) from its own process; when the store refuses an item (an error not its being
unavailable), it writes the rest of the batch and exits with status REFUSED, unacknowledged,
and the proxy writes the batch again and keeps that item in its journal.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import struct
import sys
import time

from forkpoint.runtime import collector

HEADER = struct.Struct("!Q")
# Under load, how often the child commits (seconds), and how many items one commit takes at
# most. Waiting risks nothing: until acknowledged, the proxy keeps every item it sent (and its
# journal, which readers read, holds them). A commit costs a few hundred µs of its own
# (benchmarks/record_parts.py: an exchange written alone cost 1.4-2.1 times what one in a
# batch of 32 did); at 600 exchanges a second, 50 ms makes batches of 30.
COMMIT_EVERY = 0.05
MAX_BATCH = 256
NICENESS = 10
HELD = 75  # EX_TEMPFAIL: the store takes no writes now
REFUSED = 65  # EX_DATAERR: the store refused an item


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


class FrameReader:
    """Frames from a file descriptor, without Python's buffering hiding what is ready."""

    def __init__(self, fd: int):
        self._fd = fd
        self._buffer = bytearray()
        self._ended = False

    def next(self) -> bytes | None:
        """The next frame, waiting for it; None at end of input (a cut last frame is dropped)."""
        while (payload := self._take()) is None:
            if not self._read():
                return None
        return payload

    def before(self, deadline: float) -> bytes | None:
        """The next frame if it arrives whole by `deadline` (`time.monotonic()`), else None;
        a deadline already past takes only what is here."""
        while (payload := self._take()) is None:
            wait = max(deadline - time.monotonic(), 0)
            if not select.select([self._fd], [], [], wait)[0] or not self._read():
                return None
        return payload

    def _read(self) -> bool:
        if self._ended:
            return False
        data = os.read(self._fd, 1 << 20)
        self._ended = not data
        self._buffer += data
        return bool(data)

    def _take(self) -> bytes | None:
        if len(self._buffer) < HEADER.size:
            return None
        (length,) = HEADER.unpack_from(self._buffer)
        end = HEADER.size + length
        if len(self._buffer) < end:
            return None
        payload = bytes(self._buffer[HEADER.size : end])
        del self._buffer[:end]
        return payload


def main() -> None:
    # Ctrl-C reaches the whole process group: the proxy decides when writing ends, by closing
    # this process's input.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Writing is background work: when the CPUs are short, the proxy's live traffic goes first.
    os.nice(NICENESS)
    # Each item unpickled, derived and packed is a few hundred objects freed by reference
    # counting, never a cycle: the young generation's default threshold collected every few.
    collector.tune()
    logging.basicConfig(format="%(message)s", level=logging.WARNING)
    frames = FrameReader(sys.stdin.fileno())
    setup = frames.next()
    if setup is None:
        return
    location, parent_path, match = pickle.loads(setup)
    # The match settings may name the parent's own normalizer functions.
    sys.path[:] = parent_path

    from forkpoint.cassettes.open import open_store
    from forkpoint.runtime.recording.writer import CassetteWriter, Unavailable

    try:
        store = open_store(location, create=False)
        writer = CassetteWriter(store, pickle.loads(match), kept=None)  # the proxy says it
    except Exception as error:  # the proxy writes from its own process instead
        sys.exit(f"forkpoint: the cassette writer process cannot start: {error}")
    acks: int | None = sys.stdout.fileno()
    committed = float("-inf")  # when the last commit ended
    try:
        while (payload := frames.next()) is not None:
            batch = [pickle.loads(payload)]
            # Idle, this commits at once; under load, once per COMMIT_EVERY, in one transaction.
            deadline = committed + COMMIT_EVERY
            while len(batch) < MAX_BATCH and (more := frames.before(deadline)) is not None:
                batch.append(pickle.loads(more))
            try:
                refused = writer.write(batch)
            except Unavailable as error:
                logging.getLogger(__name__).warning(
                    "forkpoint: the cassette takes no writes (%s); the proxy holds them", error
                )
                sys.exit(HELD)
            if refused:  # acknowledged, it would be dropped from the proxy's journal
                sys.exit(REFUSED)
            committed = time.monotonic()
            if acks is not None:
                try:
                    os.write(acks, HEADER.pack(len(batch)))
                except BrokenPipeError:  # the proxy is gone: its last batches still get written
                    acks = None
    finally:
        store.close()


if __name__ == "__main__":
    main()
