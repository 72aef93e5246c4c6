"""AGF / PCM-V translation Transformer (model_type `agf`): registration with the Auto classes and for Hub remote
code, and the family's descriptor `FAMILY` (`plldr_hf.models.family.ModelFamily`).

Importing this package registers the family with the Auto classes in-process, and marks the classes for
`register_for_auto_class`, so `save_pretrained` / `push_to_hub` write an `auto_map` and copy the remote code
(`configuration_agf.py`, `modeling_agf.py` and the siblings they import; `FAMILY.code_files`) next to the weights
for `trust_remote_code` loading. `pipeline_agf.py` is shipped too (`FAMILY.pipelines`), because Transformers 5 has
no built-in "translation" pipeline. `plots.py` (the coefficient curves) is package-side only.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from plldr_hf._compat import register_translation_pipeline
from plldr_hf.models.family import ModelCard, ModelFamily

from .configuration_agf import AgfConfig
from .modeling_agf import AgfDecoderLayer, AgfForConditionalGeneration, AgfModel, AgfPreTrainedModel
from .pipeline_agf import AgfTranslationPipeline


# exist_ok=False: a future core transformers model called "agf" must fail loudly, not shadow either side
AutoConfig.register("agf", AgfConfig)
AutoModel.register(AgfConfig, AgfModel)
AutoModelForSeq2SeqLM.register(AgfConfig, AgfForConditionalGeneration)

AgfConfig.register_for_auto_class()
AgfModel.register_for_auto_class("AutoModel")
AgfForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

# transformers 5 dropped the built-in "translation" task; ours serves any seq2seq model with a tokenizer
register_translation_pipeline(AgfTranslationPipeline)


def _card_architecture(config: AgfConfig) -> list[tuple[str, object]]:
    return [
        ("encoder / decoder layers", f"{config.encoder_layers} / {config.decoder_layers}"),
        ("model width", config.d_model),
        (
            "attention heads (encoder / decoder)",
            f"{config.encoder_attention_heads} / {config.decoder_attention_heads}",
        ),
        ("feed-forward size (encoder / decoder)", f"{config.encoder_ffn_dim} / {config.decoder_ffn_dim}"),
        ("position encoding", config.position_encoding),
        ("PCM-V (value-side coefficient)", bool(getattr(config, "pcmv", False))),
        # what the embeddings carry: the decoupled schemes add nothing, the hybrid adds the vanilla sinusoids
        (
            "absolute sinusoidal positions",
            config.position_encoding == "sinusoidal" or bool(getattr(config, "absolute_positions", False)),
        ),
        ("cross-attention positional prior", getattr(config, "agf_cross_attention", "none")),
    ]


FAMILY = ModelFamily(
    model_type="agf",
    display_name="AGF translation model",
    auto_class="AutoModelForSeq2SeqLM",
    config_class=AgfConfig,
    model_class=AgfForConditionalGeneration,
    decoder_layer_class=AgfDecoderLayer,
    card=ModelCard(
        template="agf.md",
        pipeline_tag="translation",
        task_name="Translation",
        tags=("agf", "attention-gravitational-field", "translation", "custom_code"),
        language=("en", "de"),
        metric_names={
            "bleu": "sacreBLEU",
            "chrf": "chrF",
            "accuracy": "Teacher-forced token accuracy",
            "loss": "Cross-entropy loss",
            "perplexity": "Perplexity",
        },
        architecture=_card_architecture,
    ),
    pipelines={"translation": AgfTranslationPipeline},
    lora_target_modules=("q_proj", "v_proj"),
)

__all__ = ["AgfConfig", "AgfPreTrainedModel", "AgfModel", "AgfForConditionalGeneration", "AgfTranslationPipeline"]
