"""PLDR-LLM configuration (model_type `pldrllm`), field for field the released `config.json`.

Released fields keep their released names and defaults (the 110M v51 model's `config.json`, fromthesky/PLDR-LLM-v51-110M-1), so a
released `config.json` loads to the reference model and what we save loads in the existing tooling. Package-only
fields (`dag_*`, `collapsed`) default to the released behaviour.

This file is copied next to the weights by `save_pretrained` (remote code): it imports only transformers and its
sibling `tensor_parallel.py`.
"""

import math
import os
from typing import Literal

from transformers import PreTrainedConfig

# huggingface_hub's `@strict`, as transformers' own configs use it, taken from transformers' module so that this
# remote-code file names no other package
from transformers.configuration_utils import strict
from transformers.utils.type_validators import interval

from .tensor_parallel import HEADS_STYLE


# every Auto class a saved folder serves with `trust_remote_code=True` (transformers writes only the saved class's);
# vLLM's Transformers backend, for one, loads the base model through `AutoModel`
AUTO_MAP = {
    "AutoConfig": "configuration_pldrllm.PldrllmConfig",
    "AutoModel": "modeling_pldrllm.PldrllmModel",
    "AutoModelForCausalLM": "modeling_pldrllm.PldrllmForCausalLM",
    "AutoModelForSequenceClassification": "modeling_pldrllm.PldrllmForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_pldrllm.PldrllmForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_pldrllm.PldrllmForQuestionAnswering",
}

# field validators (transformers' `interval`; a NaN fails every comparison, and the open upper end refuses infinity)
# Copied from plldr_hf.models.agf.configuration_agf.POSITIVE
POSITIVE = interval(min=1)
# Copied from plldr_hf.models.agf.configuration_agf.NON_NEGATIVE
NON_NEGATIVE = interval(min=0.0, max=math.inf, exclude_max=True)
# Copied from plldr_hf.models.agf.configuration_agf.ABOVE_ZERO
ABOVE_ZERO = interval(min=0.0, max=math.inf, exclude_min=True, exclude_max=True)
# Copied from plldr_hf.models.agf.configuration_agf.PROBABILITY
PROBABILITY = interval(min=0.0, max=1.0, exclude_max=True)


# Copied from plldr_hf.models.agf.configuration_agf.check_field
def check_field(owner: str, name: str, value, kind: str, low=None, high=None, open_low=False, open_high=False):
    """One config field checked for its type (`kind`: "bool", "int" or "number"), finiteness and range, with the
    field's name in the error: a `"false"` string, a NaN or a list would otherwise change the maths silently."""
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{owner}`{name}` must be true or false (a JSON boolean, not a string), got {value!r}")
        return
    if isinstance(value, bool) or not isinstance(value, int if kind == "int" else (int, float)):
        raise ValueError(f"{owner}`{name}` must be {'an integer' if kind == 'int' else 'a number'}, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{owner}`{name}` must be a finite number, got {value!r}")
    if low is not None and (value <= low if open_low else value < low):
        raise ValueError(f"{owner}`{name}` must be {'>' if open_low else '>='} {low}, got {value!r}")
    if high is not None and (value >= high if open_high else value > high):
        raise ValueError(f"{owner}`{name}` must be {'<' if open_high else '<='} {high}, got {value!r}")


# `rope_parameters` types the model computes (transformers' RoPE initialisation functions; "default" is plain RoPE)
# Copied from plldr_hf.models.agf.configuration_agf.ROPE_TYPES
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")
# the keys those types read (transformers' `modeling_rope_utils`), and the ones each type needs
# Copied from plldr_hf.models.agf.configuration_agf.ROPE_KEYS
ROPE_KEYS = (
    "rope_type", "type", "rope_theta", "factor", "partial_rotary_factor", "original_max_position_embeddings",
    "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate", "low_freq_factor",
    "high_freq_factor",
)  # fmt: skip
# Copied from plldr_hf.models.agf.configuration_agf.ROPE_REQUIRED
ROPE_REQUIRED = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


