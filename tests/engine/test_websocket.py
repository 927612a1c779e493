"""A websocket's life in the engine, with plain data: recorded message by message, replayed
(the server's messages at their offsets, its close), forked mid-connection, diverged."""

from __future__ import annotations

import orjson

from forkpoint.engine.config import EngineConfig, Routes
from forkpoint.engine.decide import Forward, Request, Serve, decide
from forkpoint.engine.dialects import summarize_exchange
from forkpoint.engine.frames import Frame
from forkpoint.engine.lifecycle import Commit
from forkpoint.engine.pace import Pace
from forkpoint.engine.session import Session
from forkpoint.engine.websocket import Close, Connect, Connection, ToAgent, ToUpstream, opens
from forkpoint.models import Exchange, Mode, Origin, Run, RunStatus

CONFIG = EngineConfig(routes=Routes("https://api.openai.com"))
ROUTE = "/v1/responses"
UPGRADE = Request(
    "GET", ROUTE,
    (("upgrade", "websocket"), ("connection", "Upgrade"), ("authorization", "Bearer sk-live"),
     ("sec-websocket-key", "abc=="), ("sec-websocket-version", "13"),
     ("sec-websocket-protocol", "realtime")),
    b"",
)  # fmt: skip


def create(text: str, session_id: str = "0b9c7a7e-8e0a-4f39-9a3b-1d2f3e4a5b6c") -> Frame:
    body = {"type": "response.create", "model": "gpt-5.5", "input": [{"role": "user", "content": text}],
            "client_metadata": {"session_id": session_id}}  # fmt: skip
    return Frame(orjson.dumps(body))


def events(text: str) -> list[Frame]:
    return [
        Frame(orjson.dumps({"type": "response.created", "response": {"id": "resp_1"}})),
        Frame(orjson.dumps({"type": "response.output_text.delta", "delta": text})),
        Frame(orjson.dumps({"type": "response.completed", "response": {
            "id": "resp_1", "model": "gpt-5.5", "status": "completed",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": text}]}],
            "usage": {"input_tokens": 7, "output_tokens": 2}}})),
    ]  # fmt: skip


def committed(commands: list[object]) -> list[Exchange]:
    return [c.exchange for c in commands if isinstance(c, Commit)]


def record_conversation() -> list[Exchange]:
    """A live socket: a greeting from the server, then two questions, then the agent leaves."""
    session = Session(Run("rec"))
    upgrade = decide(session, UPGRADE, CONFIG)
    assert isinstance(upgrade, Forward) and opens(upgrade)
    assert upgrade.url == "https://api.openai.com/v1/responses"
    connection = Connection.live(
        session, CONFIG, UPGRADE, upgrade, 101, (("x-request-id", "r1"),), 10.0
    )
    records = []
    assert connection.from_upstream(Frame(b'{"type":"session.created"}'), 10.05) == [
        ToAgent(Frame(b'{"type":"session.created"}'), 10.05)
    ]
    for index, (question, at) in enumerate((("hi", 11.0), ("bye", 12.0))):
        commands = connection.from_agent(create(question), at)
        records += committed(commands)
        assert commands[-1] == ToUpstream(create(question))
        for offset, frame in enumerate(events(f"answer {index}")):
            connection.from_upstream(frame, at + 0.1 * (offset + 1))
    records += committed(connection.closed_by_agent(13.0))
    return records


def test_a_live_socket_is_recorded_message_by_message():
    upgrade, first, second = record_conversation()
    assert (upgrade.method, upgrade.status, upgrade.step) == ("GET", 101, 0)
    assert [c.data for c in upgrade.chunks or []] == [b'{"type":"session.created"}']
    assert upgrade.chunks and upgrade.chunks[0].offset_ms == 50.0
    assert dict(upgrade.request_headers)["authorization"] == "[redacted]"
    assert (first.method, first.route, first.step, first.status) == ("WS", ROUTE, 1, 101)
    assert orjson.loads(first.request_body)["input"][0]["content"] == "hi"
    assert [round(c.offset_ms) for c in first.chunks or []] == [100, 200, 300]
    assert dict(first.response_headers)["websocket-messages"] == "text,text,text"
    summary = summarize_exchange(second)  # read as the Responses API's events
    assert (summary.model, summary.usage and summary.usage.output, summary.text) == (
        "gpt-5.5",
        2,
        "answer 1",
    )


def replaying(
    recorded: list[Exchange], *, pace: Pace = Pace()
) -> tuple[Session, Connection, list[object]]:
    session = Session.replay(Run("rep", mode=Mode.REPLAY, parent_id="rec"), recorded, CONFIG)
    upgrade = decide(session, UPGRADE, CONFIG)
    assert isinstance(upgrade, Serve) and opens(upgrade)
    connection, opening = Connection.served(session, CONFIG, UPGRADE, upgrade, 100.0, pace=pace)
    return session, connection, opening


