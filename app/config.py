"""Gateway settings (http-api.md "Configuration"): a TOML file, env overrides, `${VAR}` secrets.

Sources, lowest to highest priority: defaults, the TOML file (`AGENT_GATEWAY_CONFIG` or
`--config`), environment variables `AGENT_GATEWAY_<SECTION>__<KEY>`. An invalid value fails at
start with a :class:`ConfigError` whose message names the key (``gateway.backend: ...``).
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from app.auth.tokens import load_tokens_file
from app.mcp_config import MCP_PROVIDER_KINDS, McpSection
from core.runs import RUN_TERMINAL_TYPE_LIST, RunTerminalType
from providers.transports import DEFAULT_MAX_CONNECTIONS

CONFIG_ENV_VAR = "AGENT_GATEWAY_CONFIG"
DEMO_PROVIDER = "demo"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

ProviderKind = Literal[
    "ag-ui",
    "openai-chat",
    "openai-responses",
    "anthropic-messages",
    "agent-event",
    "local-demo",
    "fixture",
]
Multitask = Literal["reject", "interrupt", "enqueue"]


class ConfigError(ValueError):
    """The configuration is invalid; the message names every offending key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GatewaySection(_Section):
    backend: Literal["memory", "redis"] = "memory"
    redis_url: str = "redis://127.0.0.1:6379/0"
    #: Redis connections per instance: one per conversation followed here by a blocking XREAD
    #: (not while this instance owns its run) plus the commands in flight.
    redis_max_connections: int = Field(2000, ge=10)
    #: ``redis_url`` is a seed node of a Redis Cluster (``RedisCluster.from_url``: auth and
    #: TLS as in the URL); ``redis_cluster_nodes`` ("host:port") adds more seeds.
    redis_cluster: bool = False
    redis_cluster_nodes: list[str] = Field(default_factory=list)
    #: On a cluster: each batched append of a run's owner waits (``WAIT``, bounded by
    #: ``redis_wait_timeout_ms``) for this many replicas of its shard to have it; 0: no wait.
    redis_wait_replicas: int = Field(0, ge=0)
    redis_wait_timeout_ms: int = Field(1000, ge=1)
    default_provider: str = DEMO_PROVIDER
    multitask: Multitask = "reject"
    enqueue_max: int = Field(8, ge=0)
    #: Run starts in progress at once per instance (accepted, ``run.started`` not yet logged);
    #: more wait their turn (see ``app/runs/start_slots.py``).
    max_concurrent_starts: int = Field(16, ge=1)
    #: Use the compat modules' fast paths (``app/compat/``, ``providers/compat/``), each only
    #: where its start-up check finds the dependency's internals it needs; False forces every
    #: public path.
    fast_paths: bool = True
    heartbeat_seconds: float = Field(15, gt=0)
    send_timeout_seconds: float = Field(30, gt=0)
    event_log_max_len: int = Field(10000, ge=1)
    snapshot_every: int = Field(200, ge=1)
    max_body_bytes: int = Field(1048576, ge=1)
    max_conversations: int = Field(100000, ge=1)
    conversation_ttl_seconds: float = Field(86400, gt=0)
    wait_timeout_seconds: float = Field(600, gt=0)
    shutdown_grace_seconds: float = Field(10, ge=0)
    demo_page: bool = True
    log_format: Literal["json", "text"] = "json"
    #: Where log lines go; the container image sets "stdout", its log stream.
    log_stream: Literal["stderr", "stdout"] = "stderr"
    log_content: bool = False
    lease_ttl_seconds: float = Field(10, gt=0)
    idempotency_ttl_seconds: float = Field(86400, gt=0)
    cors_origins: list[str] = Field(default_factory=list)

    @field_validator("redis_cluster_nodes")
    @classmethod
    def _host_ports(cls, nodes: list[str]) -> list[str]:
        from app.backends.redis.cluster import node_address

        for node in nodes:
            node_address(node)  # ValueError: not host:port
        return nodes

    @model_validator(mode="after")
    def _cluster_only(self) -> GatewaySection:
        if self.redis_cluster_nodes and not self.redis_cluster:
            raise ValueError("redis_cluster_nodes needs redis_cluster = true")
        if self.redis_wait_replicas and not self.redis_cluster:
            raise ValueError("redis_wait_replicas applies to a cluster (redis_cluster = true)")
        return self


