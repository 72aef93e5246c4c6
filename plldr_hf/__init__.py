"""plldr_hf: PLDR-LLM (Power Law Graph Attention) and the AGF / PCM-V translation Transformer for Transformers 5.

Importing the package registers model types `pldrllm` and `agf` with the Auto classes.
"""

from plldr_hf.conversion import load_predefined_g
from plldr_hf.models import *  # noqa: F401,F403  (registers the Auto classes)
from plldr_hf.models import __all__ as _model_names


__version__ = "0.1.0"
__all__ = [*_model_names, "load_predefined_g", "__version__"]
