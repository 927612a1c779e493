"""multipart/form-data bodies read part by part (file uploads: openai's audio transcriptions,
file and image endpoints).

A client draws a new random boundary for every request, so two uploads of the same file never
have the same bytes; what they share is their parts: each one's name, file name, content type
and data. Matching and the divergence report see those. Redaction reads the text fields (the
parts that are no file: Slack's `files.upload` takes its `token` so) where they stand in the
body (`fields`), and leaves a file's bytes alone.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

# The key under which forkpoint itself writes the digest of binary data (a file part, a body):
# kept by matching (`engine.generated`), since two different files have different digests.
DIGEST = "sha256"

_BOUNDARY = re.compile(r'boundary=(?:"([^"]+)"|([^;\s]+))', re.IGNORECASE)
_DISPOSITION = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"|(\w+)=([^;\s]+)')


@dataclass(frozen=True, slots=True)
class Part:
    name: str | None
    filename: str | None
    content_type: str | None
    data: bytes

    def comparable(self) -> dict[str, object]:
        """What matching and the report see of the part: its data as text where it is text,
        else its size and digest."""
        fields: dict[str, object] = {"name": self.name}
        if self.filename is not None:
            fields["filename"] = self.filename
        if self.content_type is not None:
            fields["content-type"] = self.content_type
        try:
            fields["data"] = self.data.decode()
        except UnicodeDecodeError:
            digest = hashlib.sha256(self.data).hexdigest()
            fields["data (binary)"] = {"size": len(self.data), DIGEST: digest}
        return fields


def boundary(content_type: str | None) -> str | None:
    """The boundary of a multipart/form-data content type, or None for any other type."""
    if not content_type or not content_type.lower().startswith("multipart/form-data"):
        return None
    found = _BOUNDARY.search(content_type)
    return None if found is None else found.group(1) or found.group(2)


def parts(body: bytes, boundary: str) -> list[Part] | None:
    """The parts of a multipart body, or None when it is not one (a wrong boundary)."""
    placed = _placed(body, boundary)
    return None if placed is None else [part for part, _ in placed]


def fields(body: bytes, boundary: str) -> list[tuple[Part, int]]:
    """The text fields of a multipart body (its parts that are no file), each with where its
    data begins in the body; none when it is not one."""
    return [(part, at) for part, at in _placed(body, boundary) or [] if part.filename is None]


def _placed(body: bytes, boundary: str) -> list[tuple[Part, int]] | None:
    delimiter = b"--" + boundary.encode()
    pieces = body.split(delimiter)
    if len(pieces) < 3 or not pieces[-1].startswith(b"--"):
        return None
    found, at = [], len(pieces[0]) + len(delimiter)
    for piece in pieces[1:-1]:
        skipped = 2 if piece.startswith(b"\r\n") else 0
        head, sep, data = piece[skipped:].partition(b"\r\n\r\n")
        if not sep:
            return None
        part = _part(head.decode("latin-1"), data.removesuffix(b"\r\n"))
        found.append((part, at + skipped + len(head) + len(sep)))
        at += len(piece) + len(delimiter)
    return found


def _part(head: str, data: bytes) -> Part:
    headers = {}
    for line in head.split("\r\n"):
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    params: dict[str, str] = {}
    for match in _DISPOSITION.finditer(headers.get("content-disposition", "")):
        key = match.group(1) or match.group(3)
        params[key.lower()] = match.group(2) if match.group(1) else match.group(4)
    return Part(params.get("name"), params.get("filename"), headers.get("content-type"), data)