class LimitsSection(_Section):
    max_input_bytes: int = Field(262144, ge=1)
    max_conversations_per_principal: int = Field(1000, ge=1)
    max_subscribers_per_conversation: int = Field(100, ge=1)
    max_subscribers_per_principal: int = Field(500, ge=1)
    runs_per_minute_per_principal: int = Field(60, ge=1)
    max_ws_frame_bytes: int = Field(1048576, ge=1)
    max_upstream_event_bytes: int = Field(4194304, ge=1)
    max_inline_artifact_bytes: int = Field(1048576, ge=1)


WebhookEvent = RunTerminalType


def _all_webhook_events() -> list[WebhookEvent]:
    return list(RUN_TERMINAL_TYPE_LIST)


class WebhooksSection(_Section):
    url: str = ""
    secret: str = "${WEBHOOK_SECRET}"
    events: list[WebhookEvent] = Field(default_factory=_all_webhook_events)
    #: Retries of an undelivered webhook stop this long after its run ended (counted failed).
    give_up_seconds: float = Field(3600, gt=0)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if url and not url.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL (or empty: off)")
        return url

    @model_validator(mode="after")
    def _expand_secret(self) -> WebhooksSection:
        if self.url:  # the secret is needed (and must resolve) only when webhooks are on
            self.secret = expand_env(self.secret)
        return self


class ArchiveSection(_Section):
    """Durable conversations in a database (http-api.md "Archive"); an empty url is off."""

    url: str = ""
    retention_days: float = Field(0, ge=0)
    #: How often the retention task looks for idle conversations.
    retention_interval_seconds: float = Field(3600, gt=0)
    #: The longest wait between two attempts of a failing archive write.
    retry_max_seconds: float = Field(30, gt=0)

    @field_validator("url")
    @classmethod
    def _database_url(cls, url: str) -> str:
        schemes = ("sqlite:///", "sqlite+aiosqlite:///", "postgresql://", "postgresql+asyncpg://")
        if url and not url.startswith(schemes):
            raise ValueError("must be sqlite:///PATH or postgresql://USER@HOST/DB (or empty: off)")
        return expand_env(url)


class TelemetrySection(_Section):
    """OpenTelemetry traces and GenAI metrics (``app/telemetry``); where they go and how they are
    sampled come from the standard ``OTEL_*`` environment variables."""

    enabled: bool = False
    #: Prompts, completions, tool arguments and results in spans (never credentials).
    capture_content: bool = False


class AuthSection(_Section):
    mode: Literal["none", "bearer"] = "none"
    tokens: dict[str, str] = Field(default_factory=dict)
    tokens_file: str | None = None
    services: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _load_tokens_file(self) -> AuthSection:
        if self.tokens_file:  # inline tokens win over the file's
            self.tokens = {**load_tokens_file(self.tokens_file), **self.tokens}
        return self


class ProviderConfig(BaseModel):
    """One `[providers.NAME]` table. Keys beyond the documented ones go to the provider kind."""

    model_config = ConfigDict(extra="allow")

    kind: ProviderKind
    url: str | None = None
    transport: Literal["sse", "websocket"] = "sse"
    model: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float = Field(60, gt=0)
    idle_timeout_seconds: float = Field(60, gt=0)
    #: Upstream connections the provider's pooled HTTP client keeps open at most (SSE transport).
    max_connections: int = Field(DEFAULT_MAX_CONNECTIONS, gt=0)
    params: dict[str, Any] = Field(default_factory=dict)
    path: str | None = None
    #: ``[mcp.servers]`` names whose tools the gateway runs (model-API kinds only).
    mcp_servers: list[str] = Field(default_factory=list)
    #: Send the run's ``traceparent`` upstream (``[telemetry] enabled``).
    propagate: bool = True

    @field_validator("headers")
    @classmethod
    def _expand_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        return {name: expand_env(value) for name, value in headers.items()}

    def to_provider_config(self) -> dict[str, Any]:
        """The plain mapping handed to ``providers.registry.create_provider``."""
        return self.model_dump(exclude_none=True, exclude={"propagate"})


