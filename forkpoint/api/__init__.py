from forkpoint.api.verbs import *  # noqa: F403
from forkpoint.api.verbs import (  # noqa: F401
    DEFAULT_ROUTES,
    DEFAULT_UPSTREAM,
    REPLAY_KEYS,
    _attach_workspace,
    _run_command,
)
