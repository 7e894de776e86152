"""``[mcp]``: servers with ${ENV} headers (never shown), policies, and which providers may list
them (the model-API kinds only, and only configured servers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import ConfigError, load_settings
from app.mcp_config import mcp_settings
from app.runs.catalog import ProviderCatalog
from providers.model_calls import ModelApiProvider

SERVERS = """
[mcp]
max_parallel = 2

[mcp.servers.github]
url = "https://mcp.example/github"
headers = { Authorization = "Bearer ${MCP_TEST_TOKEN}" }
timeout_seconds = 5
deny = ["delete_repo"]
approval = { create_issue = "always", search = "never" }
editable = true
approval_expires_seconds = 120

[mcp.servers.search]
url = "http://127.0.0.1:9/mcp"
allow = ["search"]
approval = "never"
"""


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_TEST_TOKEN", "s3cret-value")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gw.toml"
    path.write_text(text)
    return path


def test_servers_policies_and_provider_wiring(tmp_path: Path) -> None:
    config = SERVERS + (
        '[providers.chat]\nkind = "openai-chat"\nurl = "http://x/v1/chat/completions"\n'
        'mcp_servers = ["github", "search"]\n'
    )
    settings = load_settings(write(tmp_path, config))
    assert settings.mcp.max_parallel == 2
    mcp = mcp_settings(settings.mcp, settings.providers["chat"].mcp_servers)
    assert mcp is not None and mcp.max_parallel == 2
    github, search = mcp.servers["github"], mcp.servers["search"]
    assert github.headers == {"Authorization": "Bearer s3cret-value"}
    assert "s3cret-value" not in repr(github) and "s3cret-value" not in repr(settings)
    assert github.needs_approval("create_issue") and not github.needs_approval("search")
    assert github.needs_approval("unlisted")  # a tool the table omits: "always"
    assert github.exposes("create_issue") and not github.exposes("delete_repo")
    assert github.editable and github.approval_expires_seconds == 120
    assert search.exposes("search") and not search.exposes("other")
    assert not search.needs_approval("search") and not search.editable
    provider = ProviderCatalog(settings).get("chat")
    assert isinstance(provider, ModelApiProvider) and provider.mcp is not None
    assert set(provider.mcp.settings.servers) == {"github", "search"}


def test_defaults(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, '[mcp.servers.a]\nurl = "http://h/mcp"\n'))
    server = settings.mcp.servers["a"].to_server("a")
    assert settings.mcp.max_parallel == 4
    assert server.approval == "always" and server.editable is False
    assert server.approval_expires_seconds is None and server.allow is None


@pytest.mark.parametrize("kind", ["ag-ui", "agent-event", "local-demo", "fixture"])
def test_mcp_servers_refused_on_other_kinds(tmp_path: Path, kind: str) -> None:
    config = SERVERS + f'[providers.other]\nkind = "{kind}"\nurl = "http://x/"\n'
    config += 'mcp_servers = ["search"]\n'
    with pytest.raises(ConfigError, match=rf"providers.other.mcp_servers: not supported.*{kind}"):
        load_settings(write(tmp_path, config))


def test_unknown_server_named(tmp_path: Path) -> None:
    config = SERVERS + '[providers.chat]\nkind = "anthropic-messages"\nurl = "http://x/"\n'
    config += 'mcp_servers = ["nope"]\n'
    with pytest.raises(ConfigError, match=r"'nope' is not in \[mcp.servers\]"):
        load_settings(write(tmp_path, config))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[mcp.servers.a_b]\nurl = "http://h/"\n', "no '_'"),
        ('[mcp.servers.a]\nurl = "ftp://h/"\n', "http:// or https://"),
        ('[mcp.servers.a]\nurl = "http://h/"\napproval = "sometimes"\n', "approval"),
        ('[mcp.servers.a]\nurl = "http://h/"\nsurprise = 1\n', "surprise"),
        ("[mcp]\nmax_parallel = 0\n", "max_parallel"),
    ],
)
def test_invalid_sections(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(write(tmp_path, table))


def test_missing_env_variable_names_it_not_a_value(tmp_path: Path) -> None:
    config = '[mcp.servers.a]\nurl = "http://h/"\nheaders = { X = "${MCP_TEST_UNSET_VAR}" }\n'
    with pytest.raises(ConfigError, match="MCP_TEST_UNSET_VAR is not set"):
        load_settings(write(tmp_path, config))
