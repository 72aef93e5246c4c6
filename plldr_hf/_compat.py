"""Version shims for package-only code (training, evaluation, CLI). Model files never import this module."""

from transformers import AutoModelForSeq2SeqLM
from transformers import pipelines as hf_pipelines


def register_translation_pipeline(pipeline_class) -> None:
    """Make `pipeline("translation", ...)` build `pipeline_class` for sequence-to-sequence models.

    Transformers 5 removed the built-in `translation` task and lists it in `pipelines.REMOVED_TASKS`, which is
    checked before the pipeline registry; so the name is taken off that list (only "translation", the parametrised
    `translation_xx_to_yy` names stay removed) and registered with our implementation.
    """
    getattr(hf_pipelines, "REMOVED_TASKS", {}).pop("translation", None)
    hf_pipelines.PIPELINE_REGISTRY.register_pipeline(
        "translation", pipeline_class=pipeline_class, pt_model=AutoModelForSeq2SeqLM, type="text"
    )
