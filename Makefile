# Every target creates the environment it needs (uv, then .venv from uv.lock) before it runs.
.DEFAULT_GOAL := help
SHELL := /bin/bash

UV := $(shell command -v uv 2>/dev/null || echo $(CURDIR)/.tools/bin/uv)
PY := $(CURDIR)/.venv/bin/python
ENV := .venv/.synced

help: ## list the targets, then the reproductions (JOBS=2 at a time, ARGS="Hydra overrides")
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-20s %s\n", $$1, $$2}'
	@python3 -m scripts.reproduce --list

$(CURDIR)/.tools/bin/uv:
	python3 -m pip install --quiet --disable-pip-version-check --target $(CURDIR)/.tools uv

$(ENV): pyproject.toml research/pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --quiet --compile-bytecode
	-$(PY) -m scripts.build_kernel  # the compiled CPU kernels; without them, the PyTorch path
	@touch $@

install: $(ENV) ## create .venv from uv.lock (pinned torch/torchvision), build the compiled CPU kernels

# The tests run in pytest-xdist workers, one per core (the root conftest.py shares torch's threads
# among them). The fast tier: up to 4, each starting on its share of the tests and taking over some
# of another's when it runs out (worksteal). The slow tier: up to 2, since its tests start processes
# and torchrun of their own; a test file runs whole in one worker (loadfile), in its order.
test: $(ENV) ## the fast tier: every module's unit tests (offline, CPU, in parallel on every core)
	$(PY) -m pytest -m "not slow" -q -n auto --maxprocesses 4 --dist worksteal

test-slow: $(ENV) ## the slow tier alone: other processes, torchrun, whole study runs, compile, the wheel
	$(PY) -m pytest -m slow -q -n auto --maxprocesses 2 --dist loadfile

test-full: $(ENV) ## every test, both tiers (CI runs them as make test, then make test-slow)
	$(PY) -m pytest -q -n auto --maxprocesses 2 --dist loadfile

lint: $(ENV) ## ruff
	$(PY) -m ruff check .

format: $(ENV) ## ruff format + import sorting
	$(PY) -m ruff check --fix --select I .
	$(PY) -m ruff format .

smoke: $(ENV) ## every study of the registry for a few steps (debug=quick), collected and plotted into multirun/smoke/ (never results/)
	for d in $$($(PY) -m scripts.smoke --datasets); do $(PY) -m experiments.kit.data $$d || exit 1; done
	$(PY) -m scripts.smoke

bench: $(ENV) ## layer speed/memory vs torch.nn, BN-Inception vs GoogLeNet, MNIST step, every study vs a plain-PyTorch peer, BN-Inception's profile, the conv net's layouts (writes results/bench/)
	$(PY) -m experiments.kit.data mnist
	$(PY) -m scripts.bench_layers
	$(PY) -m scripts.bench_inception
	$(PY) -m scripts.bench_mnist
	$(PY) -m scripts.bench_studies
	$(PY) -m scripts.profile_inception
	$(PY) -m experiments.kit.data fashion_mnist
	$(PY) -m scripts.bench_layout

# --- The reproductions: one line, every one from the registry (experiments/studies.py) -------------
# Each runs its data, training jobs (JOBS at a time, the longest first, a progress line per job and
# the time left), collection into results/, figures and wall time: python -m scripts.reproduce NAME.
JOBS ?= 2
# ARGS: extra Hydra overrides for every training job, e.g. ARGS="logger.mode=online", or
# ARGS="--resume multirun/reproduce/<time>" to continue an interrupted run (Ctrl-C prints it);
# NPROC: GPUs per job of reproduce-inception (with ARGS="data.root=DIR").
ARGS ?=
NPROC ?= 1
REPRODUCTIONS := $(shell python3 -m scripts.reproduce --names 2>/dev/null)
ifeq ($(strip $(REPRODUCTIONS)),)
$(warning python3 -m scripts.reproduce --names failed (is python3 >= 3.10 on the PATH?): no reproduce-* or question-* targets)
endif

$(REPRODUCTIONS): $(ENV)
	$(PY) -m scripts.reproduce $@ --jobs $(JOBS) --nproc $(NPROC) $(ARGS)

figures: $(ENV) ## rebuild every figure (PNG + SVG), CLAIMS.md, report.html and results/README.md from the committed CSVs (offline)
	$(PY) -m scripts.reproduce --figures

claims: $(ENV) ## results/CLAIMS.md: every claim of the papers against the committed results (offline, seconds)
	$(PY) -m scripts.claims

report: claims ## results/report.html: one self-contained page of every result (offline)
	$(PY) -m scripts.report

results-readme: $(ENV) ## results/README.md: every committed result, where it comes from, its numbers (offline)
	$(PY) -m scripts.results_readme

clean-outputs: ## delete run outputs (outputs/, multirun/, wandb/)
	rm -rf outputs multirun wandb

.PHONY: $(REPRODUCTIONS) help install test test-slow test-full lint format smoke bench figures claims report results-readme clean-outputs
