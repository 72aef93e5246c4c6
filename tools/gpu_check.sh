#!/usr/bin/env bash
# The prepared GPU check (tools/gpu_check.py): installs the carried wheels (.whl/, from tools/download_gpu_wheels.sh)
# into /tmp/site ahead of the image's packages, then runs the gpu-marked tests and the measurements into OUT_DIR.
#   bash tools/gpu_check.sh OUT_DIR [tools/gpu_check.py flags, e.g. --dry-run]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash tools/gpu_check.sh OUT_DIR [--dry-run]}
shift
if compgen -G ".whl/*.whl" > /dev/null; then
    echo "installing $(ls .whl/*.whl | wc -l) carried wheels into /tmp/site"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_EVALUATE_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec python3 tools/gpu_check.py --out "$out" "$@"
