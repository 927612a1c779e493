"""The wake benchmarks' agent: a Python agent that imports openai and keeps a STATE_KB state in
forkpoint's agent helper. It makes STEPS - 1 model calls, asks for an approval (step STEPS - 1,
which `--park 'POST /approvals*'` parks), then makes one more model call and exits.

Woken, it is restored from the snapshot taken as it parked, so its first request is the
approval again (answered from the store), and its next one goes live. Alone (no forkpoint),
`AT_APPROVAL=1` starts it where it parked and it asks the approval tool itself
(`APPROVALS_URL`): what restarting it there costs with no forkpoint, for comparison. With
PARK_TIMES, it notes in that file when its process started and when its imports were done.
"""

import time

STARTED = time.time()

import os  # noqa: E402

import httpx  # noqa: E402
import openai  # noqa: E402

from forkpoint.adapters.agent import attach  # noqa: E402

IMPORTED = time.time()

STEPS = int(os.environ.get("STEPS", "50"))
STATE_KB = int(os.environ.get("STATE_KB", "100"))
START = STEPS - 1 if os.environ.get("AT_APPROVAL") else 0

ballast = "x" * (STATE_KB * 1024)
state = attach(default={"turn": START, "approval": None, "ballast": ballast})
client = openai.OpenAI(max_retries=0)
while state["turn"] < STEPS - 1:
    question = [{"role": "user", "content": f"question {state['turn']}"}]
    client.chat.completions.create(model="gpt-4o", messages=question)
    state["turn"] += 1
if state["approval"] is None:
    tool = os.environ.get("APPROVALS_URL")
    if not tool:
        tool = f"{os.environ['FORKPOINT_URL']}/r/{os.environ['FORKPOINT_RUN']}"
    asked = httpx.post(f"{tool}/approvals/go", json={"turn": state["turn"]}, timeout=None)
    state["approval"] = asked.json()
if os.environ.get("PARK_TIMES"):  # when it started and had its imports: park_wake.py's detail
    with open(os.environ["PARK_TIMES"], "a") as times:
        times.write(f"{os.environ.get('FORKPOINT_RUN', 'alone')} {STARTED} {IMPORTED}\n")
done = [{"role": "user", "content": f"approved: {state['approval']}"}]
client.chat.completions.create(model="gpt-4o", messages=done)
