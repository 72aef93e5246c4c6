"""The two model families; importing this package registers them with the transformers Auto classes."""

from plldr_hf.models.agf import *  # noqa: F401,F403
from plldr_hf.models.agf import __all__ as _agf_names
from plldr_hf.models.pldrllm import *  # noqa: F401,F403
from plldr_hf.models.pldrllm import __all__ as _pldrllm_names


__all__ = [*_pldrllm_names, *_agf_names]
