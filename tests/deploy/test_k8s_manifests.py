"""The Kubernetes manifests of deploy/k8s, checked without a cluster (none is available here).

Every manifest is validated with ``kubernetes-validate`` (its JSON schemas ship in the package)
against pinned Kubernetes versions, strictly: an unknown or misspelled field fails. Then what a
schema cannot know is checked against the gateway itself: the probes' paths are routes of the
app and their port is the one ``serve`` listens on, the environment names real settings and the
ConfigMap's config loads with it, the Secret keys exist, the selectors select the gateway's pods
(and never the migrate Job's), the termination grace covers the preStop pause plus the drain,
and the migrate Job's command is a real CLI command that migrates a database. Last, the
Deployment's command, environment and config run for real (on a Redis of the test's own), the
probes answer as Kubernetes expects, and SIGTERM ends the process within the grace period.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import kubernetes_validate
import orjson
import pytest
import yaml  # type: ignore[import-untyped]

from app.config import Settings, load_settings
from app.factory import create_app
from app.gateway import SOCKET_CLOSE_SECONDS
from tests.app.support.redis_support import private_redis
from tests.deploy.container_support import dockerfile_instructions
from tests.support import eventually_async, free_port

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
#: The oldest Kubernetes the manifests are for (the preStop ``sleep`` action is on by default
#: from 1.30) and a recent one; both schema sets ship in the kubernetes-validate package.
KUBERNETES_VERSIONS = ("1.30.0", "1.34.0")
#: Applied on their own, not by ``kubectl apply -k`` (README "Kubernetes").
APPLIED_ALONE = {"secret.example.yaml", "migrate-job.yaml"}
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


# --- reading the manifests ----------------------------------------------------------------


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def resource(kind: str) -> dict[str, Any]:
    found = [doc for path in manifest_files() for doc in documents(path) if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} in deploy/k8s, found {len(found)}"
    return found[0]


def pod_spec(kind: str) -> dict[str, Any]:
    spec: dict[str, Any] = resource(kind)["spec"]["template"]["spec"]
    return spec


def container(kind: str) -> dict[str, Any]:
    containers = pod_spec(kind)["containers"]
    assert len(containers) == 1
    found: dict[str, Any] = containers[0]
    return found


def secret_data() -> dict[str, str]:
    secret = resource("Secret")
    data = dict(secret.get("stringData") or {})
    for key, value in (secret.get("data") or {}).items():
        data[key] = base64.b64decode(value).decode()
    return data


def config_toml() -> str:
    text: str = resource("ConfigMap")["data"]["config.toml"]
    return text


def resolved_env(kind: str) -> dict[str, str]:
    """The container's environment as the kubelet would set it from the example Secret."""
    secret_name = resource("Secret")["metadata"]["name"]
    configmap = resource("ConfigMap")
    env: dict[str, str] = {}
    for item in container(kind).get("env", []):
        name = item["name"]
        if "value" in item:
            env[name] = item["value"]
            continue
        source = item["valueFrom"]
        if "secretKeyRef" in source:
            ref, data, owner = source["secretKeyRef"], secret_data(), secret_name
        else:
            ref, data = source["configMapKeyRef"], configmap["data"]
            owner = configmap["metadata"]["name"]
        assert ref["name"] == owner, f"{kind} {name}: refers to {ref['name']}, not {owner}"
        assert ref["key"] in data, f"{kind} {name}: key {ref['key']!r} is not in {owner}"
        env[name] = data[ref["key"]]
    return env


def container_argv(kind: str) -> list[str]:
    """What the container runs: its ``command`` or the image's ENTRYPOINT, then its ``args``."""
    spec = container(kind)
    entrypoint = orjson.loads(next(r for w, r in dockerfile_instructions() if w == "ENTRYPOINT"))
    argv: list[str] = [*spec.get("command", entrypoint), *spec.get("args", [])]
    assert argv[0] == "agent-gateway", argv
    return argv


def cli() -> str:
    return str(Path(sys.executable).with_name("agent-gateway"))


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    match = selector.get("matchLabels", selector)
    assert match, "an empty selector selects everything"
    return all(labels.get(key) == value for key, value in match.items())


def settings_env_name(name: str) -> bool:
    """``AGENT_GATEWAY_<SECTION>__<KEY>`` (or ``PROVIDERS__<NAME>__<KEY>``) names a setting."""
    parts = name.removeprefix("AGENT_GATEWAY_").lower().split("__")
    field = Settings.model_fields.get(parts[0])
    if field is None or field.annotation is None or len(parts) < 2:
        return False
    if parts[0] == "providers":
        return len(parts) == 3  # any key: extra keys go to the provider kind
    return len(parts) == 2 and parts[1] in getattr(field.annotation, "model_fields", {})


