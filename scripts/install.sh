#!/usr/bin/env bash
# Installs hf_trajpe and its test/model extras into the current Python environment.
# An existing torch (CUDA or CPU build) is kept; with none, the CPU build torch==2.13.0 is
# installed (on the project's machines pip finds that wheel on disk, without CUDA packages).
set -euo pipefail
PYTHON=${PYTHON:-python3}
cd "$(dirname "$0")/.."

if "$PYTHON" -c "import torch" 2>/dev/null; then
  echo "install: keeping the installed torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
else
  echo "install: no torch found; installing the CPU build torch==2.13.0"
  "$PYTHON" -m pip install --quiet "torch==2.13.0"
fi
"$PYTHON" -m pip install --quiet -e ".[test,models]"
"$PYTHON" -c "import torch, transformers, hf_trajpe; print(f'install: ok (torch {torch.__version__}, transformers {transformers.__version__}, hf_trajpe {hf_trajpe.__version__})')"