# Copied from plldr_hf.models.agf.configuration_agf.rope_type_of
def rope_type_of(owner: str, params) -> str | None:
    """The type of a `rope_parameters` dict (None without one), refused unless the model computes it; its keys and
    numbers are checked when the config is built (a misspelled key, a missing `factor` or a NaN factor would
    otherwise surface as a KeyError or as non-finite scores later)."""
    if not params:
        return None
    if not isinstance(params, dict):
        raise ValueError(f"{owner}`rope_parameters` must be a dict, got {type(params).__name__}")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ValueError(
            f"{owner}rope_parameters rope_type={rope_type!r} is not supported; choose one of {ROPE_TYPES}"
        )
    unknown = sorted(set(params) - set(ROPE_KEYS))
    if unknown:
        raise ValueError(
            f"{owner}rope_parameters has unknown key(s) {unknown}; the keys of RoPE types are {sorted(ROPE_KEYS)}"
        )
    missing = [key for key in ROPE_REQUIRED[rope_type] if params.get(key) is None]
    if missing:
        raise ValueError(f"{owner}rope_parameters of rope_type={rope_type!r} needs {missing}")
    for key, value in params.items():
        if key in ("rope_type", "type") or value is None:
            continue
        kind = "bool" if key == "truncate" else "int" if key == "original_max_position_embeddings" else "number"
        low = None if key in ("truncate", "mscale", "mscale_all_dim") else 0.0
        check_field(f"{owner}rope_parameters ", key, value, kind, low=low, open_low=True)
    return rope_type


# the `rope_theta` default, which a `rope_parameters` base may replace
# Copied from plldr_hf.models.agf.configuration_agf.DEFAULT_ROPE_THETA
DEFAULT_ROPE_THETA = 10000.0


# Copied from plldr_hf.models.agf.configuration_agf.adopt_rope_parameters
def adopt_rope_parameters(owner: str, config) -> None:
    """transformers 5's RoPE field (`{"rope_type": ..., "rope_theta": ...}`) is honoured, not just saved: its type is
    checked, and its `rope_theta` becomes the config's one RoPE base, checked as `rope_theta` is."""
    params = getattr(config, "rope_parameters", None)
    if not params:
        return
    params["rope_type"] = rope_type_of(owner, params)
    theta = params.get("rope_theta")
    if theta is not None and config.rope_theta not in (theta, DEFAULT_ROPE_THETA):
        raise ValueError(
            f"{owner}rope_theta={config.rope_theta!r} and rope_parameters rope_theta={theta!r} differ; give the RoPE "
            "base once (either field)"
        )
    if theta is not None:
        config.rope_theta = theta
        check_field(owner, "rope_theta", config.rope_theta, "number", low=0.0, open_low=True)
    params["rope_theta"] = config.rope_theta


# weight dtypes a config may name (`dtype` / `torch_dtype`); an integer dtype is a quantizer's business, not the config's
# Copied from plldr_hf.models.agf.configuration_agf.FLOAT_DTYPES
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64", "float", "half", "double")


# Copied from plldr_hf.models.agf.configuration_agf.check_dtype
def check_dtype(owner: str, kwargs: dict) -> None:
    """The config's weight dtype (a string in a saved config.json) must name a floating-point torch dtype: a typo
    would otherwise surface as `module 'torch' has no attribute ...` deep inside `from_pretrained`."""
    for key in ("dtype", "torch_dtype"):
        value = kwargs.get(key)
        name = str(value).removeprefix("torch.")  # a torch.dtype when the config is built in Python
        if value is not None and value != "auto" and name not in FLOAT_DTYPES:
            raise ValueError(f"{owner}`{key}` must be one of {', '.join(FLOAT_DTYPES)} or 'auto', got {value!r}")


