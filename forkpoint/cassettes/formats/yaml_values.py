"""YAML cassettes read an entry at a time, with the values `yaml.safe_load` gives, and no way
for a file to make the reader blow up.

libyaml (PyYAML's C parser, reading the file in blocks) gives the events, and each top-level
entry, and each item of `interactions`, is built from them into values directly (strings,
dicts and lists here, other scalars by PyYAML's SafeConstructor), then handed over: an import
holds one interaction at a time whatever the file's size, and a cassette read whole (the
pytest plugin's) is read in one pass without PyYAML's composer or nodes. What no cassette
needs is refused, naming its line: an alias (a few hundred bytes of them expand to gigabytes
in whatever walks the document), a merge key, a tag other than YAML's own scalars, a value
that does not build (an integer of 100,000 digits, a date that is none), nesting too deep.

    document = Document(file, "cassette.yaml")
    for entry in document.entries(interactions=True):
        entry.path, entry.value   # ("interactions", 3), {"request": …, "response": …}
    document.line(("interactions", 3, "response", "status"))  # for an error: re-reads
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any, NamedTuple, NoReturn

import yaml
from yaml.composer import Composer

from forkpoint.cassettes.formats.checks import Invalid, Where
from forkpoint.errors import CassetteError

# libyaml when PyYAML has it: the parse is then C, and only building the values is Python's.
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
INTERACTIONS = "interactions"

_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
# SafeConstructor's own function for each scalar tag that is not a string: the values are
# safe_load's (YAML 1.1: `0x1A`, `1_000`, `yes`, `~`, dates, `!!binary`…).
_SCALARS = {
    f"tag:yaml.org,2002:{name}": Loader.yaml_constructors[f"tag:yaml.org,2002:{name}"]
    for name in ("null", "bool", "int", "float", "binary", "timestamp")
}
_OPENS = {yaml.MappingStartEvent: _MAP, yaml.SequenceStartEvent: _SEQ}


class Entry(NamedTuple):
    """A top-level entry of the document, or an item of `interactions`, built."""

    path: Where  # ("forkpoint",), or ("interactions", 3)
    value: Any
    line: int  # where its value starts, from 1


class _Reader(Loader, Composer):  # type: ignore[misc, valid-type]
    """libyaml's events built into values; PyYAML's composer, to find a line for an error."""

    def __init__(self, stream: IO[bytes], source: str):
        super().__init__(stream)
        self.anchors: dict[str, yaml.Node] = {}
        self.source = source
        self.where: list[str | int] = []  # the path of the value being built

    def value(self) -> Any:
        """The next node's value, as safe_load builds it."""
        event = self.get_event()
        kind = type(event)
        if kind is yaml.ScalarEvent:
            tag = event.tag
            if tag is None or tag == "!":
                tag = self.resolve(yaml.ScalarNode, event.value, event.implicit)
            if tag == _STR:
                return event.value
            if tag in _SCALARS:
                return self._scalar(tag, event)
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            if event.tag not in (None, "!", _OPENS[kind]):
                tag = event.tag
            elif kind is yaml.MappingStartEvent:
                return self._mapping()
            else:
                return self._sequence()
        elif kind is yaml.AliasEvent:
            self.refuse_alias(event)
        else:
            tag = f"a {kind.__name__}"
        shown = str(tag).replace("tag:yaml.org,2002:", "!!")
        self.refuse(
            event, f"{shown} is not read in a cassette (it holds text, numbers, lists and maps)"
        )

    def _mapping(self) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        where = self.where
        while not self.check_event(yaml.MappingEndEvent):
            event = self.peek_event()
            if isinstance(event, yaml.ScalarEvent) and event.value == "<<" and event.implicit[0]:
                self.refuse(event, "a merge key (<<) is not read in a cassette")
            key = self.value()
            where.append(key if isinstance(key, str | int) else "?")
            value = self.value()
            try:
                result[key] = value
            except TypeError:
                self.refuse(event, "a key that is a list or a map is not read in a cassette")
            where.pop()
        self.get_event()
        return result

    def _sequence(self) -> list[Any]:
        result: list[Any] = []
        where = self.where
        while not self.check_event(yaml.SequenceEndEvent):
            where.append(len(result))
            result.append(self.value())
            where.pop()
        self.get_event()
        return result

    def _scalar(self, tag: str, event: yaml.ScalarEvent) -> Any:
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        try:
            return _SCALARS[tag](self, node)
        except (ValueError, OverflowError) as error:
            kind = tag.rsplit(":", 1)[-1]
            if kind in ("int", "float") and len(event.value) > 100:
                message = f"a number of {len(event.value)} characters is not read"
            else:
                message = f"{kind} {event.value[:40]!r} does not read ({error})"
            self.refuse(event, message)

    def refuse(self, event: yaml.Event, message: str) -> NoReturn:
        raise Invalid(tuple(self.where), message, line=event.start_mark.line + 1)

    def refuse_alias(self, event: yaml.AliasEvent) -> NoReturn:
        raise CassetteError(
            f"{self.source}, line {event.start_mark.line + 1}: a YAML alias (*{event.anchor}) "
            "is not read in a cassette (aliases can expand without bound); write the value out"
        )

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            self.refuse_alias(self.peek_event())
        return super().compose_node(parent, index)  # type: ignore[no-any-return]

    def skip_node(self) -> None:
        """The next node's events, passed over: nothing built."""
        depth = 0
        while True:
            event = self.get_event()
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            if depth == 0:
                return


