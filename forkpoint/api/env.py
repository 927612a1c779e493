"""The environment that points a command's clients at the proxy, for one run."""

from __future__ import annotations

import os
from collections.abc import Mapping

# Placeholders so SDKs that insist on a key start up under replay, which needs none.
REPLAY_KEYS = {"OPENAI_API_KEY": "forkpoint-replay", "ANTHROPIC_API_KEY": "forkpoint-replay"}


def agent_env(
    url: str, run_id: str, *, offline: bool, base: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """`base` with every base-URL variable the known clients read set to the proxy; with
    `offline`, a placeholder key for each SDK that refuses to start without one."""
    env = dict(base)
    if offline:
        for key, value in REPLAY_KEYS.items():
            if not env.get(key):
                env[key] = value
    env.update(
        OPENAI_BASE_URL=f"{url}/v1",
        OPENAI_API_BASE=f"{url}/v1",  # LangChain reads this one before OPENAI_BASE_URL
        ANTHROPIC_BASE_URL=f"{url}/anthropic",
        FORKPOINT_URL=url,
        FORKPOINT_RUN=run_id,
    )
    return env