# Python objects behind one nn.Module (its dicts, parameter wrappers, hooks): about 2.4 KB each, measured with
# tracemalloc while building the tiny PLDR-LLM at 2, 20 and 200 layers; building also takes about 0.4 ms per module
# Copied from plldr_hf.models.agf.configuration_agf.MODULE_BYTES
MODULE_BYTES = 2_500
# more modules than this take minutes to build and are no model anyone trains (Llama-70B has about 1,300)
# Copied from plldr_hf.models.agf.configuration_agf.MAX_MODULES
MAX_MODULES = 1_000_000


# Copied from plldr_hf.models.agf.configuration_agf._physical_memory
def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system: no bound is checked
        return None


# Copied from plldr_hf.models.agf.configuration_agf.check_buildable
def check_buildable(config) -> None:
    """Refuse, before building a single layer, a config whose fields no longer fit together (a field is checked when
    it is set, by `@strict`; the checks between fields run again here, as `save_pretrained` runs them), or whose
    model cannot fit in this machine's memory (its parameters at the config's dtype plus the Python objects of its
    modules) or has more than `MAX_MODULES` modules; the message gives the estimate. Without it a huge
    `vocab_size` or layer count ends in an allocator error, a traceback about `ignore_mismatched_sizes`, or a build
    that never ends."""
    config.validate()
    parameters, modules = config.estimated_size()
    owner = type(config).__name__
    dtype = str(getattr(config, "dtype", None) or "float32").removeprefix("torch.")
    per_parameter = 2 if dtype in ("float16", "bfloat16", "half") else 8 if dtype in ("float64", "double") else 4
    needed = parameters * per_parameter + modules * MODULE_BYTES
    memory = _physical_memory()
    if modules > MAX_MODULES or (memory is not None and needed > memory):
        raise ValueError(
            f"{owner}: this config makes a model of about {parameters:,} parameters in {modules:,} modules, about "
            f"{needed / 2**30:,.1f} GiB to build"
            + (f", more than this machine's {memory / 2**30:,.1f} GiB of memory" if memory and needed > memory else "")
            + (f" and more than {MAX_MODULES:,} modules" if modules > MAX_MODULES else "")
            + "; check the sizes in the config (vocab_size, hidden sizes, layer counts)"
        )


