VENV ?= .venv
PY := $(VENV)/bin/python
# Runtime dependencies only (`make run`, `make openapi`).
RUN_STAMP := $(VENV)/.installed-run
# Runtime plus the dev extras (lint, type check, tests).
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: test test-setup run lint typecheck layers pytest openapi bench ab clean example image constraints

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(RUN_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e .
	touch $(RUN_STAMP)

# The dev extras include the runtime dependencies, so this also satisfies `make run`.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP) $(RUN_STAMP)

# Redis on 127.0.0.1:6379, a Redis Cluster on 127.0.0.1:7380-7385 (scripts/redis-cluster.sh),
# redis-server, nginx and chromium (installed when root + apt-get).
test-setup:
	scripts/test-setup.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check core providers app tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict core providers app
	$(VENV)/bin/mypy --strict tests
	$(VENV)/bin/mypy --strict bench

layers: $(STAMP)
	$(VENV)/bin/lint-imports

pytest: $(STAMP)
	$(VENV)/bin/pytest -p no:cacheprovider --ignore=tests/deploy
	# The image, compose and rolling-restart tests alone, one at a time: containers under a
	# loaded pair of cores would time their drains against the rest of the suite.
	$(VENV)/bin/pytest -p no:cacheprovider -n 0 tests/deploy
	# Once more with every public path (issue 50): the gateway, backend-contract and concurrency tests
	# (not their redis-cluster runs: a cluster client always takes the public path).
	AGENT_GATEWAY_GATEWAY__FAST_PATHS=false $(VENV)/bin/pytest -p no:cacheprovider -k "not redis-cluster" \
		tests/structure/test_every_backend.py tests/app/backends/redis/test_backend.py tests/app/backends/test_memory.py \
		tests/app/runs/test_concurrency_*.py tests/app/compat/redis_fast/test_fallback.py

# The tests need what test-setup provides, also when `make pytest` is run alone.
pytest: test-setup

test: test-setup lint typecheck layers pytest

run: $(RUN_STAMP)
	$(VENV)/bin/agent-gateway serve --host $(HOST) --port $(PORT)

# The Ant Design X example (examples/antd-x-chat): npm ci from its lock file and vite build, each
# only when out of date, then `make run`'s gateway, which serves the build at /example/.
EXAMPLE := examples/antd-x-chat
EXAMPLE_SOURCES := $(EXAMPLE)/index.html $(EXAMPLE)/vite.config.js $(EXAMPLE)/package.json \
	$(wildcard $(EXAMPLE)/src/*) $(wildcard clients/js/src/*.js)

$(EXAMPLE)/node_modules/.package-lock.json: $(EXAMPLE)/package-lock.json
	cd $(EXAMPLE) && npm ci --no-audit --no-fund

$(EXAMPLE)/dist/index.html: $(EXAMPLE)/node_modules/.package-lock.json $(EXAMPLE_SOURCES)
	cd $(EXAMPLE) && npm run build

example: $(RUN_STAMP) $(EXAMPLE)/dist/index.html
	@echo "Ant Design X example: http://$(HOST):$(PORT)/example/"
	$(VENV)/bin/agent-gateway serve --host $(HOST) --port $(PORT)

# Every bench with a target, one after the other; fails when one is missed or unmeasured
# (ARGS=--quick: smaller sizes, gating only the targets they measure).
bench: test-setup $(STAMP)
	$(PY) bench/run_all.py $(ARGS)

# The short headline benches against the tree before issue 50, side by side in alternating
# rounds: fast paths on, and with every public path (BENCHMARKS.md "Trees side by side").
# AB_BEFORE / AB_AFTER: git revisions or directories; ARGS: more options (--rounds 1, --timeout).
AB_BEFORE ?= 084b081
AB_AFTER ?= HEAD
ab: test-setup $(STAMP)
	$(PY) bench/ab_trees.py --variant before=$(AB_BEFORE) --variant after=$(AB_AFTER) \
		--variant public=$(AB_AFTER):AGENT_GATEWAY_GATEWAY__FAST_PATHS=false --rounds 5 \
		--suite headline $(ARGS)

# The container image (agent-gateway:latest) with Docker or Podman; without the default base
# image, a local one from Debian packages (scripts/base-image.sh). README "Container".
image:
	scripts/image.sh

# deploy/constraints.txt, the image's exact dependency versions, from pyproject.toml.
constraints:
	scripts/constraints.sh

openapi: $(RUN_STAMP)
	$(VENV)/bin/agent-gateway openapi

clean:
	rm -rf $(VENV)
