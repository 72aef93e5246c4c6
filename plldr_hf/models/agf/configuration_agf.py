"""Configuration of the AGF / PCM-V translation Transformer (model_type `agf`).

Self-contained for `trust_remote_code`: imports only the standard library, transformers and its sibling
`position_encodings.py` (the names of the position encodings).
Maths: arXiv 2603.04805 (AGF, PCM-V) and the baselines' papers named at each option; defaults: Transformer-base
(Vaswani et al., arXiv 1706.03762) at the AGF paper's depth of 3 layers.
"""

import math
import os
import warnings
from typing import Literal

from transformers import PreTrainedConfig

# huggingface_hub's `@strict`, as transformers' own configs use it, taken from transformers' module so that this
# remote-code file names no other package
from transformers.configuration_utils import strict
from transformers.utils.type_validators import activation_fn_key, interval

from .position_encodings import POSITION_ENCODINGS


# every Auto class a saved folder serves with `trust_remote_code=True` (transformers writes only the saved class's)
AUTO_MAP = {
    "AutoConfig": "configuration_agf.AgfConfig",
    "AutoModel": "modeling_agf.AgfModel",
    "AutoModelForSeq2SeqLM": "modeling_agf.AgfForConditionalGeneration",
}

# field validators (transformers' `interval`; a NaN fails every comparison, and the open upper end refuses infinity)
POSITIVE = interval(min=1)
NON_NEGATIVE = interval(min=0.0, max=math.inf, exclude_max=True)
ABOVE_ZERO = interval(min=0.0, max=math.inf, exclude_min=True, exclude_max=True)
PROBABILITY = interval(min=0.0, max=1.0, exclude_max=True)


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
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")
# the keys those types read (transformers' `modeling_rope_utils`), and the ones each type needs
ROPE_KEYS = (
    "rope_type", "type", "rope_theta", "factor", "partial_rotary_factor", "original_max_position_embeddings",
    "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate", "low_freq_factor",
    "high_freq_factor",
)  # fmt: skip
ROPE_REQUIRED = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


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
DEFAULT_ROPE_THETA = 10000.0


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
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64", "float", "half", "double")


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
MODULE_BYTES = 2_500
# more modules than this take minutes to build and are no model anyone trains (Llama-70B has about 1,300)
MAX_MODULES = 1_000_000


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system: no bound is checked
        return None


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
class AgfConfig(PreTrainedConfig):
    r"""
    Configuration of an encoder–decoder translation Transformer whose attention takes its position information from
    one switch, `position_encoding`: the AGF multiplicative power-law coefficient ("Attention's Gravitational Field",
    arXiv:2603.04805) or one of the baselines it is compared with. Module and field names follow Marian/BART.

    Defaults: 3 encoder + 3 decoder layers, as the AGF paper's "3-layer Transformer"; everything else is
    Transformer-base (arXiv 1706.03762) at that depth; the paper's own values are not public.

    Args:
        vocab_size (`int`, *optional*):
            Size of the shared source/target vocabulary. Default: 32000.
        d_model (`int`, *optional*):
            Width of the residual stream (alias `hidden_size`). Default: 512.
        encoder_layers (`int`, *optional*):
            Number of encoder layers (alias `num_hidden_layers`). Default: 3.
        decoder_layers (`int`, *optional*):
            Number of decoder layers. Default: 3.
        encoder_attention_heads (`int`, *optional*):
            Heads per encoder attention (alias `num_attention_heads`). Default: 8.
        decoder_attention_heads (`int`, *optional*):
            Heads per decoder self- and cross-attention. Default: 8.
        encoder_ffn_dim (`int`, *optional*):
            Hidden width of the encoder feed-forward blocks. Default: 2048.
        decoder_ffn_dim (`int`, *optional*):
            Hidden width of the decoder feed-forward blocks. Default: 2048.
        activation_function (`str`, *optional*):
            Feed-forward activation (a key of `transformers.activations.ACT2FN`). Default: `"relu"`.
        dropout (`float`, *optional*):
            Dropout on embeddings and residual branches. Default: 0.1.
        attention_dropout (`float`, *optional*):
            Dropout on the attention probabilities (eager path only; the flex path refuses it in training).
            Default: 0.0.
        activation_dropout (`float`, *optional*):
            Dropout after the feed-forward activation. Default: 0.0.
        init_std (`float`, *optional*):
            Standard deviation of the normal init of linear and embedding weights. Default: 0.02.
        scale_embedding (`bool`, *optional*):
            Multiply token embeddings by sqrt(d_model) (Transformer-base, arXiv 1706.03762 §3.4). Default: True.
        max_position_embeddings (`int`, *optional*):
            Longest sequence the model is meant for, for tooling that truncates inputs. None of the position
            encodings has a table of this size: sinusoidal, RoPE and all relative encodings are computed from the
            positions on the fly. Default: 1024.
        label_smoothing (`float`, *optional*):
            Label smoothing of the cross-entropy computed by `AgfForConditionalGeneration.forward`. Transformer-base
            uses 0.1 (arXiv 1706.03762 §5.4); the default keeps the loss plain cross-entropy. Default: 0.0.
        position_encoding (`str`, *optional*):
            Where attention gets position information from (arXiv 2603.04805 and the baselines' papers): `"agf"` (multiplicative coefficient on
            the scaled logits, no absolute embeddings), `"sinusoidal"` (vanilla: absolute PE added to the
            embeddings), `"rope"`, `"alibi"`, `"kerple_power"`, `"kerple_log"`, `"t5"` (relative bias buckets, one
            table per stack) or `"none"` (NoPE). Default: `"agf"`.
        rope_theta (`float`, *optional*):
            RoPE base θ; pair i of a head rotates by position·θ^(−2i/d_head). Default: 10000.0.
        rope_parameters (`dict`, *optional*):
            transformers 5's RoPE field for `position_encoding="rope"` (`{"rope_type": ..., "rope_theta": ...}` as
            Llama writes it): `default`, `linear`, `dynamic`, `yarn`, `llama3`; its `rope_theta` replaces
            `rope_theta`. Default: absent (plain RoPE).
        relative_attention_num_buckets (`int`, *optional*):
            T5 bias buckets per stack. Default: 32.
        relative_attention_max_distance (`int`, *optional*):
            T5 distance beyond which all relative positions share a bucket. Default: 128.
        agf_power_law (`bool`, *optional*):
            LC1: per-head power law Base·(1 + |δ|/r)^(−k) with learnable radius r and exponent k. Default: True.
        agf_directional (`bool`, *optional*):
            Separate (r, k, Base) for the past/self side (δ ≥ 0) and the future side (δ < 0), and a signed LC2
            table; without it the bidirectional encoder is invariant to reversing the sentence. Default: True.
        agf_learn_base (`bool`, *optional*):
            Learn Base = softplus(β) per head and side; otherwise Base is fixed at 1. Default: False.
        agf_min_radius (`float`, *optional*):
            ε_r in r = softplus(ρ) + ε_r, keeping r away from 0 where ∂c/∂r blows up. Default: 0.05.
        agf_positive_exponent (`bool`, *optional*):
            Constrain the LC1 exponent to k > 0 through k = softplus(κ), so the coefficient can only decay with
            distance (the "gravitational" reading); otherwise k is a free parameter and may turn negative.
            Needs `agf_init="spread"` (k = 0 has no softplus preimage). Default: False.
        agf_init (`str`, *optional*):
            `"spread"`: r log-spaced in [1, 64] and k log-spaced in [0.25, 2] across heads (ALiBi-like);
            `"flat"`: k = 0, so c ≡ 1 at init. Default: `"spread"`.
        agf_amplitude_max_distance (`int`, *optional*):
            LC2: a learnable positive amplitude A_h(δ) for each relative distance, δ clipped to ±this value; 0
            disables LC2. Default: 0.
        agf_feature_weights (`bool`, *optional*):
            LC3: a learnable positive weight per head and feature, applied separably — it scales the query before
            the logit and, with PCM-V, the head output. Default: False.
        agf_share_across_layers (`bool`, *optional*):
            One set of AGF parameters per stack (encoder self-attention, decoder self-attention, decoder
            cross-attention) instead of one per layer. Default: False.
        agf_cross_attention (`str`, *optional*):
            `"none"`: cross-attention gets no coefficient; `"relative"`: it gets its own AGF coefficient of
            δ = (target position − source position); `"normalized"`: of the length-normalised distance
            δ = round(100·i/S) − round(100·j/S) for target position i, source position j and source length S, in
            percent of the source sentence (the target length T of |i/T − j/S| is unknown while decoding, so
            T is taken as S). Both are positional priors that let cross-attention align target and source without
            absolute positions. Default: `"none"`.
        pcmv (`bool`, *optional*):
            PCM-V: weight the values by the coefficient after the softmax, o_m = Σ_n a_mn·c_mn·v_n, without
            renormalising (arXiv 2603.04805). Needs `position_encoding="agf"`. Default: False.
        pcmv_coefficient (`str`, *optional*):
            `"shared"`: PCM-V reuses the logit coefficient; `"separate"`: PCM-V has its own LC1/LC2 parameters.
            Default: `"shared"`.
        absolute_positions (`bool`, *optional*):
            Also add the sinusoidal position vectors of the vanilla Transformer to the token embeddings, on top of a
            relative scheme (the hybrid "AGF + PCM-V + absolute"): without them the encoder's output barely depends
            on word order at initialisation and cross-attention has nothing positional to align on. Implied by
            `position_encoding="sinusoidal"`. Default: False.
        pad_token_id (`int`, *optional*):
            Padding token. Default: 0.
        bos_token_id (`int`, *optional*):
            Beginning-of-sequence token. Default: 1.
        eos_token_id (`int`, *optional*):
            End-of-sequence token. Default: 2.
        decoder_start_token_id (`int`, *optional*):
            First decoder input; `labels` are shifted right behind it. Default: 1.
        tie_word_embeddings (`bool`, *optional*):
            Tie the encoder embedding, the decoder embedding and the LM head to `model.shared`. transformers 5
            applies every tie through this flag, so False unties all three. Default: True.
        use_cache (`bool`, *optional*):
            Return the decoder key/value cache. Default: True.
        is_encoder_decoder (`bool`, *optional*):
            Always True for this model. Default: True.

    Example:

    ```python
    >>> from plldr_hf import AgfConfig, AgfForConditionalGeneration
    >>> config = AgfConfig(vocab_size=99, d_model=32, encoder_ffn_dim=37, decoder_ffn_dim=37, encoder_layers=2,
    ...                    decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, pcmv=True)
    >>> model = AgfForConditionalGeneration(config)

    ```
    """

    model_type = "agf"
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }
    # Trainer puts every non-None output except these into EvalPrediction.predictions; keep them logits only
    keys_to_ignore_at_inference = ["past_key_values", "cache", "encoder_last_hidden_state"]

    # transformers' own fields of every config, typed again: transformers 5.25 annotates them as strings, which
    # `@strict` skips, so a `"false"` or a NaN there would pass unchecked
    output_hidden_states: bool | None = False
    return_dict: bool | None = True
    chunk_size_feed_forward: int = interval(min=0)(default=0)
    vocab_size: int = POSITIVE(default=32000)
    d_model: int = POSITIVE(default=512)
    encoder_layers: int = POSITIVE(default=3)
    decoder_layers: int = POSITIVE(default=3)
    encoder_attention_heads: int = POSITIVE(default=8)
    decoder_attention_heads: int = POSITIVE(default=8)
    encoder_ffn_dim: int = POSITIVE(default=2048)
    decoder_ffn_dim: int = POSITIVE(default=2048)
    activation_function: str = activation_fn_key(default="relu")
    dropout: float | int = PROBABILITY(default=0.1)
    attention_dropout: float | int = PROBABILITY(default=0.0)
    activation_dropout: float | int = PROBABILITY(default=0.0)
    init_std: float | int = ABOVE_ZERO(default=0.02)
    scale_embedding: bool = True
    max_position_embeddings: int = POSITIVE(default=1024)
    label_smoothing: float | int = PROBABILITY(default=0.0)
    position_encoding: str = "agf"
    rope_theta: float | int = ABOVE_ZERO(default=DEFAULT_ROPE_THETA)
    relative_attention_num_buckets: int = POSITIVE(default=32)
    relative_attention_max_distance: int = POSITIVE(default=128)
    agf_power_law: bool = True
    agf_directional: bool = True
    agf_learn_base: bool = False
    agf_min_radius: float | int = ABOVE_ZERO(default=0.05)
    agf_positive_exponent: bool = False
    agf_init: Literal["spread", "flat"] = "spread"
    agf_amplitude_max_distance: int = interval(min=0)(default=0)
    agf_feature_weights: bool = False
    agf_share_across_layers: bool = False
    agf_cross_attention: Literal["none", "relative", "normalized"] = "none"
    pcmv: bool = False
    pcmv_coefficient: Literal["shared", "separate"] = "shared"
    absolute_positions: bool = False
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    decoder_start_token_id: int | None = 1
    tie_word_embeddings: bool = True
    use_cache: bool = True
    is_encoder_decoder: bool = True

    def __post_init__(self, **kwargs):
        check_dtype("AgfConfig: ", {"dtype": self.dtype, **kwargs})
        kwargs["auto_map"] = {**AUTO_MAP, **(kwargs.get("auto_map") or {})}
        super().__post_init__(**kwargs)
        adopt_rope_parameters("AgfConfig: ", self)

    def validate_architecture(self):
        """Part of `@strict`-powered validation: illegal combinations are refused here rather than with asserts deep
        in `forward`."""
        if self.is_encoder_decoder is not True:
            raise ValueError(
                f"AgfConfig: `is_encoder_decoder` must be true (the AGF translator is an encoder-decoder), got "
                f"{self.is_encoder_decoder!r}"
            )
        if self.position_encoding not in POSITION_ENCODINGS:
            raise ValueError(
                f"`position_encoding` must be one of {tuple(POSITION_ENCODINGS)}, got {self.position_encoding!r}"
            )
        if (
            rope_type_of("AgfConfig: ", getattr(self, "rope_parameters", None)) is not None
            and self.position_encoding != "rope"
        ):
            raise ValueError(
                f"AgfConfig: rope_parameters applies to position_encoding='rope', not {self.position_encoding!r}; "
                "drop it or set position_encoding='rope'"
            )
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            heads = getattr(self, name)
            if self.d_model % heads != 0:
                raise ValueError(f"`d_model` ({self.d_model}) must be divisible by `{name}` ({heads})")
            if self.position_encoding == "rope" and (self.d_model // heads) % 2 != 0:
                raise ValueError(
                    f"`position_encoding='rope'` needs an even head dimension; d_model / {name} = "
                    f"{self.d_model // heads}"
                )
        if self.agf_positive_exponent and self.agf_init == "flat":
            raise ValueError(
                "`agf_positive_exponent=True` keeps k > 0, but `agf_init='flat'` starts at k = 0; use "
                "`agf_init='spread'` or drop the constraint"
            )
        if self.position_encoding == "t5":
            # the bidirectional encoder halves the buckets and keeps half of those exact (arXiv 1910.10683, as in transformers' T5)
            if self.relative_attention_num_buckets < 4:
                raise ValueError(
                    f"`relative_attention_num_buckets` must be at least 4, got {self.relative_attention_num_buckets}"
                )
            if self.relative_attention_max_distance <= self.relative_attention_num_buckets // 2:
                raise ValueError(
                    "`relative_attention_max_distance` must exceed relative_attention_num_buckets / 2 (the exact "
                    f"range), got {self.relative_attention_max_distance} with "
                    f"{self.relative_attention_num_buckets} buckets"
                )
        if self.pcmv and self.position_encoding != "agf":
            raise ValueError(
                "`pcmv=True` weights the values by the multiplicative AGF coefficient, so it needs "
                f"`position_encoding='agf'`; got `position_encoding={self.position_encoding!r}`"
            )
        if self.agf_cross_attention != "none" and self.position_encoding != "agf":
            raise ValueError(
                f"`agf_cross_attention={self.agf_cross_attention!r}` needs `position_encoding='agf'`; got "
                f"{self.position_encoding!r}"
            )
        if self.position_encoding == "agf" and not (
            self.agf_power_law or self.agf_amplitude_max_distance > 0 or self.agf_feature_weights
        ):
            warnings.warn(
                "`position_encoding='agf'` with LC1, LC2 and LC3 all disabled gives c ≡ 1: the model has no "
                "position information (NoPE)",
                stacklevel=3,
            )

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
        """(parameters, modules) of `AgfForConditionalGeneration` from the config alone, without building it: the
        embedding, the attention and feed-forward weights and biases and the layer norms (the small position terms
        are left out)."""
        d = self.d_model
        encoder = 4 * d * d + 4 * d + 2 * d * self.encoder_ffn_dim + self.encoder_ffn_dim + d + 4 * d
        decoder = 8 * d * d + 8 * d + 2 * d * self.decoder_ffn_dim + self.decoder_ffn_dim + d + 6 * d
        embeddings = self.vocab_size * d * (1 if self.tie_word_embeddings else 2) + self.vocab_size
        parameters = embeddings + self.encoder_layers * encoder + self.decoder_layers * decoder + 4 * d
        modules = 12 + 12 * self.encoder_layers + 18 * self.decoder_layers
        return parameters, modules


__all__ = ["AgfConfig"]
