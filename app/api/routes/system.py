"""Health, readiness, providers and the demo page."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, Response

from app.api.error_responses import ERRORS
from app.api.http import GatewayDep, Principal
from app.api.responses import JSON
from app.api.schemas import ProvidersAnswer
from app.observability.metrics import METRICS_CONTENT_TYPE

__all__ = ["CLIENT_DIR", "STATIC_DIR", "client_dir", "router"]

STATIC_DIR = Path(__file__).resolve().parents[2] / "static"


def client_dir(static_dir: Path) -> Path:
    """Where the browser client's modules (served under /static/client) are.

    An installed wheel carries them as ``app/static/client`` (setup.py copies clients/js/src
    there at build time); a source checkout or an editable install serves clients/js/src itself.
    """
    packaged = static_dir / "client"
    if packaged.is_dir():
        return packaged
    return static_dir.parents[1] / "clients" / "js" / "src"


CLIENT_DIR = client_dir(STATIC_DIR)
router = APIRouter(tags=["system"])


@router.get("/healthz", summary="Liveness")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: the backend is reachable",
    responses={503: ERRORS[503]},
)
async def readyz(gateway: GatewayDep) -> Response:
    """Public, like ``/healthz``: an orchestrator's probe carries no token (http-api.md, Auth)."""
    if gateway.runs.shutting_down:
        return JSON({"status": "shutting_down"}, status_code=503)
    try:
        ready = await gateway.backend.ping()
    except Exception:
        ready = False
    if not ready:
        return JSON({"status": "backend_unavailable"}, status_code=503)
    return JSON({"status": "ok"})


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={401: ERRORS[401], 403: ERRORS[403]},
)
async def metrics(gateway: GatewayDep, _principal: Principal) -> Response:
    return Response(gateway.metrics.render(), media_type=METRICS_CONTENT_TYPE)


@router.get(
    "/v1/providers",
    response_model=ProvidersAnswer,
    responses=ERRORS,
    summary="Configured providers and their capabilities",
)
async def list_providers(gateway: GatewayDep, _principal: Principal) -> JSON:
    return JSON({"providers": gateway.catalog.describe()})


@router.get("/", include_in_schema=True, response_class=HTMLResponse, summary="Demo page")
async def index(gateway: GatewayDep) -> Response:
    page = STATIC_DIR / "index.html"
    if not gateway.settings.gateway.demo_page or not page.is_file():
        return HTMLResponse(
            "<!doctype html><title>Agent Event Gateway</title>"
            "<p>Agent Event Gateway is running. See <a href='/docs'>/docs</a>.</p>",
            status_code=404 if not gateway.settings.gateway.demo_page else 200,
        )
    return FileResponse(page)
