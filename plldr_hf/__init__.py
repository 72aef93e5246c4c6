"""plldr_hf: PLDR-LLM (Power Law Graph Attention) and the AGF / PCM-V translation Transformer for Transformers 5.

Importing the package registers model types `pldrllm` and `agf` with the Auto classes. `model.push_to_hub` is
transformers' own; `plldr_hf.hub.push_to_hub(model, repo_id, tokenizer=..., card=...)` (and `plldr-hf push`)
publishes a complete repo with the model card and custom pipelines.
"""

from plldr_hf.models import *  # noqa: F401,F403  (registers the Auto classes)
from plldr_hf.models import __all__ as _model_names
from plldr_hf.models.pldrllm.conversion import load_predefined_g


__version__ = "0.1.0"
__all__ = [*_model_names, "load_predefined_g", "__version__"]
