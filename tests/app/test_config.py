"""Settings: TOML file, env overrides, ${VAR} expansion, errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import ConfigError, load_settings
from providers.registry import network_transport
from providers.transports import SSETransport


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("AGENT_GATEWAY_"):
            monkeypatch.delenv(name)


def test_defaults_without_a_file() -> None:
    settings = load_settings()
    assert settings.gateway.backend == "memory"
    assert settings.gateway.heartbeat_seconds == 15
    assert settings.gateway.event_log_max_len == 10000
    assert settings.limits.max_ws_frame_bytes == 1048576
    assert settings.auth.mode == "none"
    assert {name: p.kind for name, p in settings.providers.items()} == {"demo": "local-demo"}


def test_file_env_overrides_and_secret_expansion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(
        '[gateway]\nmultitask = "enqueue"\ndefault_provider = "claude"\n'
        '[providers.claude]\nkind = "anthropic-messages"\nurl = "http://x/v1/messages"\n'
        'headers = { "x-api-key" = "${TEST_KEY}" }\nparams = { temperature = 0.2 }\n'
    )
    monkeypatch.setenv("TEST_KEY", "sk-123")
    monkeypatch.setenv("AGENT_GATEWAY_CONFIG", str(config))
    monkeypatch.setenv("AGENT_GATEWAY_GATEWAY__HEARTBEAT_SECONDS", "3")
    monkeypatch.setenv("AGENT_GATEWAY_PROVIDERS__CLAUDE__MODEL", "m-1")
    settings = load_settings()
    assert settings.gateway.multitask == "enqueue"
    assert settings.gateway.heartbeat_seconds == 3
    claude = settings.providers["claude"]
    assert claude.headers == {"x-api-key": "sk-123"}
    assert claude.model == "m-1" and claude.params == {"temperature": 0.2}
    assert "demo" in settings.providers


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[gateway]\nbackend = "mongo"\n', "gateway.backend"),
        ("[gateway]\nheartbeat_seconds = -1\n", "gateway.heartbeat_seconds"),
        ("[gateway]\nunknown_key = 1\n", "gateway.unknown_key"),
        ('[gateway]\ndefault_provider = "ghost"\n', "gateway.default_provider"),
        ('[providers.x]\nkind = "nope"\n', "providers.x.kind"),
        (
            '[providers.x]\nkind = "openai-chat"\nheaders = { A = "${NOT_SET_VAR_123}" }\n',
            "providers.x.headers",
        ),
        ("[limits]\nmax_input_bytes = 0\n", "limits.max_input_bytes"),
        (
            '[providers.x]\nkind = "openai-chat"\nmax_connections = 0\n',
            "providers.x.max_connections",
        ),
        ("[nonsense]\na = 1\n", "nonsense"),
        ("not toml [", "invalid TOML"),
    ],
)
def test_invalid_config_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_settings(config)
    assert key in str(error.value)


def test_invalid_env_override_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_GATEWAY_GATEWAY__MULTITASK", "sometimes")
    with pytest.raises(ConfigError, match=r"gateway\.multitask"):
        load_settings()


def test_env_override_of_the_builtin_demo_merges_onto_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from providers.local_demo import LocalDemoProvider
    from providers.registry import create_provider

    monkeypatch.setenv("AGENT_GATEWAY_PROVIDERS__DEMO__PACE", "0")
    demo = load_settings().providers["demo"]
    assert demo.kind == "local-demo"
    provider = create_provider("demo", demo.kind, demo.to_provider_config())
    assert isinstance(provider, LocalDemoProvider) and provider.delay == 0


def test_env_override_of_a_demo_from_the_file_keeps_its_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[providers.demo]\nkind = "fixture"\npath = "a.jsonl"\n')
    monkeypatch.setenv("AGENT_GATEWAY_CONFIG", str(config))
    monkeypatch.setenv("AGENT_GATEWAY_PROVIDERS__DEMO__PATH", "b.jsonl")
    demo = load_settings().providers["demo"]
    assert (demo.kind, demo.path) == ("fixture", "b.jsonl")


def test_provider_max_connections_reaches_the_transport(tmp_path: Path) -> None:
    config = tmp_path / "pool.toml"
    config.write_text(
        '[providers.p]\nkind = "openai-chat"\nurl = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
        "max_connections = 7\n"
    )
    provider_config = load_settings(config).providers["p"].to_provider_config()
    transport = network_transport(provider_config)
    assert isinstance(transport, SSETransport)
    assert transport.max_connections == 7
