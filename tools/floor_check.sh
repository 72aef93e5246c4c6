#!/usr/bin/env bash
# The suite on the oldest transformers the package supports (5.19, the pin of vLLM's CPU build), opt-in: a virtual
# environment of its own (.venv-floor), the package without the serving extra (which needs 5.24), then the README's
# test command. The tests that need a newer release (continuous batching, transformers serve) skip themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-floor
. .venv-floor/bin/activate
python -m pip install -q --upgrade pip
pip install -q torch==2.13.0
pip install -q -e ".[export,quantization]" "pytest>=8" "pytest-xdist>=3.6" "lm_eval>=0.4.13,<0.5" "parameterized>=0.9" "trl>=1.16" \
    "transformers==5.19.0"
python -c "import transformers; print('transformers', transformers.__version__)"
HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_EVALUATE_OFFLINE=1 python -m pytest -q "$@"