def expand_env(value: str) -> str:
    """Replace every `${VAR}` with the environment's value; a missing variable is an error."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ValueError(f"environment variable {name} is not set")
        return os.environ[name]

    return _ENV_REF.sub(replace, value)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AGENT_GATEWAY_",
        env_nested_delimiter="__",
        extra="ignore",
        case_sensitive=False,
    )

    gateway: GatewaySection = Field(default_factory=GatewaySection)
    limits: LimitsSection = Field(default_factory=LimitsSection)
    webhooks: WebhooksSection = Field(default_factory=WebhooksSection)
    archive: ArchiveSection = Field(default_factory=ArchiveSection)
    auth: AuthSection = Field(default_factory=AuthSection)
    telemetry: TelemetrySection = Field(default_factory=TelemetrySection)
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    mcp: McpSection = Field(default_factory=McpSection)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file's values arrive as init kwargs; the environment overrides them.
        return (env_settings, init_settings)

    @model_validator(mode="before")
    @classmethod
    def _overrides_merge_onto_the_builtin_demo(cls, data: Any) -> Any:
        """``AGENT_GATEWAY_PROVIDERS__DEMO__PACE=0`` tunes the built-in demo: a ``demo`` table
        without a ``kind`` (from the environment or the file) merges onto ``local-demo``."""
        if isinstance(data, dict):
            providers = data.get("providers")
            if not isinstance(providers, dict):
                return data
            demo = providers.get(DEMO_PROVIDER)
            if isinstance(demo, dict) and "kind" not in demo:
                merged = {**providers, DEMO_PROVIDER: {"kind": "local-demo", **demo}}
                data = {**data, "providers": merged}
        return data

    @model_validator(mode="after")
    def _builtin_demo_and_default(self) -> Settings:
        if DEMO_PROVIDER not in self.providers:
            self.providers[DEMO_PROVIDER] = ProviderConfig(kind="local-demo")
        if self.gateway.default_provider not in self.providers:
            raise ValueError(
                f"gateway.default_provider: {self.gateway.default_provider!r} is not a "
                "configured provider"
            )
        for name, provider in self.providers.items():
            if provider.mcp_servers and provider.kind not in MCP_PROVIDER_KINDS:
                raise ValueError(
                    f"providers.{name}.mcp_servers: not supported on kind {provider.kind!r} "
                    f"(only {', '.join(MCP_PROVIDER_KINDS)}: their tool calls are the gateway's "
                    "to run)"
                )
            for server in provider.mcp_servers:
                if server not in self.mcp.servers:
                    raise ValueError(
                        f"providers.{name}.mcp_servers: {server!r} is not in [mcp.servers]"
                    )
        return self


def _format_validation_error(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        message = item["msg"]
        lines.append(f"{key}: {message}" if key else message)
    return "; ".join(lines)


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Build the settings from ``path`` (else `AGENT_GATEWAY_CONFIG`, else none) and the env."""
    source = path if path is not None else os.environ.get(CONFIG_ENV_VAR) or None
    data: dict[str, Any] = {}
    if source is not None:
        try:
            data = tomllib.loads(Path(source).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {source}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: invalid TOML: {exc}") from exc
        unknown = sorted(set(data) - set(Settings.model_fields))
        if unknown:
            raise ConfigError(f"{unknown[0]}: unknown section")
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc)) from exc
