"""The two model families; importing this package registers them with the transformers Auto classes.

`FAMILIES` maps each `model_type` to its descriptor (`plldr_hf.models.family.ModelFamily`); `family(model_type)`
looks one up with a clear error.
"""

from plldr_hf._compat import expose_in_transformers, register_peft_target_modules
from plldr_hf.models import agf, pldrllm
from plldr_hf.models.agf import *  # noqa: F401,F403
from plldr_hf.models.agf import __all__ as _agf_names
from plldr_hf.models.family import ModelFamily
from plldr_hf.models.pldrllm import *  # noqa: F401,F403
from plldr_hf.models.pldrllm import __all__ as _pldrllm_names


FAMILIES: dict[str, ModelFamily] = {f.model_type: f for f in (pldrllm.FAMILY, agf.FAMILY)}
for _family in FAMILIES.values():
    register_peft_target_modules(_family.model_type, _family.lora_target_modules)
# the families' classes, as `transformers.<ClassName>` resolves them after `import plldr_hf`
EXPOSED_CLASSES = tuple(
    globals()[name] for name in (*_pldrllm_names, *_agf_names) if isinstance(globals()[name], type)
)
expose_in_transformers(*EXPOSED_CLASSES)


def family(model_type_or_config) -> ModelFamily:
    """The descriptor of a `model_type`, or of a config / model's `model_type`."""
    config = getattr(model_type_or_config, "config", model_type_or_config)
    model_type = getattr(config, "model_type", config)
    if model_type not in FAMILIES:
        raise ValueError(f"model_type {model_type!r} is not one of this package's families {sorted(FAMILIES)}")
    return FAMILIES[model_type]


__all__ = [*_pldrllm_names, *_agf_names, "FAMILIES", "ModelFamily", "family"]
