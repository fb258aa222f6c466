# The two commands of the README: `make run` (main job on built-in defaults) and `make test`.
PYTHON ?= python3
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install run test test-slow lint
.installed: pyproject.toml scripts/install.sh
	PYTHON=$(PYTHON) bash scripts/install.sh
	@touch .installed

install: .installed

run: .installed
	$(PYTHON) -m hf_trajpe study --config configs/study/default.yaml --quick

test: .installed
	$(PYTHON) -m pytest -m "not slow" -q

test-slow: .installed
	$(PYTHON) -m pytest -m slow -q

lint: .installed
	$(PYTHON) -m ruff check hf_trajpe tests scripts $(wildcard recipes)