class Document:
    """The YAML document in `file` (bytes, read in blocks), a top-level mapping of entries."""

    def __init__(self, file: IO[bytes], source: str):
        self.source = source
        self._file = file
        self._start = file.tell()

    def entries(self, *, interactions: bool) -> Iterator[Entry]:
        """Each top-level entry in the file's order, and each item of `interactions` as its
        own entry; with `interactions=False` its items are passed over unbuilt. Raises
        CassetteError for a document that is no mapping, or whose `interactions` is no
        list, or what does not read; Invalid, with its path and line, for a value that does
        not build."""
        reader = _Reader(self._file, self.source)
        try:
            yield from self._entries(reader, interactions)
        except yaml.MarkedYAMLError as error:
            mark = error.problem_mark or error.context_mark
            line = f", line {mark.line + 1}" if mark is not None else ""
            raise CassetteError(
                f"{self.source}{line}: not valid YAML ({error.problem or error.context}); "
                "fix the file or re-record it"
            ) from None
        except yaml.YAMLError as error:
            what = " ".join(str(error).split())  # PyYAML's reader errors span lines
            raise CassetteError(f"{self.source}: not valid YAML ({what})") from None
        except RecursionError:
            raise CassetteError(f"{self.source}: not read: its YAML nests too deep") from None
        finally:
            reader.dispose()

    def _entries(self, reader: _Reader, interactions: bool) -> Iterator[Entry]:
        reader.get_event()  # the stream's start
        if reader.check_event(yaml.StreamEndEvent):
            self._refuse(reader, "not a cassette: it has no `interactions` list")
        reader.get_event()  # the document's start
        if not _opens(reader, yaml.MappingStartEvent):
            self._refuse(reader, "not a cassette: it has no `interactions` list")
        reader.get_event()
        seen = False
        while not reader.check_event(yaml.MappingEndEvent):
            key_event = reader.peek_event()
            key = reader.value()
            line = reader.peek_event().start_mark.line + 1
            if key != INTERACTIONS:
                reader.where = [key if isinstance(key, str) else "?"]
                value = reader.value()
                if isinstance(key, str):
                    yield Entry((key,), value, line)
                continue
            if seen:
                self._refuse(reader, "`interactions` is given twice", key_event)
            if not _opens(reader, yaml.SequenceStartEvent):
                self._refuse(reader, "not a cassette: `interactions` is not a list")
            seen = True
            if not interactions:
                reader.skip_node()
                continue
            reader.get_event()
            index = 0
            while not reader.check_event(yaml.SequenceEndEvent):
                line = reader.peek_event().start_mark.line + 1
                reader.where = [INTERACTIONS, index]
                yield Entry((INTERACTIONS, index), reader.value(), line)
                index += 1
            reader.get_event()
        reader.get_event()
        reader.get_event()  # the document's end
        if not reader.check_event(yaml.StreamEndEvent):  # a second document: safe_load's error
            raise yaml.composer.ComposerError(
                "expected a single document in the stream", None,
                "but found another document", reader.get_event().start_mark,
            )  # fmt: skip
        if not seen:
            self._refuse(reader, "not a cassette: it has no `interactions` list")

    def _refuse(self, reader: _Reader, message: str, event: yaml.Event | None = None) -> NoReturn:
        """A CassetteError naming the line of `event`, else of the next event."""
        mark = (event or reader.peek_event()).start_mark
        raise CassetteError(f"{self.source}, line {mark.line + 1}: {message}")

    def line(self, path: Where, near: int) -> int:
        """The line of the value at `path` (or of its nearest enclosing value that exists),
        for an error: the file is read again from its start up to that entry, its nodes
        composed. `near`, the entry's own line, where the file cannot be read again."""
        try:
            self._file.seek(self._start)
        except OSError:
            return near
        reader = _Reader(self._file, self.source)
        try:
            reader.get_event()
            reader.get_event()
            reader.get_event()
            while not reader.check_event(yaml.MappingEndEvent):
                key = reader.compose_node(None, None)
                if key.value != path[0]:
                    reader.skip_node()
                elif key.value != INTERACTIONS or len(path) < 2:
                    return line_of(reader.compose_node(None, None), path[1:])
                else:
                    reader.get_event()
                    for _ in range(int(path[1])):
                        reader.skip_node()
                    return line_of(reader.compose_node(None, None), path[2:])
        except (yaml.YAMLError, CassetteError, RecursionError, ValueError):
            pass
        finally:
            reader.dispose()
        return near


def _opens(reader: _Reader, kind: type[yaml.Event]) -> bool:
    """Whether the next event opens a `kind` with no tag of its own (`!!set`, `!!omap`…)."""
    event = reader.peek_event()
    return isinstance(event, kind) and event.tag in (None, "!", _MAP, _SEQ)


def line_of(node: yaml.Node, path: Where) -> int:
    """The 1-based line of the value at `path` below `node`, or of its nearest enclosing value
    that exists."""
    line = node.start_mark.line
    for key in path:
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if k.value == str(key)), None)
            if found is None:
                break
            line, node = found[0].start_mark.line, found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line
        else:
            break
    return line + 1
