# syntax=docker/dockerfile:1
# Agent Event Gateway: multi-stage build, slim runtime, non-root, health-checked.
#   docker build -t agent-gateway .        (or `make image`: Docker or Podman, README "Container")
#   docker run -p 8000:8000 --read-only --tmpfs /tmp agent-gateway
# Configuration: the TOML file at $AGENT_GATEWAY_CONFIG (mount your own there), every key
# overridable by AGENT_GATEWAY_<SECTION>__<KEY> environment variables (http-api.md).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
# The dependencies first, at the exact versions of deploy/constraints.txt (scripts/constraints.sh):
# a layer that a change of the code alone does not rebuild.
COPY deploy/constraints.txt ./deploy/constraints.txt
RUN /opt/venv/bin/pip install --no-cache-dir -r deploy/constraints.txt
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY core ./core
COPY providers ./providers
COPY app ./app
COPY clients/js/src ./clients/js/src
# The project itself (not editable; its dependencies are all in already, checked by pip check);
# pip and setuptools leave the venv afterwards.
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps . \
 && /opt/venv/bin/pip check \
 && /opt/venv/bin/python -c "import app.factory, app.backends.redis" \
 && /opt/venv/bin/pip uninstall --yes --quiet pip setuptools

FROM ${PYTHON_IMAGE} AS runtime
# JSON log lines on stdout, the container's log stream.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    AGENT_GATEWAY_CONFIG=/etc/agent-gateway/config.toml \
    AGENT_GATEWAY_GATEWAY__LOG_FORMAT=json \
    AGENT_GATEWAY_GATEWAY__LOG_STREAM=stdout
RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid gateway --no-create-home --shell /usr/sbin/nologin gateway
COPY --from=build /opt/venv /opt/venv
COPY deploy/config.example.toml /etc/agent-gateway/config.toml
USER 10001:10001
WORKDIR /tmp
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["agent-gateway"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000", "--log-level", "info"]
