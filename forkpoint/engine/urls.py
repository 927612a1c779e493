"""URLs as forkpoint keeps them: without the credentials a URL's userinfo may carry.

An upstream given as `https://user:pw@gateway` sends those as Basic auth (see
`runtime.upstream`); what is stored or shown of it (an exchange's `upstream`, a fork's change,
an experiment's options, a message) is the URL without them, so a fork or a resume of the run
is given the credentials again on its command line instead of reading them from the cassette.
"""

from __future__ import annotations


def without_userinfo(url: str) -> str:
    """`url` with its `user:password@` removed; any other text as it is."""
    if "@" not in url:  # most: no userinfo can be in it
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = len(rest)
    for delimiter in "/?#":
        found = rest.find(delimiter)
        if found >= 0:
            end = min(end, found)
    at = rest.rfind("@", 0, end)
    if at < 0:
        return url
    return f"{scheme}://{rest[at + 1 :]}"
