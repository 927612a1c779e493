"""An agent that needs a person's approval: it plans a refund with a model, asks an approval
tool (`POST …/approvals/refund`, which `--park 'POST /approvals*'` parks), then tells the
model the decision and prints a final line.

Its progress is in forkpoint's agent helper, so a woken run goes on from where it parked.
It prints `pid=N` on stderr as it starts (tests check the process is gone while parked).
"""

import json
import os
import sys

import httpx
import openai

from forkpoint.adapters.agent import attach

AMOUNT = int(os.environ.get("AMOUNT", "250"))
APPROVALS = int(os.environ.get("APPROVALS", "1"))  # how many approvals it asks for, in turn
TOOL = os.environ.get("TOOL", "/approvals/refund")  # `/slow/...`: a tool that takes its time
STEPS = int(os.environ.get("STEPS", "1"))  # model calls before the approval
STATE_KB = int(os.environ.get("STATE_KB", "0"))  # ballast in its state


def main() -> None:
    print(f"pid={os.getpid()}", file=sys.stderr, flush=True)
    ballast = "x" * (STATE_KB * 1024)
    state = attach(default={"phase": "plan", "plan": None, "approvals": [], "ballast": ballast})
    client = openai.OpenAI(max_retries=0)
    plans = 0
    while state["phase"] == "plan":
        ask = f"refund {AMOUNT} for order 7" + (f", step {plans}" if plans else "")
        plan = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": ask}]
        )
        plans += 1
        state["plan"] = plan.choices[0].message.content
        if plans >= STEPS:
            state["phase"] = "approve"
    base = f"{os.environ['FORKPOINT_URL']}/r/{os.environ['FORKPOINT_RUN']}"
    while state["phase"] == "approve" and len(state["approvals"]) < APPROVALS:
        asked = httpx.post(
            f"{base}{TOOL}",
            json={"amount": AMOUNT, "plan": state["plan"], "turn": len(state["approvals"])},
            timeout=None,
        )
        state["approvals"].append({"status": asked.status_code, "body": asked.json()})
    state["phase"] = "finish"
    final = client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": f"approvals {json.dumps(state['approvals'])}"}],
    )
    print(f"final: {final.choices[0].message.content}", flush=True)


main()
