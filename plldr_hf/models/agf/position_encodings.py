"""The position encodings of the AGF family: the one list of their names, what each does, and the named variants of
the AGF paper's comparison.

`POSITION_ENCODINGS` is the only place the names are written: `AgfConfig` validates `position_encoding` against it,
`positions.py` builds the modules it names, and the command line, the quickstart and the position ablation take
their choices from it. The module imports only the standard library, so the command line reads it without torch.

| name | what it does | paper |
|---|---|---|
| `agf` | a positive power-law coefficient of the relative distance multiplies the scaled logits | arXiv 2603.04805 |
| `sinusoidal` | absolute sinusoidal vectors added to the token embeddings (vanilla) | arXiv 1706.03762 §3.5 |
| `rope` | queries and keys of self-attention rotated at their positions | arXiv 2104.09864 |
| `alibi` | a fixed linear distance bias on the logits | arXiv 2108.12409 |
| `kerple_power`, `kerple_log` | a learned power / logarithmic distance bias | arXiv 2205.09921 |
| `t5` | a learned bias per bucket of relative distance, one table per stack | arXiv 1910.10683 |
| `none` | no position information (NoPE) | |
"""

from dataclasses import dataclass


__all__ = ["POSITION_ENCODINGS", "POSITION_VARIANTS", "PositionEncodingInfo", "variant_label"]


@dataclass(frozen=True)
class PositionEncodingInfo:
    """How one `position_encoding` enters the model.

    Attributes:
        label: display name (tables, plots, the quickstart).
        embedding: absolute sinusoidal vectors are added to the token embeddings.
        rotary: queries and keys of self-attention are rotated at their real positions.
        term: a module evaluated for attention (a log-coefficient multiplying the scaled logits, or a bias added to
            them); `positions.TERM_MODULES` maps the encoding's name to that module's class.
    """

    label: str
    embedding: bool = False
    rotary: bool = False
    term: bool = False


POSITION_ENCODINGS: dict[str, PositionEncodingInfo] = {
    "agf": PositionEncodingInfo("AGF", term=True),
    "sinusoidal": PositionEncodingInfo("sinusoidal (vanilla)", embedding=True),
    "rope": PositionEncodingInfo("RoPE", rotary=True),
    "alibi": PositionEncodingInfo("ALiBi", term=True),
    "kerple_power": PositionEncodingInfo("KERPLE-power", term=True),
    "kerple_log": PositionEncodingInfo("KERPLE-log", term=True),
    "t5": PositionEncodingInfo("T5 bias", term=True),
    "none": PositionEncodingInfo("no positions (NoPE)"),
}

# the named variants of the comparison: each encoding alone, AGF with PCM-V (its value-side coefficient), and that
# with absolute sinusoidal positions added; label and the `AgfConfig` fields that make the variant
POSITION_VARIANTS: dict[str, tuple[str, dict]] = {
    **{name: (info.label, {"position_encoding": name}) for name, info in POSITION_ENCODINGS.items()},
    "agf+pcmv": ("AGF + PCM-V", {"position_encoding": "agf", "pcmv": True}),
    # the hybrid: AGF + PCM-V with the vanilla model's absolute sinusoidal vectors added to the embeddings
    "agf+pcmv+abs": (
        "AGF + PCM-V + absolute",
        {"position_encoding": "agf", "pcmv": True, "absolute_positions": True},
    ),
    # a positional prior in cross-attention instead of absolute positions: the AGF coefficient of the source-length-
    # normalised distance (`agf_cross_attention`), and of the plain distance i − j
    "agf+pcmv+cross": (
        "AGF + PCM-V + cross prior",
        {"position_encoding": "agf", "pcmv": True, "agf_cross_attention": "normalized"},
    ),
    "agf+pcmv+cross-rel": (
        "AGF + PCM-V + cross prior (i − j)",
        {"position_encoding": "agf", "pcmv": True, "agf_cross_attention": "relative"},
    ),
    # the paper's other learnable components switched on: LC2 (an amplitude per distance up to ±16) and LC3 (a
    # weight per head and feature), with the LC1 exponent kept positive
    "agf+pcmv+lc": (
        "AGF + PCM-V + LC2 + LC3, k > 0",
        {
            "position_encoding": "agf",
            "pcmv": True,
            "agf_amplitude_max_distance": 16,
            "agf_feature_weights": True,
            "agf_positive_exponent": True,
        },
    ),
}


def variant_label(position_encoding: str, pcmv: bool = False, fields: dict | None = None) -> str:
    """The display name of a model's position handling: that of the named variant (`POSITION_VARIANTS`) whose
    fields it has (the most specific one when several match; `fields`: the model's other config fields), else the
    encoding's name (with "+ PCM-V")."""
    fields = fields or {}
    best, label_found = -1, None
    for label, variant in POSITION_VARIANTS.values():
        extra = {k: v for k, v in variant.items() if k not in ("position_encoding", "pcmv")}
        matches = (
            variant["position_encoding"] == position_encoding
            and variant.get("pcmv", False) == pcmv
            and all(fields.get(k) == v for k, v in extra.items())
        )
        if matches and len(extra) > best:
            best, label_found = len(extra), label
    return label_found or position_encoding + (" + PCM-V" if pcmv else "")
