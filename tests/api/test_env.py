"""The variables a command's clients are pointed at the proxy by, and the upstreams the user's
own settings of them name (issue 27.1: google-genai, ollama, cohere and Azure traffic
bypassed the proxy; a user's OLLAMA_HOST was lost)."""

from __future__ import annotations

import pytest

from forkpoint.api.env import agent_env, client_routes, ollama_host
from forkpoint.api.options import Options, engine_config

URL = "http://127.0.0.1:9999"


def test_every_known_clients_variable_points_at_a_route_of_the_proxy() -> None:
    env = agent_env(URL, "RUN", offline=False, base={})
    assert {k: v for k, v in env.items() if k != "FORKPOINT_RUN"} == {
        "OPENAI_BASE_URL": f"{URL}/v1",
        "OPENAI_API_BASE": f"{URL}/v1",
        "ANTHROPIC_BASE_URL": f"{URL}/anthropic",
        "GOOGLE_GEMINI_BASE_URL": f"{URL}/gemini",
        "OLLAMA_HOST": f"{URL}/ollama",
        "CO_API_URL": f"{URL}/cohere",
        "AZURE_OPENAI_ENDPOINT": f"{URL}/azure",
        "GROQ_BASE_URL": f"{URL}/groq",
        "CEREBRAS_BASE_URL": f"{URL}/cerebras",
        "FORKPOINT_URL": URL,
    }


def test_a_recording_goes_to_each_provider_by_its_route() -> None:
    routes = engine_config(Options(), live=True, env={"HOME": "/x"}).routes
    assert routes.resolve("/v1/chat/completions") == "https://api.openai.com/v1/chat/completions"
    assert routes.resolve("/gemini/v1beta/models/m:generateContent") == (
        "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent"
    )
    assert routes.resolve("/ollama/api/chat") == "http://127.0.0.1:11434/api/chat"
    assert routes.resolve("/cohere/v2/chat") == "https://api.cohere.com/v2/chat"
    assert routes.resolve("/groq/openai/v1/chat/completions") == (
        "https://api.groq.com/openai/v1/chat/completions"
    )
    # Azure's resource is the user's alone: never the default upstream, with its api-key
    assert routes.resolve("/azure/openai/deployments/d/chat/completions") is None


@pytest.mark.parametrize(
    ("variable", "value", "route", "upstream"),
    [
        ("OLLAMA_HOST", "gpu-box", "/ollama/api/chat", "http://gpu-box:11434/api/chat"),
        ("OLLAMA_HOST", "0.0.0.0:8080", "/ollama/api/chat", "http://0.0.0.0:8080/api/chat"),
        ("OLLAMA_HOST", "https://ollama.example/base/", "/ollama/api/chat",
         "https://ollama.example:443/base/api/chat"),
        ("AZURE_OPENAI_ENDPOINT", "https://res.openai.azure.com/", "/azure/openai/deployments/d/chat/completions",
         "https://res.openai.azure.com/openai/deployments/d/chat/completions"),
        ("GOOGLE_GEMINI_BASE_URL", "http://10.0.0.5:8000", "/gemini/v1/models/m:generateContent",
         "http://10.0.0.5:8000/v1/models/m:generateContent"),
        ("CO_API_URL", "https://cohere.internal", "/cohere/v2/chat", "https://cohere.internal/v2/chat"),
        ("OPENAI_BASE_URL", "http://localhost:8000/v1", "/v1/chat/completions",
         "http://localhost:8000/v1/chat/completions"),
        ("OPENAI_API_BASE", "https://openrouter.ai/api/v1", "/v1/chat/completions",
         "https://openrouter.ai/api/v1/chat/completions"),
    ],
)  # fmt: skip
def test_a_variable_the_user_had_set_becomes_the_upstream_of_its_route(
    variable: str, value: str, route: str, upstream: str
) -> None:
    base = {variable: value}
    env = agent_env(URL, "RUN", offline=False, base=base)
    assert env[variable].startswith(URL)  # the client now talks to the proxy …
    assert (
        engine_config(Options(), live=True, env=base).routes.resolve(route) == upstream
    )  # … and on


def test_an_openai_base_url_without_v1_keeps_its_own_shape() -> None:
    """A server at its root (`…/chat/completions`): the client is given the proxy's root, so
    the path it adds reaches the server as it would have."""
    base = {"OPENAI_BASE_URL": "http://localhost:8000/openai"}
    assert agent_env(URL, "R", offline=False, base=base)["OPENAI_BASE_URL"] == URL
    routes = engine_config(Options(), live=True, env=base).routes
    assert routes.resolve("/chat/completions") == "http://localhost:8000/openai/chat/completions"


def test_options_routes_and_the_recorded_run_come_before_the_users_variables() -> None:
    base = {"OLLAMA_HOST": "gpu-box"}
    given = engine_config(Options(routes={"ollama": "http://other:1"}), live=True, env=base)
    assert given.routes.resolve("/ollama/api/chat") == "http://other:1/api/chat"
    assert client_routes({}).prefixes == {} and client_routes({}).default is None


def test_offline_a_placeholder_key_for_each_sdk_that_insists_unless_one_is_set() -> None:
    env = agent_env(URL, "R", offline=True, base={"GOOGLE_API_KEY": "mine", "COHERE_API_KEY": "c"})
    assert env["OPENAI_API_KEY"] == env["ANTHROPIC_API_KEY"] == "forkpoint-replay"
    assert "GEMINI_API_KEY" not in env and "CO_API_KEY" not in env  # the user's own is used
    assert env["AZURE_OPENAI_API_KEY"] == env["GROQ_API_KEY"] == "forkpoint-replay"
    assert "GEMINI_API_KEY" not in agent_env(URL, "R", offline=False, base={})


def test_ollama_host_is_read_as_the_ollama_client_reads_it() -> None:
    assert ollama_host("") == "http://127.0.0.1:11434"
    assert ollama_host(":5678") == "http://127.0.0.1:5678"
    assert ollama_host("http://box") == "http://box:80"
    assert ollama_host("[::1]:7") == "http://[::1]:7"
    assert ollama_host("box:notaport") == "http://box:11434"


def test_a_variable_naming_the_proxy_itself_is_not_followed() -> None:
    """Left from `serve --port 8765`: following it, the proxy would send requests to itself.
    And `serve` runs no command: its own environment names nothing."""
    base = {"OPENAI_BASE_URL": "http://localhost:8765/v1", "OLLAMA_HOST": "127.0.0.1:8765"}
    routes = engine_config(Options(port=8765), live=True, env=base).routes
    assert routes.resolve("/v1/chat/completions") == "https://api.openai.com/v1/chat/completions"
    assert routes.resolve("/ollama/api/chat") == "http://127.0.0.1:11434/api/chat"
    elsewhere = engine_config(Options(port=9000), live=True, env=base).routes
    assert elsewhere.resolve("/ollama/api/chat") == "http://127.0.0.1:8765/api/chat"
    served = engine_config(Options(), live=True).routes  # serve: no command, no environment
    assert served.resolve("/ollama/api/chat") == "http://127.0.0.1:11434/api/chat"