@strict
class PldrllmConfig(PreTrainedConfig):
    r"""
    Configuration of a PLDR-LLM (Power Law Decoder Representations) decoder-only language model with Power Law Graph
    Attention (arXiv 2410.16703, 2502.13502, 2603.23539). Defaults give the released 110M v51 model (109,689,362
    parameters).

    Args:
        vocab_size (`int`, *optional*):
            Vocabulary size. Default: 32000.
        hidden_size (`int`, *optional*):
            Model width D; must equal `num_attention_heads * head_dim`. Default: 896.
        intermediate_size (`int`, *optional*):
            Hidden width F of the GLU feed-forward network. Default: 2389 (= floor(896 * 8 / 3)).
        num_hidden_layers (`int`, *optional*):
            Number of post-LN decoder layers L. Default: 5.
        num_attention_heads (`int`, *optional*):
            Number of heads H. Default: 14.
        head_dim (`int`, *optional*):
            Per-head width d; PLGA works on d x d matrices per head. Default: 64.
        hidden_act (`str`, *optional*):
            Activation of every GLU; the released models use SiLU only. Default: `"silu"`.
        max_position_embeddings (`int`, *optional*):
            Context length; with `reference_rope=True` longer inputs are rejected (the reference RoPE table has this
            length). Default: 1024.
        initializer_range (`float`, *optional*):
            Kept for compatibility with the released config; initialisation follows the reference code (see
            `PldrllmPreTrainedModel._init_weights`). Default: 0.02.
        layer_norm_eps (`float`, *optional*):
            Epsilon of every LayerNorm. Default: 1e-6.
        use_cache (`bool`, *optional*):
            Return a KV cache (and keep the G-cache) in forward calls. Default: `True`.
        output_pldr_attentions (`bool`, *optional*):
            Return the deductive outputs (A, A_LM, A_P, G_LM, attention probabilities) per layer. Default: `False`.
        pad_token_id (`int`, *optional*):
            Padding id. Default: 0.
        bos_token_id (`int`, *optional*):
            `[START]` id (never used in training). Default: 2.
        eos_token_id (`int`, *optional*):
            `[END]` id. Default: 3.
        tie_word_embeddings (`bool`, *optional*):
            Share the LM head's weight with the embedding (the released `final_layer` is separate). Default: `False`.
        rope_theta (`float`, *optional*):
            RoPE base. Default: 10000.0.
        rope_scaling (`dict`, *optional*):
            Released field; only `None` is supported. Default: `None`.
        rope_parameters (`dict`, *optional*):
            transformers 5's RoPE field, `{"rope_type": ..., "rope_theta": ..., ...}` as Llama writes it; types
            `default`, `linear`, `dynamic`, `yarn` and `llama3` (transformers' RoPE initialisation functions), for
            both RoPE conventions. Its `rope_theta` replaces `rope_theta`. Default: absent (plain RoPE).
        attention_bias (`bool`, *optional*):
            Bias on the q/k/v/o projections. Default: `True`.
        glu_bias (`bool`, *optional*):
            Bias on the GLU Linears (feed-forward and metric learner). Default: `True`.
        final_bias (`bool`, *optional*):
            Bias on the LM head. Default: `True`.
        reference_rope (`bool`, *optional*):
            `True`: interleaved-pair RoPE of the v51/SOC models; `False`: NeoX `rotate_half` RoPE of the v52 models.
            The two are not weight-compatible. Default: `True`.
        attention_dropout (`float`, *optional*):
            Dropout on the attention probabilities. Default: 0.0.
        num_reslayerA (`int`, *optional*):
            Residual units R of the metric learner. Default: 8.
        num_denseA (`int`, *optional*):
            GLUs per residual unit. Default: 2.
        A_dff (`int`, *optional*):
            Hidden width of the metric-learner GLUs (d -> A_dff -> d). Default: 170.
        custom_G_type (`str`, *optional*):
            `None` for the learned PLGA; `"identity"` (plain SDPA), `"random"` or `"external"` for the fixed-G v51G
            ablation, which has no metric learner and keeps G in the persistent buffer `decoder.past_G_values`.
            Default: `None`.
        cache_first_G (`bool`, *optional*):
            In cached generation store batch row 0's G and use it for every row. Default: `False`.
        dag_weight_a_lm (`float`, *optional*):
            Package-only. Weight of the DAG regulariser on A_LM in the training loss. Default: 0.0.
        dag_weight_a_p (`float`, *optional*):
            Package-only. Weight of the DAG regulariser on A_P = A_LM^P. Default: 0.0.
        dag_weight_g_lm (`float`, *optional*):
            Package-only. Weight of the DAG regulariser on G_LM. Default: 0.0.
        dag_loss_form (`str`, *optional*):
            Package-only. `"log_ratio"`: |ln(tr exp(M∘M) / d)| as in the reference code; `"notears"`:
            tr exp(M∘M) − d as written in the paper. Default: `"log_ratio"`.
        collapsed (`bool`, *optional*):
            Package-only. Set by `PldrllmForCausalLM.collapse()`: attention uses the constant G stored in
            `decoder.past_G_values` instead of running the metric learner. Default: `False`.
        reference_padding (`bool`, *optional*):
            Package-only. `False`: positions that the 2D `attention_mask` marks as padding do not enter the
            Gram matrix, positions default to `cumsum(attention_mask) − 1`, and sequences packed into one row
            (`position_ids` restarting at 0, no mask) each get their own Gram matrix and attention, so padding,
            batching and packing never change a row's numbers. `True`: the reference code's behaviour, where every
            position of the call (pads included) enters the Gram matrix and positions run 0..S−1. Unpadded, unpacked
            inputs give the same numbers either way. Default: `False`.
        metric_learner_checkpointing (`bool`, *optional*):
            Package-only. `True`: in training, the metric learner keeps only each GLU's d-wide input for
            backward and recomputes its two a-wide pre-activations there (two of a unit's six GEMMs) instead of
            storing them; forward values and gradients are unchanged. Keeps the step's peak memory within about 1.2×
            an equal-size Llama's (stored: about 1.6×). Units wrapped by PEFT or hooks are called as modules, and
            then each block of matrices is recomputed whole in backward. Default: `True`.
        metric_learner_compile (`bool`, *optional*):
            Package-only. Run the metric learner's residual units through `torch.compile` (fused
            elementwise epilogues); the first call of each block shape compiles (tens of seconds on a CPU). Values
            agree with the eager path to float32 round-off. Default: `False`.

    Example:

    ```python
    >>> from plldr_hf import PldrllmConfig, PldrllmForCausalLM
    >>> config = PldrllmConfig(vocab_size=99, hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=37,
    ...                        num_hidden_layers=2, A_dff=8, num_reslayerA=2, max_position_embeddings=64)
    >>> model = PldrllmForCausalLM(config)
    ```
    """

    model_type = "pldrllm"
    # tensor parallelism as Llama's, split by heads; each attention reads its heads' PLGA tensors (`tensor_parallel.py`)
    base_model_tp_plan = {
        "dec_layers.*.mha1.wq": "colwise",
        "dec_layers.*.mha1.wk": "colwise",
        "dec_layers.*.mha1.wv": "colwise",
        "dec_layers.*.mha1.dense": "rowwise",
        "dec_layers.*.mha1": HEADS_STYLE,
        "dec_layers.*.ffn.gluw1": "colwise",
        "dec_layers.*.ffn.gluw2": "colwise",
        "dec_layers.*.ffn.gluw3": "rowwise",
    }
    keys_to_ignore_at_inference = ["past_key_values", "cache", "pldr_attentions", "lm_loss", "dag_loss", "dag_losses"]

    # transformers' own fields of every config, typed again: transformers 5.25 annotates them as strings, which
    # `@strict` skips, so a `"false"` or a NaN there would pass unchecked
    output_hidden_states: bool | None = False
    return_dict: bool | None = True
    chunk_size_feed_forward: int = interval(min=0)(default=0)
    is_encoder_decoder: bool = False
    vocab_size: int = POSITIVE(default=32000)
    hidden_size: int = POSITIVE(default=896)
    intermediate_size: int = POSITIVE(default=2389)
    num_hidden_layers: int = POSITIVE(default=5)
    num_attention_heads: int = POSITIVE(default=14)
    head_dim: int = POSITIVE(default=64)
    hidden_act: Literal["silu"] = "silu"
    max_position_embeddings: int = POSITIVE(default=1024)
    initializer_range: float | int = NON_NEGATIVE(default=0.02)
    layer_norm_eps: float | int = ABOVE_ZERO(default=1e-6)
    use_cache: bool = True
    output_pldr_attentions: bool = False
    pad_token_id: int | None = 0
    bos_token_id: int | None = 2
    eos_token_id: int | list[int] | None = 3
    tie_word_embeddings: bool = False
    rope_theta: float | int = ABOVE_ZERO(default=DEFAULT_ROPE_THETA)
    # the base config maps `rope_scaling` to `rope_parameters` (a property); the released format stores plain
    # `rope_theta` / `rope_scaling` fields, so this field shadows the property
    rope_scaling: dict | None = None
    attention_bias: bool = True
    glu_bias: bool = True
    final_bias: bool = True
    reference_rope: bool = True
    attention_dropout: float | int = PROBABILITY(default=0.0)
    num_reslayerA: int = POSITIVE(default=8)
    num_denseA: int = POSITIVE(default=2)
    A_dff: int = POSITIVE(default=170)
    custom_G_type: Literal["identity", "random", "external"] | None = None
    cache_first_G: bool = False
    dag_weight_a_lm: float | int = NON_NEGATIVE(default=0.0)
    dag_weight_a_p: float | int = NON_NEGATIVE(default=0.0)
    dag_weight_g_lm: float | int = NON_NEGATIVE(default=0.0)
    dag_loss_form: Literal["log_ratio", "notears"] = "log_ratio"
    collapsed: bool = False
    reference_padding: bool = False
    metric_learner_checkpointing: bool = True
    metric_learner_compile: bool = False

    def __post_init__(self, **kwargs):
        check_dtype("PldrllmConfig: ", {"dtype": self.dtype, **kwargs})
        kwargs["auto_map"] = {**AUTO_MAP, **(kwargs.get("auto_map") or {})}
        super().__post_init__(**kwargs)
        adopt_rope_parameters("PldrllmConfig: ", self)

    def validate_architecture(self):
        """Part of `@strict`-powered validation: the shapes and switches that only make sense together."""
        if self.hidden_size != self.num_attention_heads * self.head_dim:
            raise ValueError(
                f"PldrllmConfig: `hidden_size` ({self.hidden_size}) must equal `num_attention_heads` "
                f"({self.num_attention_heads}) * `head_dim` ({self.head_dim})"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"PldrllmConfig: `head_dim` must be even (RoPE rotates pairs of features), got {self.head_dim}"
            )
        if self.rope_scaling is not None:
            raise ValueError(
                f"PldrllmConfig: `rope_scaling` is not supported (released models use null; give RoPE scaling as "
                f"`rope_parameters`), got {self.rope_scaling!r}"
            )
        rope_type_of("PldrllmConfig: ", getattr(self, "rope_parameters", None))
        if self.collapsed and self.custom_G_type is not None:
            raise ValueError(
                f"PldrllmConfig: `collapsed=True` applies to learned-G models; this config already has a fixed G "
                f"(`custom_G_type={self.custom_G_type!r}`)"
            )

    # Copied from plldr_hf.models.agf.configuration_agf.AgfConfig.validate_token_ids
    def validate_token_ids(self):
        """Part of `@strict`-powered validation. Stricter than transformers' (which only warns): a special id outside
        the vocabulary would index past the embedding."""
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name, None)
            # only generation's stop ids may be a list; a pad or start id is one token
            ids = value if name == "eos_token_id" and isinstance(value, list) else [value]
            if value is not None and not all(0 <= i < self.vocab_size for i in ids):
                raise ValueError(f"`{name}` must be None or an id in [0, vocab_size={self.vocab_size}), got {value!r}")

    def estimated_size(self) -> tuple[int, int]:
        """(parameters, modules) of `PldrllmForCausalLM` from the config alone, without building it: embedding, LM
        head, the attention, metric-learner (A_dff GLUs per residual layer), PLGA and feed-forward weights with their
        biases and layer norms."""
        hidden, d, dff = self.hidden_size, self.head_dim, self.A_dff
        metric_learner = 2 * d + self.num_reslayerA * (self.num_denseA * (3 * d * dff + 2 * dff + d) + 2 * d)
        layer = (
            4 * hidden * hidden
            + 4 * hidden
            + metric_learner
            + 5 * self.num_attention_heads * d * d
            + 3 * hidden * self.intermediate_size
            + 2 * self.intermediate_size
            + 5 * hidden
        )
        head = (0 if self.tie_word_embeddings else self.vocab_size * hidden) + self.vocab_size
        parameters = self.vocab_size * hidden + head + 2 * hidden + self.num_hidden_layers * layer
        modules = 8 + self.num_hidden_layers * (16 + self.num_reslayerA * (4 + 4 * self.num_denseA))
        return parameters, modules

    @property
    def dag_weights(self) -> tuple[float, float, float]:
        """(A_LM, A_P, G_LM) weights of the DAG regulariser."""
        return (self.dag_weight_a_lm, self.dag_weight_a_p, self.dag_weight_g_lm)

    @property
    def has_fixed_G(self) -> bool:
        """True when attention uses the constant G buffer (fixed-G ablation or a collapsed model)."""
        return self.custom_G_type is not None or bool(self.collapsed)


__all__ = ["PldrllmConfig"]
