"""Recorders that commit from a child process, so the proxy's process keeps its CPU for traffic.

Writing an exchange (summarizing, fingerprinting, hashing, compressing, committing) costs about
as much CPU as proxying it, and a writer thread also takes the GIL from the event loop: with
one, a proxy under load served a quarter fewer requests. `ProcessRecorder` sends the child
(`child`) each item's pickle, the bytes the journal already holds (at most one write per
LINGER); the child commits and acknowledges. Items stay in memory until acknowledged: if the
child dies, finds the store taking no writes or meets an item the store refuses, a writer
thread in this process commits them and every later one (holding in the journal what the
store refuses), so nothing handed over is lost. `AdaptiveRecorder`, what a proxy on a
cassette file uses, starts one only under load.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import cast

from forkpoint.cassettes.store import Store, location_of
from forkpoint.engine.matching import MatchConfig
from forkpoint.runtime.recording.child import HEADER, HELD, REFUSED, frame
from forkpoint.runtime.recording.journal import Entry, Journal, journal_dir
from forkpoint.runtime.recording.journaled import Journaled
from forkpoint.runtime.recording.recorder import (
    LINGER,
    LoopRecorder,
    Progress,
    Recorder,
    ThreadRecorder,
)
from forkpoint.runtime.recording.writer import Item

log = logging.getLogger(__name__)

# Exchanges a second from which a proxy writes from a child process.
PROMOTE_AT = 100

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])  # the folder holding forkpoint/
_CHILD = (
    f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); "
    "from forkpoint.runtime.recording.child import main; main()"
)


def recorder_for(store: Store, match: MatchConfig) -> Recorder:
    """For a cassette file, a recorder that moves to a writer process under load; a thread when
    the match settings cannot reach another process (a lambda among the normalizers). Both
    journal what they are given where a later process finds it. A store in memory needs no
    journal and is written on the loop."""
    if location_of(store) is None:  # in memory: nothing to journal, nothing to wait for
        return LoopRecorder(store, match=match)
    directory = journal_dir(store)
    journal = None
    if directory is not None:
        try:
            journal = Journal(directory)
        except OSError as error:
            log.error("forkpoint: cannot keep a journal in %s (%s): exchanges are held in "
                      "memory until committed", directory, error)  # fmt: skip
    inner: AdaptiveRecorder | ThreadRecorder
    if _portable(match):
        inner = AdaptiveRecorder(store, match, journal=journal)
    else:
        inner = ThreadRecorder(store, match=match, journal=journal)
    if journal is None:
        return inner
    return Journaled(inner, journal, store, match)


def _portable(match: MatchConfig) -> bool:
    """Whether another process can rebuild `match`: its normalizers are importable by name."""
    if any(getattr(f, "__module__", None) == "__main__" for f in match.normalizers):
        return False  # the child's __main__ is not the script that defined them
    try:
        pickle.dumps(match)
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True


class AdaptiveRecorder:
    """Writes on a thread until traffic passes PROMOTE_AT exchanges a second, then starts a
    writer process and hands it everything after.

    An agent talking to a real model sends a few requests a second: a thread costs it nothing
    noticeable, and a process would cost a Python start per run (an experiment forks dozens).
    A gateway under load gets the process, and the thread finishes what it already took.
    """

    def __init__(
        self, store: Store, match: MatchConfig = MatchConfig(), *,
        journal: Journal | None = None,
    ):  # fmt: skip
        self._store = store
        self._match = match
        self._journal = journal
        self._progress = Progress()
        self._thread = ThreadRecorder(store, match=match, progress=self._progress, journal=journal)
        self.process: ProcessRecorder | None = None  # once promoted
        self._starting: asyncio.Task[None] | None = None
        self._window = (0.0, 0)  # when the current count began, and the count

    def submit(self, item: Item) -> None:
        self.put(Entry(item))

    def put(self, entry: Entry) -> None:
        if self.process is not None:
            self.process.put(entry)
            return
        self._thread.put(entry)
        began, count = self._window
        count += 1
        if count >= PROMOTE_AT:
            now = time.monotonic()
            if now - began <= 1.0:
                self._promote()
            began, count = now, 0
        self._window = began, count

    def flush(self, timeout: float | None = 30.0) -> bool:
        return self._progress.wait(timeout)

    async def start(self) -> None:
        self._window = (time.monotonic(), 0)

    async def stop(self) -> None:
        if self.process is not None:
            assert self._starting is not None
            await self._starting
            await self.process.stop()
        await self._thread.stop()

    def _promote(self) -> None:
        self.process = ProcessRecorder(
            self._store, self._match, progress=self._progress, journal=self._journal
        )
        self._starting = asyncio.get_running_loop().create_task(self.process.start())


class ProcessRecorder:
    """Writes from a child process (see the module's docstring)."""

    def __init__(
        self,
        store: Store,
        match: MatchConfig = MatchConfig(),
        *,
        progress: Progress | None = None,
        journal: Journal | None = None,
    ):
        self._store = store
        self._match = match
        self._journal = journal
        location = location_of(store)
        if location is None:
            raise TypeError("a writer process opens its store again: an SQLite file or a database")
        self._setup = pickle.dumps((location, sys.path, pickle.dumps(match)))
        self._progress = progress or Progress()
        self._unacked: deque[Entry] = deque()  # handed to the child, not yet committed
        self._batch: list[bytes] = []  # frames not sent yet
        self._loop: asyncio.AbstractEventLoop | None = None
        self._child: _Child | None = None
        self._fallback: ThreadRecorder | None = None
        self._stopping = False
        self._sent_at = 0.0  # loop time of the last frame sent

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            _, self._child = await self._loop.subprocess_exec(
                lambda: _Child(self._acknowledged, self._exited),
                sys.executable, "-c", _CHILD,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None,
                # the journal's lock: a child left writing after the proxy died keeps it, so no
                # other process merges the journal under it
                pass_fds=() if self._journal is None else (self._journal.lock_fd,),
            )  # fmt: skip
        except Exception as error:  # whatever the loop raised, what was submitted gets written
            self._fall_back(f"could not start ({type(error).__name__}: {error})")
            return
        self._child.send(frame(self._setup))
        self._send_batch()

    @property
    def child_pid(self) -> int | None:
        """The writer process's pid; None before it starts or once this process writes."""
        if self._child is None or self._fallback is not None:
            return None
        return self._child.pid

    def submit(self, item: Item) -> None:
        self.put(Entry(item))

    def put(self, entry: Entry) -> None:
        if self._fallback is not None:
            self._fallback.put(entry)
            return
        self._progress.submitted += 1
        self._unacked.append(entry)
        framed = entry.payload
        if framed is None:
            framed = frame(pickle.dumps(entry.item, protocol=pickle.HIGHEST_PROTOCOL))
        self._batch.append(framed)
        if len(self._batch) == 1 and self._loop is not None:
            # At most one frame per LINGER: under load each carries many exchanges, and the
            # child commits each frame in one transaction. Otherwise the next loop pass sends.
            self._loop.call_at(max(self._loop.time(), self._sent_at + LINGER), self._send_batch)

    def flush(self, timeout: float | None = 30.0) -> bool:
        return self._progress.wait(timeout)

    async def stop(self) -> None:
        self._stopping = True
        if self._child is not None:
            self._send_batch()
            await self._child.finish()  # the child commits what it has, acknowledges, exits
        if self._fallback is not None:
            await self._fallback.stop()

    def _send_batch(self) -> None:
        if self._child is None:
            return  # still starting: `start` sends what is here
        batch, self._batch = self._batch, []
        if batch and self._fallback is None:
            self._sent_at = self._loop.time() if self._loop else 0.0
            self._child.send(b"".join(batch))

    def _acknowledged(self, count: int) -> None:
        for _ in range(count):
            entry = self._unacked.popleft()
            if self._journal is not None:
                self._journal.done(entry.segment)
        self._progress.written(count)

    def _exited(self, status: int | None) -> None:
        if status == HELD:
            self._fall_back("finds the cassette taking no writes")
        elif status == REFUSED:
            self._fall_back("met an item the cassette refuses")
        elif self._unacked or not self._stopping:
            self._fall_back(f"exited with status {status}")

    def _fall_back(self, why: str) -> None:
        log.warning("forkpoint: the cassette writer process %s; writing from this process", why)
        self._fallback = ThreadRecorder(
            self._store, match=self._match, progress=self._progress, journal=self._journal
        )
        self._batch.clear()  # every item in it is in _unacked too
        self._fallback.take_over(self._unacked)
        self._unacked.clear()


class _Child(asyncio.SubprocessProtocol):
    """The writer process's pipes, driven by the event loop: no task, no stream reader."""

    def __init__(self, on_ack: Callable[[int], None], on_exit: Callable[[int | None], None]):
        self._on_ack = on_ack
        self._on_exit = on_exit
        self._acks = bytearray()
        self._transport: asyncio.SubprocessTransport | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._gone = asyncio.get_running_loop().create_future()

    @property
    def pid(self) -> int:
        assert self._transport is not None
        return self._transport.get_pid()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio's: they are typed here, not checked
        self._transport = cast(asyncio.SubprocessTransport, transport)
        self._stdin = cast(asyncio.WriteTransport, self._transport.get_pipe_transport(0))

    def send(self, data: bytes) -> None:
        # Never blocks: the transport buffers what the pipe cannot take yet. A dead child's
        # pipe drops it; `connection_lost` reports the death and the fallback writes it all.
        assert self._stdin is not None
        if self._stdin.is_closing():  # uvloop raises on a closed pipe where asyncio drops
            return
        self._stdin.write(data)

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self._acks += data
        whole = len(self._acks) - len(self._acks) % HEADER.size
        if whole:
            counts = HEADER.iter_unpack(self._acks[:whole])
            del self._acks[:whole]
            self._on_ack(sum(count for (count,) in counts))

    def connection_lost(self, exc: Exception | None) -> None:
        """The child exited and its pipes are closed: every acknowledgement has been read."""
        assert self._transport is not None
        status = self._transport.get_returncode()
        self._transport.close()
        self._gone.set_result(None)
        self._on_exit(status)

    async def finish(self) -> None:
        """End the child's input and wait for it to exit."""
        assert self._stdin is not None
        self._stdin.close()  # after what is buffered has been written
        await self._gone
