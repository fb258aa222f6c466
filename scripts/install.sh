#!/usr/bin/env bash
# Installs hf_trajpe with its test, model, lm-eval and TRL extras at the tested versions (constraints.txt).
#
# PYTHON: the interpreter to install into (default .venv/bin/python). A path ending in bin/python that does
# not exist yet is created as a fresh virtual environment with BASE_PYTHON (default python3), so nothing else
# installed on the machine takes part. To use an environment you already have (say one with a CUDA torch),
# give its interpreter: PYTHON=/path/to/python.
# An existing torch (CUDA or CPU build) is kept; with none, the CPU build torch==2.13.0 is installed (on the
# project's machines pip finds that wheel on disk, without CUDA packages).
# CONSTRAINTS: the pip constraints file (default constraints.txt; empty for none). EXTRA: more requirements,
# for example "transformers==5.23.0" (make test-compat uses both).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
CONSTRAINTS=${CONSTRAINTS-constraints.txt}
EXTRA=${EXTRA:-}

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  case "$PYTHON" in
    */bin/python)
      venv=${PYTHON%/bin/python}
      echo "install: creating the virtual environment $venv (with ${BASE_PYTHON:-python3})"
      "${BASE_PYTHON:-python3}" -m venv "$venv"
      ;;
    *)
      echo "install: no interpreter '$PYTHON'; give PYTHON=/path/to/python, or leave it unset for .venv" >&2
      exit 2
      ;;
  esac
fi

if "$PYTHON" -c "import torch" 2>/dev/null; then
  echo "install: keeping the installed torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
else
  echo "install: no torch found; installing the CPU build torch==2.13.0"
  "$PYTHON" -m pip install --quiet "torch==2.13.0"
fi
args=(-e ".[test,models,lm-eval,trl]")
if [ -n "$CONSTRAINTS" ]; then
  args+=(-c "$CONSTRAINTS")
fi
# shellcheck disable=SC2206
[ -n "$EXTRA" ] && args+=($EXTRA)
"$PYTHON" -m pip install --quiet "${args[@]}"
"$PYTHON" -c "import torch, transformers, accelerate, hf_trajpe; print(f'install: ok (torch {torch.__version__}, transformers {transformers.__version__}, accelerate {accelerate.__version__}, hf_trajpe {hf_trajpe.__version__}) in {__import__(\"sys\").prefix}')"
