"""The project file a team sets its matching in once: forkpoint.toml or [tool.forkpoint]."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.api import Options
from forkpoint.api.config import find_project_config
from forkpoint.api.options import match_config
from forkpoint.engine.normalizers import Replace
from forkpoint.engine.optional import DEFAULT_OPTIONAL
from forkpoint.errors import ConfigError


def test_forkpoint_toml_in_a_parent_directory_is_found(tmp_path: Path):
    (tmp_path / "forkpoint.toml").write_text(
        'ignore = ["$.metadata.request_id"]\nnormalize = ["trace=\\\\w+"]\n'
        'optional = ["POST /telemetry.example.com/*"]\n'
    )
    inner = tmp_path / "agents" / "support"
    inner.mkdir(parents=True)
    found = find_project_config(inner)
    assert found.source == tmp_path / "forkpoint.toml"
    assert (found.ignore, found.normalize, found.optional) == (
        ("$.metadata.request_id",), (r"trace=\w+",), ("POST /telemetry.example.com/*",),
    )  # fmt: skip


def test_a_pyproject_table_is_read_and_forkpoint_toml_wins(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname="x"\n[tool.forkpoint]\nignore = "user"\n')
    assert find_project_config(tmp_path).ignore == ("user",)
    (tmp_path / "forkpoint.toml").write_text('ignore = ["other"]\n')
    assert find_project_config(tmp_path).ignore == ("other",)


def test_a_pyproject_without_the_table_is_passed_over(tmp_path: Path):
    (tmp_path / "forkpoint.toml").write_text('optional = ["/x/*"]\n')
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "pyproject.toml").write_text('[project]\nname="app"\n')
    assert find_project_config(tmp_path / "app").optional == ("/x/*",)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('ignored = ["x"]\n', "unknown keys \\['ignored'\\]"),
        ("ignore = [1]\n", "ignore must be a list of strings"),
        ("ignore = [\n", "not valid TOML"),
    ],
)
def test_a_bad_project_file_is_a_clear_error(tmp_path: Path, text: str, error: str):
    (tmp_path / "forkpoint.toml").write_text(text)
    with pytest.raises(ConfigError, match=error):
        find_project_config(tmp_path)


def test_the_project_comes_first_and_options_add_to_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "forkpoint.toml").write_text(
        'ignore = ["a"]\nnormalize = ["x+", "tests.api.test_config:drop_user"]\noptional = ["/o/*"]\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2]))
    match = match_config(Options(ignore=["b"], normalize=["y+"], optional=["/p/*"]))
    assert match.volatile_fields == ("prompt_cache_key", "a", "b")
    assert match.normalizers[0] == Replace("x+") and match.normalizers[1] is drop_user
    assert match.normalizers[2] == Replace("y+")
    assert match.optional_routes == (*DEFAULT_OPTIONAL, "/o/*", "/p/*")
    assert match_config(Options(project_config=False)).volatile_fields == ("prompt_cache_key",)


def drop_user(method: str, route: str, body: object) -> object:
    return {k: v for k, v in body.items() if k != "user"} if isinstance(body, dict) else body


def test_a_file_is_parsed_once_while_it_stays_the_same_and_again_once_edited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # a pytest session asks for the project's settings once a test: a 6 kB pyproject.toml
    # took 0.7 ms to parse each time
    import tomllib

    parsed: list[str] = []
    real = tomllib.loads
    monkeypatch.setattr(tomllib, "loads", lambda text: parsed.append(text) or real(text))
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.forkpoint]\nignore = ["user"]\n')
    assert [find_project_config(tmp_path).ignore for _ in range(3)] == [("user",)] * 3
    assert len(parsed) == 1
    pyproject.write_text('[tool.forkpoint]\nignore = ["else"]\n')  # same size, same second
    assert find_project_config(tmp_path).ignore == ("else",) and len(parsed) == 2
