"""docs/park-kubernetes.md's example, run locally: the support agent parks on its refund's
approval (`record --on-wake`, PostgreSQL), `serve --on-wake` runs the documented hook
(examples/kubernetes/wake_job.py) when the answer comes to its endpoint, and the hook's
`kubectl apply` is a stand-in on PATH that starts the Job's pod as a local process: the
container's command and args, its env, and the Secret's keys as its envFrom would give them.
The agent wakes in it and finishes exactly once; no secret is in the manifest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

from examples.support_agent.script import support_script
from examples.support_agent.tools_service import APPROVALS, REFUNDS
from forkpoint.models import Origin, RunStatus
from forkpoint.testing.upstream import ScriptedUpstream
from tests.examples.test_support_agent import RunningTools
from tests.park.conftest import (
    API_KEY,
    exchanges_of,
    forkpoint,
    kill,
    status_of,
    wait_for,
)
from tests.runner import ROOT, command_env

EXAMPLE = ROOT / "examples" / "kubernetes"
DOC = ROOT / "docs" / "park-kubernetes.md"
TICKET = "My headphones (order A1005) hum constantly. I want a refund."
PARK = ("--park", "POST /tools/approvals*")
IMAGE = "registry.example.com/support-agent:1"

STANDIN = '''#!{python}
"""A stand-in for `kubectl apply -f -`: the Job's pod started as a local process."""
import json, os, subprocess, sys
from pathlib import Path
import yaml
HERE = Path({here!r})
assert sys.argv[1:] == ["apply", "-f", "-"], sys.argv
manifest = sys.stdin.read()
job = yaml.safe_load(manifest)
name = job["metadata"]["name"]
(HERE / "jobs" / (name + ".yaml")).write_text(manifest)
container = job["spec"]["template"]["spec"]["containers"][0]
env = {{"PATH": {pod_path!r}, "PYTHONPATH": {root!r}, "HOME": os.environ.get("HOME", "/")}}
for source in container.get("envFrom", []):
    secret = HERE / "secrets" / (source["secretRef"]["name"] + ".json")
    env.update(json.loads(secret.read_text()))
env.update({{each["name"]: each["value"] for each in container.get("env", [])}})
with open(HERE / "jobs" / (name + ".log"), "w") as log:
    subprocess.Popen(container["command"] + container["args"], cwd=container["workingDir"],
                     env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
print("job.batch/" + name + " created")
'''


def standin(tmp_path: Path, store: str) -> Path:
    """A bin directory whose `kubectl` is the stand-in, and the Secret it reads."""
    bin_dir = tmp_path / "bin"
    for made in (bin_dir, tmp_path / "jobs", tmp_path / "secrets"):
        made.mkdir()
    pod_path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(STANDIN.format(python=sys.executable, here=str(tmp_path),
                                      pod_path=pod_path, root=str(ROOT)))  # fmt: skip
    kubectl.chmod(0o755)
    secret = {"FORKPOINT_STORE": store, "OPENAI_API_KEY": API_KEY}
    (tmp_path / "secrets" / "forkpoint-agent.json").write_text(json.dumps(secret))
    return bin_dir


def serve_logged(
    store: str, upstream: str, log: Path, *args: str
) -> tuple[subprocess.Popen[str], str]:
    """`serve` as conftest's `start_serve` starts it, its stderr kept in `log`."""
    with log.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "forkpoint", "serve", "--port", "0", "--upstream", upstream,
             "--store", store, *args],
            stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True,
            env=command_env(None, {"OPENAI_API_KEY": API_KEY}, clean=True),
        )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("forkpoint serving on "), log.read_text()
    return process, line.split()[3]


def test_the_documented_hook_wakes_the_agent_as_a_job_exactly_once(
    start_upstream, postgres_url, tmp_path
):  # type: ignore[no-untyped-def]
    llm = start_upstream(ScriptedUpstream(support_script))
    tools = RunningTools()
    bin_dir = standin(tmp_path, postgres_url)
    try:
        # the agent's first Job: record, parked on its approval, to be woken by the hook
        hook = f"{sys.executable} {EXAMPLE / 'wake_job.py'} --image {IMAGE} --env SUPPORT_MODEL"
        first = forkpoint(
            tmp_path / "unused.db", "record", "--store", postgres_url, *PARK, "--on-wake", hook,
            "--upstream", llm.url, "--route", f"tools={tools.url}", "--",
            sys.executable, "examples/support_agent/agent.py", TICKET,
            env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "SUPPORT_MODEL": "gpt-4o-mini"},
        )  # fmt: skip
        assert first.returncode == 75, first.stderr
        run_id = first.run_id
        assert llm.request_count == 3 and tools.app[APPROVALS] == []
        serve, url = serve_logged(postgres_url, llm.url, tmp_path / "serve.log", "--on-wake", hook)
        try:
            answered = httpx.post(f"{url}/_forkpoint/runs/{run_id}/answer",
                                  json={"approved": True, "by": "alice"}, timeout=30)  # fmt: skip
            assert answered.status_code == 200, answered.text
            try:
                wait_for(lambda: status_of(postgres_url, run_id) is RunStatus.FINISHED, 120)
            except AssertionError:
                raise AssertionError((tmp_path / "serve.log").read_text()[-3000:]) from None
        finally:
            kill(serve)
    finally:
        tools.stop()

    [manifest] = (tmp_path / "jobs").glob("*.yaml")
    job = yaml.safe_load(manifest.read_text())
    label = run_id.lower()
    assert job["kind"] == "Job" and job["metadata"]["labels"]["forkpoint/run"] == label
    assert job["metadata"]["name"].startswith(f"forkpoint-wake-{label}-")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE and container["workingDir"] == str(ROOT)
    assert container["args"][:2] == ["resume", run_id]
    assert container["args"][-4:] == ["--", sys.executable, "examples/support_agent/agent.py",
                                      TICKET]  # fmt: skip
    assert " ".join(container["args"]).count("--park POST /tools/approvals*") == 1
    assert container["env"] == [{"name": "SUPPORT_MODEL", "value": "gpt-4o-mini"}]
    assert container["envFrom"] == [{"secretRef": {"name": "forkpoint-agent"}}]
    text = manifest.read_text()
    assert API_KEY not in text and postgres_url not in text  # the Secret holds them
    pod_log = manifest.with_suffix(".log").read_text()
    assert (
        pod_log.count("Refund of $199.99 issued for order A1005 (RF-7001, approved by alice).") == 1
    )
    # woken once: one refund, one approval answered, the model asked once after the answer
    assert [r["amount"] for r in tools.app[REFUNDS]] == [199.99] and tools.app[APPROVALS] == []
    assert llm.request_count == 4
    origins = [e.origin for e in exchanges_of(postgres_url, run_id)]
    assert origins == [Origin.LIVE] * 5 + [Origin.ANSWERED, Origin.LIVE, Origin.LIVE]


def test_the_document_shows_the_hook_and_the_template_as_they_are():
    doc = DOC.read_text()
    for name in ("wake_job.py", "wake-job.yaml"):
        assert (EXAMPLE / name).read_text() in doc, name
    assert "docs/park-kubernetes.md" in (ROOT / "README.md").read_text()
