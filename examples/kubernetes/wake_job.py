#!/usr/bin/env python3
"""`forkpoint serve --on-wake` hook: wake a parked run as a Kubernetes Job.

serve runs it once a parked run is answered, as `wake_job.py [OPTIONS] RUN forkpoint resume RUN
... -- CMD...` (the run id and the exact resume command line; also in FORKPOINT_RUN and
FORKPOINT_RESUME), in the run's working directory, with the environment the agent was started
with (no secrets) plus the secrets its wake needs. It fills wake-job.yaml with the run and the
resume command and `kubectl apply`s it; the Job's pod runs the resume, which serves the run's
recorded steps from the store, restores the agent's snapshot and answers its pending request.

Secrets never go into the manifest: the pod takes them from a Secret (--secret). Of the launch's
variables only those named by --env are carried into the Job.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import string
import subprocess
import sys
from pathlib import Path

TEMPLATE = Path(__file__).with_name("wake-job.yaml")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True, help="the agent's image (forkpoint in it)")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--secret", default="forkpoint-agent", help="the Secret the pod reads")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME",
        help="a launch variable to carry into the Job (repeatable)",
    )
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--template", type=Path, default=TEMPLATE)
    parser.add_argument("run")
    parser.add_argument("line", nargs=argparse.REMAINDER, help="forkpoint resume RUN ... -- CMD")
    args = parser.parse_args(argv)
    if args.line[:3] != ["forkpoint", "resume", args.run]:
        parser.error(f"expected the resume command line of run {args.run}, got {args.line[:3]}")
    carried = [
        {"name": name, "value": os.environ[name]}
        for name in args.env
        if name in os.environ and not name.startswith("FORKPOINT_")
    ]
    label = re.sub(r"[^a-z0-9]+", "-", args.run.lower()).strip("-")[:40] or "run"
    manifest = string.Template(args.template.read_text()).substitute(
        name=f"forkpoint-wake-{label}-{secrets.token_hex(3)}",
        namespace=args.namespace,
        label=label,
        image=json.dumps(args.image),
        workdir=json.dumps(os.getcwd()),
        args=json.dumps(args.line[1:]),  # the resume line, without the word `forkpoint`
        env=json.dumps(carried),
        secret=args.secret,
    )
    applied = subprocess.run([args.kubectl, "apply", "-f", "-"], input=manifest, text=True)
    return applied.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