def test_a_replay_answers_each_message_with_the_recorded_ones():
    session, connection, opening = replaying(record_conversation())
    assert opening == [ToAgent(Frame(b'{"type":"session.created"}'), 100.0)]
    # another run's session id: the similar tier sets it aside
    commands = connection.from_agent(create("hi", "6f1d2c3b-4a59-4e8f-8d7c-6b5a49382716"), 101.0)
    upgrade = committed(commands)[0]
    assert (upgrade.origin, upgrade.status) == (Origin.REPLAYED, 101)
    assert [c.frame for c in commands if isinstance(c, ToAgent)] == events("answer 0")
    assert not any(isinstance(c, Connect | ToUpstream) for c in commands)
    served = committed(connection.from_agent(create("bye"), 102.0))[0]
    assert served.origin is Origin.REPLAYED and "client_metadata" in (served.note or "")
    assert session.run.status is RunStatus.RUNNING


def test_a_paced_replay_sends_each_message_at_its_offset():
    _, connection, _ = replaying(record_conversation(), pace=Pace(2.0))
    commands = connection.from_agent(create("hi"), 50.0)
    assert [c.at for c in commands if isinstance(c, ToAgent)] == [50.05, 50.1, 50.15]


def test_a_message_the_recording_lacks_gets_the_error_then_a_close():
    session, connection, _ = replaying(record_conversation())
    commands = connection.from_agent(create("something else"), 101.0)
    sent = [c for c in commands if isinstance(c, ToAgent)]
    error = orjson.loads(sent[0].frame.data)
    assert error["type"] == "error" and "forkpoint divergence" in error["error"]["message"]
    assert commands[-1] == Close(1008, "forkpoint divergence")
    diverged = committed(commands)[-1]
    assert diverged.origin is Origin.DIVERGED and session.run.status is RunStatus.DIVERGED


def test_a_server_close_is_recorded_and_replayed():
    session = Session(Run("rec"))
    upgrade = decide(session, UPGRADE, CONFIG)
    assert isinstance(upgrade, Forward)
    connection = Connection.live(session, CONFIG, UPGRADE, upgrade, 101, (), 0.0)
    records = committed(connection.from_agent(create("hi"), 1.0))
    connection.from_upstream(events("x")[0], 1.1)
    commands = connection.closed_by_upstream(4000, "session expired", 1.2)
    assert commands[-1] == Close(4000, "session expired")
    records += committed(commands)
    assert dict(records[-1].response_headers)["websocket-close"] == "4000 session expired"
    _, replay, _ = replaying(records)
    assert replay.from_agent(create("hi"), 5.0)[-1] == Close(4000, "session expired")


def test_a_fork_connects_upstream_at_its_step_with_the_agents_headers():
    parent = record_conversation()
    session = Session.fork(Run("child", mode=Mode.FORK, parent_id="rec"), parent, CONFIG, at=2)
    upgrade = decide(session, UPGRADE, CONFIG)
    assert isinstance(upgrade, Serve)
    connection, _ = Connection.served(session, CONFIG, UPGRADE, upgrade, 0.0)
    assert not any(isinstance(c, Connect) for c in connection.from_agent(create("hi"), 1.0))
    commands = connection.from_agent(create("bye"), 2.0)
    connect = next(c for c in commands if isinstance(c, Connect))
    assert connect.url == "wss://api.openai.com/v1/responses"
    headers = dict(connect.headers)
    assert headers["authorization"] == "Bearer sk-live" and "sec-websocket-key" not in headers
    assert "upgrade" not in headers and connect.protocols == ("realtime",)
    assert commands[-1] == ToUpstream(create("bye"))
    again = connection.from_agent(create("more"), 3.0)
    assert not any(isinstance(c, Connect) for c in again)  # connected once


def test_an_upstream_that_fails_cuts_the_exchange_and_closes_the_agents_socket():
    session = Session(Run("rec"))
    upgrade = decide(session, UPGRADE, CONFIG)
    assert isinstance(upgrade, Forward)
    connection = Connection.live(session, CONFIG, UPGRADE, upgrade, 101, (), 0.0)
    connection.from_agent(create("hi"), 1.0)
    commands = connection.upstream_failed("upstream websocket broke", 1.5)
    cut = committed(commands)[0]
    assert (cut.complete, cut.error) == (False, "upstream websocket broke")
    assert commands[-1] == Close(1001, "upstream unavailable")


def test_a_secret_in_a_server_message_is_masked_in_the_record_and_sent_as_it_came():
    """A realtime session's ephemeral key, say: the agent needs it, the cassette must not
    hold it."""
    session = Session(Run("rec"))
    upgrade = decide(session, UPGRADE, CONFIG)
    assert isinstance(upgrade, Forward)
    connection = Connection.live(session, CONFIG, UPGRADE, upgrade, 101, (), 0.0)
    records = committed(connection.from_agent(create("hi"), 1.0))
    secret = Frame(b'{"type": "session.updated", "session": {"id": "s1"}, "token": "ek_live_1"}')
    nested = Frame(b'{"type": "x", "session": {"api_key": "sk-live-2", "n": 1}}')
    sent = [connection.from_upstream(frame, 1.1) for frame in (secret, nested)]
    assert sent == [[ToAgent(secret, 1.1)], [ToAgent(nested, 1.1)]]
    records += committed(connection.closed_by_agent(1.2))
    stored = records[-1]
    assert stored.chunks is not None
    assert b"ek_live_1" not in stored.response_body and b"sk-live-2" not in stored.response_body
    assert [c.data for c in stored.chunks][1] == (
        b'{"type": "x", "session": {"api_key": "[redacted]", "n": 1}}'
    )