@pytest.fixture
def deployment_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[tuple[Settings, dict[str, str]]]:
    """The settings a gateway pod loads: the ConfigMap's config.toml and the Deployment's env."""
    for name in list(os.environ):
        if name.startswith("AGENT_GATEWAY_"):
            monkeypatch.delenv(name)
    env = resolved_env("Deployment")
    config = tmp_path / "config.toml"
    config.write_text(config_toml())
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AGENT_GATEWAY_CONFIG", str(config))
    yield load_settings(), env


# --- schema validation ----------------------------------------------------------------------


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Validation reads the schemas shipped in the package: any connection attempt fails."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("kubernetes-validate tried to open a connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.usefixtures("no_network")
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: p.name)
def test_manifest_validates_strictly_against_the_kubernetes_schema(
    path: Path, version: str
) -> None:
    docs = documents(path)
    assert docs, f"{path.name} holds no resource"
    for doc in docs:
        try:
            checked = kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(part) for part in exc.path)
            pytest.fail(f"{path.name} {doc['kind']}: {where}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            pytest.fail(f"{path.name}: {exc.message}")
        assert checked == version.rsplit(".", 1)[0]  # that version's own schemas were used


@pytest.mark.usefixtures("no_network")
def test_the_validator_is_strict_about_unknown_fields() -> None:
    """The gate above can fail: a misspelled probe field, or a number where Kubernetes wants a
    string, is refused."""
    deployment = resource("Deployment")
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["httpGet"]["pth"] = probe["httpGet"].pop("path")
    with pytest.raises(kubernetes_validate.ValidationError, match="'pth' was unexpected"):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)
    deployment = resource("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = 10
    with pytest.raises(kubernetes_validate.ValidationError, match="is not of type"):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


def test_kustomization_applies_every_manifest_but_the_secret_example_and_the_job() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    assert set(listed) == {p.name for p in manifest_files()} - APPLIED_ALONE
    assert APPLIED_ALONE <= {p.name for p in manifest_files()}


# --- the gateway behind the manifests --------------------------------------------------------


def test_probes_use_routes_and_the_port_the_gateway_serves() -> None:
    spec = container("Deployment")
    argv = container_argv("Deployment")
    port = int(argv[argv.index("--port") + 1])
    assert argv[1] == "serve" and argv[argv.index("--host") + 1] == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in spec["ports"]}
    assert ports["http"] == port
    assert ("EXPOSE", str(port)) in dockerfile_instructions()
    paths = create_app(Settings()).openapi()["paths"]  # the app's routes, as it declares them
    probes = {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for name, path in probes.items():
        get = spec[name]["httpGet"]
        assert get["path"] == path, f"{name} probes {get['path']}"
        assert "get" in paths.get(get["path"], {}), f"{name}: the app serves no GET {get['path']}"
        target = get["port"]
        assert (ports[target] if isinstance(target, str) else target) == port, name
        assert get.get("scheme", "HTTP") == "HTTP", name


def test_service_and_pdb_select_the_gateway_pods_and_not_the_migrate_job() -> None:
    deployment, service = resource("Deployment"), resource("Service")
    pdb = resource("PodDisruptionBudget")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    job_labels = resource("Job")["spec"]["template"]["metadata"]["labels"]
    assert selects(deployment["spec"]["selector"], labels)
    for name, selector in (
        ("Service", service["spec"]["selector"]),
        ("PodDisruptionBudget", pdb["spec"]["selector"]),
        *(
            ("topologySpreadConstraints", c["labelSelector"])
            for c in pod_spec("Deployment").get("topologySpreadConstraints", [])
        ),
    ):
        assert selects(selector, labels), f"the {name} does not select the Deployment's pods"
        assert not selects(selector, job_labels), f"the {name} selects the migrate Job's pod"
    port_names = {p["name"] for p in container("Deployment")["ports"]}
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in port_names, f"Service port {port['name']}: no such port"
    assert deployment["spec"]["replicas"] >= 2
    budget = pdb["spec"]
    assert budget.get("maxUnavailable", 1) < deployment["spec"]["replicas"]


def test_deployment_env_names_real_settings_and_the_config_loads_with_it(
    deployment_settings: tuple[Settings, dict[str, str]],
) -> None:
    settings, env = deployment_settings
    config = config_toml()
    referenced = set(ENV_REF.findall(config))
    for name in env:
        if name == "AGENT_GATEWAY_CONFIG":
            continue
        if name.startswith("AGENT_GATEWAY_"):
            assert settings_env_name(name), f"{name} is not a gateway setting"
        else:
            assert name in referenced, f"{name} is set but config.toml never uses ${{{name}}}"
    missing = referenced - set(env)
    assert not missing, f"config.toml needs {sorted(missing)}, which the Deployment never sets"
    # Several replicas share state only through Redis, whose URL is the Secret's.
    assert resource("Deployment")["spec"]["replicas"] > 1
    assert settings.gateway.backend == "redis"
    assert settings.gateway.redis_url == secret_data()["redis-url"]
    headers = {name: p.headers for name, p in settings.providers.items()}
    assert headers["openai"]["Authorization"] == f"Bearer {secret_data()['openai-api-key']}"
    assert headers["claude"]["x-api-key"] == secret_data()["anthropic-api-key"]


def test_config_file_is_mounted_where_the_gateway_reads_it() -> None:
    for kind in ("Deployment", "Job"):
        spec, pod = container(kind), pod_spec(kind)
        path = resolved_env(kind)["AGENT_GATEWAY_CONFIG"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = [m for m in spec["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
        assert len(mounts) == 1, f"{kind}: nothing mounted at {path}"
        source = volumes[mounts[0]["name"]]["configMap"]
        assert source["name"] == resource("ConfigMap")["metadata"]["name"], kind
        relative = path.removeprefix(mounts[0]["mountPath"] + "/")
        keys = {item["path"]: item["key"] for item in source["items"]}
        assert keys[relative] in resource("ConfigMap")["data"], kind
        tomllib.loads(resource("ConfigMap")["data"][keys[relative]])


def test_pods_run_as_the_image_user_with_a_read_only_root() -> None:
    user = [rest for word, rest in dockerfile_instructions() if word == "USER"][-1]
    uid, _, gid = user.partition(":")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for kind in ("Deployment", "Job"):
        pod, spec = pod_spec(kind), container(kind)
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True, kind
        assert str(context["runAsUser"]) == uid and str(context["runAsGroup"]) == (gid or uid)
        own = spec["securityContext"]
        assert own["readOnlyRootFilesystem"] is True and own["allowPrivilegeEscalation"] is False
        assert own["capabilities"]["drop"] == ["ALL"], kind
        volumes = {v["name"]: v for v in pod["volumes"]}
        tmp = [m for m in spec["volumeMounts"] if m["mountPath"] == "/tmp"]
        assert len(tmp) == 1 and "emptyDir" in volumes[tmp[0]["name"]], f"{kind}: /tmp"
        assert spec["resources"]["requests"]["memory"] and spec["resources"]["limits"]["memory"]
        assert spec["image"] == f"agent-gateway:{version}", kind


def test_termination_grace_covers_the_prestop_pause_and_the_drain(
    deployment_settings: tuple[Settings, dict[str, str]],
) -> None:
    """SIGKILL comes terminationGracePeriodSeconds after the pod is told to stop; by then the
    preStop pause and the whole drain of ``Gateway.close`` must be over: active runs get
    ``shutdown_grace_seconds``, aborted ones up to max(5, grace) to log run.cancelled, sockets
    SOCKET_CLOSE_SECONDS to close, then the webhook outbox max(1, grace) and the archive
    writer max(5, grace) to flush (app/runs/manager.py ``drain``, app/gateway.py ``close``)."""
    settings, _ = deployment_settings
    pod = pod_spec("Deployment")
    pause = container("Deployment")["lifecycle"]["preStop"]["sleep"]["seconds"]
    grace = settings.gateway.shutdown_grace_seconds
    assert pause > 0
    assert pod["terminationGracePeriodSeconds"] > pause + grace
    drain = grace + max(5.0, grace) + SOCKET_CLOSE_SECONDS + max(1.0, grace) + max(5.0, grace)
    assert pod["terminationGracePeriodSeconds"] >= pause + drain, (
        f"terminationGracePeriodSeconds {pod['terminationGracePeriodSeconds']} < preStop "
        f"{pause} + worst-case drain {drain} (shutdown_grace_seconds = {grace})"
    )


# --- the migrate Job -------------------------------------------------------------------------


def _run_job(env: dict[str, str], tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "config.toml"
    config.write_text(config_toml())
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_GATEWAY_")}
    return subprocess.run(
        [cli(), *container_argv("Job")[1:], *extra],
        env={**clean, **env, "AGENT_GATEWAY_CONFIG": str(config)},
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip


def test_migrate_job_runs_the_cli_migrate_command(tmp_path: Path) -> None:
    env = resolved_env("Job")
    assert container_argv("Job")[1:] == ["migrate"]
    assert env["AGENT_GATEWAY_CONFIG"] == resolved_env("Deployment")["AGENT_GATEWAY_CONFIG"]
    assert "AGENT_GATEWAY_ARCHIVE__URL" in env  # the Secret's archive-url, as the Deployment's
    job_ref = next(e for e in container("Job")["env"] if e["name"] == "AGENT_GATEWAY_ARCHIVE__URL")
    assert not job_ref["valueFrom"]["secretKeyRef"].get("optional", False)
    helped = _run_job(env, tmp_path, "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: agent-gateway migrate")
    # The example Secret leaves the archive off: the Job refuses, saying why.
    off = _run_job(env, tmp_path)
    assert off.returncode == 2 and "[archive] url is not set" in off.stderr
    # With an archive URL in the Secret, the Job's command migrates that database.
    database = tmp_path / "archive.db"
    on = _run_job({**env, "AGENT_GATEWAY_ARCHIVE__URL": f"sqlite:///{database}"}, tmp_path)
    assert on.returncode == 0, on.stderr
    assert "at revision" in on.stdout and database.exists()


# --- the Deployment's container, run for real ------------------------------------------------


async def _status(client: httpx.AsyncClient, probe: dict[str, Any]) -> int:
    get = probe["httpGet"]
    headers = {h["name"]: h["value"] for h in get.get("httpHeaders", [])}
    return (await client.get(get["path"], headers=headers)).status_code


def _spawn(argv: list[str], env: dict[str, str], out: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


@pytest.mark.only_backend("redis", reason="the Deployment's ConfigMap runs the Redis backend")
@pytest.mark.slow
async def test_the_deployment_serves_probes_and_stops_within_its_grace_period(
    tmp_path: Path,
) -> None:
    """``agent-gateway`` with the Deployment's args and environment and the ConfigMap's config
    (only the Redis URL points at a redis-server of the test's own, the host and port at
    loopback): every probe answers 200; on SIGTERM while a run streams, readiness turns 503 and
    liveness stays 200 (the kubelet must not restart a draining pod), the run ends
    run.cancelled on its stream, and the process exits before the kubelet would kill it."""
    spec, pod = container("Deployment"), pod_spec("Deployment")
    config = tmp_path / "config.toml"
    config.write_text(config_toml())
    argv = [cli(), *container_argv("Deployment")[1:]]
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    budget = pod["terminationGracePeriodSeconds"] - spec["lifecycle"]["preStop"]["sleep"]["seconds"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_GATEWAY_")}
    log = tmp_path / "gateway.log"
    with private_redis() as redis, log.open("wb") as out:
        env = {
            **clean,
            **resolved_env("Deployment"),
            "AGENT_GATEWAY_CONFIG": str(config),
            "AGENT_GATEWAY_GATEWAY__REDIS_URL": redis.url,
        }
        proc = _spawn(argv, env, out)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:

                async def ready() -> bool:
                    assert proc.poll() is None, log.read_text()
                    try:
                        return await _status(client, spec["readinessProbe"]) == 200
                    except httpx.TransportError:
                        return False

                await eventually_async(ready, within=30, what="readiness")
                for name in ("startupProbe", "livenessProbe", "readinessProbe"):
                    assert await _status(client, spec[name]) == 200, name
                types: list[str] = []
                key = f"k8s-{uuid.uuid4().hex[:8]}"
                request = {"input": {"prompt": "slow"}, "provider": "demo"}

                async def stream() -> None:
                    url = f"/v1/conversations/{key}/runs?stream=true"
                    async with client.stream("POST", url, json=request, timeout=120) as res:
                        assert res.status_code == 200
                        async for line in res.aiter_lines():
                            if line.startswith("data:"):
                                types.append(orjson.loads(line[5:])["type"])

                streaming = asyncio.create_task(stream())

                async def deltas() -> bool:
                    assert not streaming.done(), streaming
                    return "message.delta" in types

                await eventually_async(deltas, within=30, what="the run streams")
                stopped_at = time.monotonic()
                proc.send_signal(signal.SIGTERM)

                async def draining() -> bool:
                    return await _status(client, spec["readinessProbe"]) == 503

                await eventually_async(draining, within=5, what="readiness 503 while draining")
                assert proc.poll() is None and "run.cancelled" not in types  # still draining
                assert await _status(client, spec["livenessProbe"]) == 200
                try:
                    await asyncio.wait_for(streaming, timeout=budget)
                except TimeoutError:
                    pytest.fail(f"the run still streams {budget} s after SIGTERM (SIGKILL then)")
                code = await asyncio.to_thread(proc.wait, budget)
                elapsed = time.monotonic() - stopped_at
            assert code in (0, -signal.SIGTERM), log.read_text()
            assert elapsed < budget, f"exited {elapsed:.1f} s after SIGTERM; SIGKILL at {budget}"
            assert types[-1] == "run.cancelled", types[-3:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
