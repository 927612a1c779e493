"""`forkpoint export` and `forkpoint import` as a user runs them, and a production run turned
into a pytest cassette in one command."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from forkpoint.cassettes.formats import jsonl
from forkpoint.models import Run
from forkpoint.testing.upstream import ScriptedUpstream
from tests.builders import exchange
from tests.runner import forkpoint, start_forkpoint

pytest_plugins = ["pytester"]


@pytest.fixture
def production_run(start_upstream, start_proxy):  # type: ignore[no-untyped-def]
    """A run as `forkpoint serve` records it, from an agent using the openai client."""
    import openai

    upstream = start_upstream(ScriptedUpstream())
    proxy = start_proxy(upstream.url)
    proxy.record(name="prod-1")
    with openai.OpenAI(
        base_url=f"{proxy.proxy.url}/v1", api_key="sk-prod", max_retries=0
    ) as client:
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "refund A1001"}]
        )
    proxy.close()
    upstream.stop()
    return "prod-1"


def test_export_then_import_with_every_format(production_run, cassette, tmp_path):
    for fmt in ("vcr", "jsonl", "har"):
        exported = forkpoint("export", production_run, "--format", fmt, cassette=cassette)
        assert exported.returncode == 0, exported.stderr
        path = tmp_path / f"prod.{fmt}"
        path.write_text(exported.stdout)
        imported = forkpoint("import", str(path), "--name", f"from-{fmt}", cassette=cassette)
        assert imported.returncode == 0, imported.stderr
        assert f"({'from-' + fmt}), 1 steps" in imported.stderr
    runs = [
        json.loads(line)
        for line in forkpoint("runs", "--json", cassette=cassette).stdout.splitlines()
    ]
    assert [r["name"] for r in runs] == ["prod-1", "from-vcr", "from-jsonl", "from-har"]
    assert all(r["steps"] == 1 for r in runs)


def test_errors_are_one_line_and_exit_code_2(production_run, cassette, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("interactions:\n  - request: [\n")
    result = forkpoint("import", str(broken), cassette=cassette)
    assert result.returncode == 2 and f"{broken}, line 3: not valid YAML" in result.stderr
    assert "Traceback" not in result.stderr
    result = forkpoint("export", "nope", cassette=cassette)
    assert result.returncode == 2 and "no run 'nope'" in result.stderr
    result = forkpoint("import", str(broken), "--route", "oops", cassette=cassette)
    assert result.returncode == 2 and "'oops' is not NAME=URL" in result.stderr


def test_a_production_run_becomes_a_regression_test(production_run, cassette, pytester):
    target = pytester.path / "cassettes" / "test_refund" / "test_refund.yaml"
    exported = forkpoint("export", production_run, "-o", str(target), cassette=cassette)
    assert exported.returncode == 0 and target.exists(), exported.stderr
    pytester.makepyfile(
        test_refund="""
        import openai

        def test_refund(forkpoint):
            with openai.OpenAI(max_retries=0) as client:
                answer = client.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "refund A1001"}])
            assert answer.choices[0].message.content == "[gpt-4o] refund A1001"
            assert forkpoint.run.steps[0].origin == "replayed"
        """
    )
    pytester.runpytest("-q").assert_outcomes(passed=1)


def test_a_json_file_that_is_no_har_says_which_format_was_tried(cassette, tmp_path):
    """Issue 27.9: it said `at top level: missing log`, naming no format."""
    config = tmp_path / "settings.json"
    config.write_text('{"model": "gpt-4o", "temperature": 0}\n')
    result = forkpoint("import", str(config), cassette=cassette)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert line == (
        f"forkpoint: {config}: not a HAR file: it has no `log` object (a HAR is "
        '{"log": {"entries": [...]}}); read as HAR (.har) by its content (a JSON object) '
        "(forkpoint also imports vcrpy YAML (.yaml), JSON lines (.jsonl): give --format)"
    )
    assert not cassette.exists()  # nothing made before the file was read


def test_an_import_killed_part_way_leaves_no_run(cassette, tmp_path):
    """One transaction: a kill -9 while it writes leaves no half-imported run (before, the run
    was committed first, its exchanges after)."""
    exchanges = [  # bodies that do not compress: the transaction outgrows SQLite's cache
        exchange(step=step, request_body=b'{"noise": "%s"}' % os.urandom(3000).hex().encode())
        for step in range(3000)
    ]
    path = tmp_path / "large.jsonl"
    path.write_text(jsonl.dumps(Run(id="01LARGE", name="large"), exchanges))
    assert forkpoint("import", str(_small(tmp_path)), cassette=cassette).returncode == 0
    importing = start_forkpoint("import", str(path), cassette=cassette)
    wal = Path(f"{cassette}-wal")
    deadline = time.monotonic() + 120
    while not (wal.exists() and wal.stat().st_size > 2**20):  # its writes under way
        assert importing.poll() is None and time.monotonic() < deadline, "it ended first"
        time.sleep(0.02)
    importing.kill()
    importing.communicate()
    listed = forkpoint("runs", "--json", cassette=cassette)
    runs = [json.loads(line) for line in listed.stdout.splitlines()]  # JSON lines
    assert [run["name"] for run in runs] == ["small"], listed.stderr


def _small(folder):  # type: ignore[no-untyped-def]
    path = folder / "small.jsonl"
    path.write_text(jsonl.dumps(Run(id="01SMALL", name="small"), [exchange()]))
    return path
