VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test run lint typecheck layers pytest openapi bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check core providers app tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict core providers

layers: $(STAMP)
	$(VENV)/bin/lint-imports

pytest: $(STAMP)
	$(VENV)/bin/pytest -p no:cacheprovider

test: lint typecheck layers pytest

run: $(STAMP)
	$(VENV)/bin/agent-gateway serve --host 127.0.0.1 --port 8000

openapi: $(STAMP)
	$(VENV)/bin/agent-gateway openapi

clean:
	rm -rf $(VENV)
