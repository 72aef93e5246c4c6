"""plldr_hf: PLDR-LLM (Power Law Graph Attention) and the AGF / PCM-V translation Transformer for Transformers 5.

Importing the package registers model types `pldrllm` and `agf` with the Auto classes.
"""

from plldr_hf.conversion import load_predefined_g

# `model.push_to_hub(repo_id, tokenizer=..., card=...)` publishes the full repo (tokenizer, rendered model card);
# installed here, not in the model packages, so the model families never depend on the publishing code
from plldr_hf.hub.push import install_push_to_hub  # noqa: E402
from plldr_hf.models import *  # noqa: F401,F403  (registers the Auto classes)
from plldr_hf.models import AgfPreTrainedModel, PldrllmPreTrainedModel
from plldr_hf.models import __all__ as _model_names


install_push_to_hub(PldrllmPreTrainedModel)
install_push_to_hub(AgfPreTrainedModel)


__version__ = "0.1.0"
__all__ = [*_model_names, "load_predefined_g", "__version__"]
