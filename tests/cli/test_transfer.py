"""`forkpoint export` and `forkpoint import` as a user runs them, and a production run turned
into a pytest cassette in one command."""

from __future__ import annotations

import json

import pytest

from forkpoint.testing.upstream import ScriptedUpstream
from tests.runner import forkpoint

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
    runs = json.loads(forkpoint("runs", "--json", cassette=cassette).stdout)
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
