# Every target creates the environment it needs (uv, then .venv from uv.lock) before it runs.
.DEFAULT_GOAL := help
SHELL := /bin/bash

UV := $(shell command -v uv 2>/dev/null || echo $(CURDIR)/.tools/bin/uv)
PY := $(CURDIR)/.venv/bin/python
ENV := .venv/.synced

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-20s %s\n", $$1, $$2}'

$(CURDIR)/.tools/bin/uv:
	python3 -m pip install --quiet --disable-pip-version-check --target $(CURDIR)/.tools uv

$(ENV): pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --quiet
	@touch $@

install: $(ENV) ## create .venv from uv.lock (pinned torch/torchvision)

test: $(ENV) ## run the test suite (offline, CPU, a few minutes)
	$(PY) -m pytest -m "not slow" -q

test-full: $(ENV) ## run every test, the slow ones too
	$(PY) -m pytest -q

lint: $(ENV) ## ruff
	$(PY) -m ruff check .

format: $(ENV) ## ruff format + import sorting
	$(PY) -m ruff check --fix --select I .
	$(PY) -m ruff format .

bench: $(ENV) ## layer speed and memory vs torch.nn (writes results/bench/)
	$(PY) -m scripts.bench_layers

clean-outputs: ## delete run outputs (outputs/, multirun/, wandb/)
	rm -rf outputs multirun wandb

.PHONY: help install test test-full lint format bench clean-outputs
