"""The PLDR-LLM tokenizer: the released SentencePiece unigram model, encoded exactly as SentencePiece does.

The released checkpoints ship `tokenizer.model` (SentencePiece unigram, byte fallback, `nmt_nfkc`, split digits)
and, on the Hub, a `tokenizer.json`, with `tokenizer_config.json` naming `LlamaTokenizerFast`. Transformers 5 builds
its BPE `LlamaTokenizer` for that name (hard-coded BPE model, Metaspace, no normaliser), which tokenises most text
differently from SentencePiece. `PldrllmTokenizer` reads the same files and builds a `tokenizers` unigram pipeline
from them instead; `plldr_hf.models.pldrllm` routes `AutoTokenizer` to it for `model_type: pldrllm` folders.

Saved folders name `TokenizersBackend` and carry an exact `tokenizer.json`, so they load identically in a plain
transformers process without `plldr_hf`; `tokenizer.model` is written beside it for SentencePiece users.

Package-side only (not remote code): the saved `tokenizer.json` already is the whole tokenizer.
"""

import json
import os
import re

from transformers import PreTrainedTokenizerFast


# special pieces of the released tokenizer (tests/fixtures/pldrllm_released/)
SPECIAL_PIECES = {"pad_token": "[PAD]", "unk_token": "[UNK]", "bos_token": "[START]", "eos_token": "[END]"}
SENTENCEPIECE_FILE = "tokenizer.model"
TOKENIZER_FILE = "tokenizer.json"


def unigram_from_sentencepiece(model_proto: bytes):
    """A `tokenizers.Tokenizer` equal to SentencePiece for a serialised unigram model (same pieces, same ids).

    SentencePiece order: charsmap normalisation, whitespace clean-up, then the ▁ metaspace with dummy prefix; byte
    fallback for pieces outside the vocabulary; control and user-defined pieces are atomic. No BOS/EOS is added
    (the released settings).
    """
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import Unigram

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(model_proto)
    except Exception as err:
        raise ValueError(f"not a SentencePiece model file ({err}); expected the released `tokenizer.model`") from err
    if proto.trainer_spec.model_type != sentencepiece_model_pb2.TrainerSpec.UNIGRAM:
        raise ValueError(
            "PLDR-LLM tokenizer: only unigram SentencePiece models are supported (the released tokenizer is one); "
            f"got model type {sentencepiece_model_pb2.TrainerSpec.ModelType.Name(proto.trainer_spec.model_type)}"
        )
    spec = proto.normalizer_spec
    tokenizer = Tokenizer(
        Unigram(
            [(p.piece, p.score) for p in proto.pieces],
            unk_id=proto.trainer_spec.unk_id,
            byte_fallback=proto.trainer_spec.byte_fallback,
        )
    )
    steps = [normalizers.Precompiled(spec.precompiled_charsmap)] if spec.precompiled_charsmap else []
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex(r"\A +| +\z"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    tokenizer.normalizer = normalizers.Sequence(steps)
    # "always", not "first": with "first", tokenizers adds no dummy prefix when the normaliser stripped leading
    # spaces ("  x" → "x" but SentencePiece gives "▁x")
    prepend = "always" if spec.add_dummy_prefix else "never"
    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend, split=False)
    # user-defined pieces ([SEP], [CLS]) are matched in the text before the lattice, as SentencePiece does: isolate
    # them, so "a[SEP]b" is ▁a [SEP] b and the space before one stays a piece of its own
    user_defined = [p.piece for p in proto.pieces if p.type == 4]
    if user_defined:
        pattern = Regex("|".join(re.escape(piece) for piece in user_defined))
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([metaspace, pre_tokenizers.Split(pattern, "isolated")])
    else:
        tokenizer.pre_tokenizer = metaspace
    parts = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if spec.add_dummy_prefix:
        parts.append(decoders.Strip(content=" ", left=1))
    tokenizer.decoder = decoders.Sequence(parts)
    # control pieces ([PAD], [UNK], [START], [END]; type 3, and unknown 2) are special tokens, recognised in text
    # like the released HF tokenizer does (SentencePiece itself reads such text as characters)
    tokenizer.add_special_tokens(
        [AddedToken(p.piece, normalized=False, special=True) for p in proto.pieces if p.type in (2, 3)]
    )
    return tokenizer


def _load_tokenizer_json(path: str):
    """(tokenizer, is_unigram) from a `tokenizer.json`; a unigram one (the released layout) gets its dummy prefix made
    unconditional (see above). Other models (a user's own BPE or word-level tokenizer) load unchanged."""
    from tokenizers import Tokenizer

    with open(path, encoding="utf-8") as handle:
        spec = json.load(handle)
    if (spec.get("model") or {}).get("type") != "Unigram":
        return Tokenizer.from_str(json.dumps(spec)), False

    def fix(node):
        if isinstance(node, dict):
            if node.get("type") == "Metaspace" and node.get("prepend_scheme") == "first":
                node["prepend_scheme"] = "always"
            for value in node.values():
                fix(value)
        elif isinstance(node, list):
            for value in node:
                fix(value)

    fix(spec.get("pre_tokenizer"))
    fix(spec.get("decoder"))
    return Tokenizer.from_str(json.dumps(spec)), True


class PldrllmTokenizer(PreTrainedTokenizerFast):
    """Tokenizer of the released PLDR-LLM models: SentencePiece unigram, left padding, no BOS/EOS added.

    Built from `tokenizer.model` when the folder has one (SentencePiece's own file, the source of truth), else from
    `tokenizer.json`; either way ids equal `sentencepiece.SentencePieceProcessor.encode`. A folder whose
    `tokenizer.json` holds another model (a user's own BPE or word-level tokenizer) loads that tokenizer unchanged.

    Example:

    ```python
    >>> from transformers import AutoTokenizer
    >>> import plldr_hf  # routes model_type "pldrllm" folders to PldrllmTokenizer
    >>> tok = AutoTokenizer.from_pretrained("tests/fixtures/pldrllm_released")  # doctest: +SKIP
    >>> tok("Hallo Welt 2026")["input_ids"]  # doctest: +SKIP
    ```
    """

    vocab_files_names = {"vocab_file": SENTENCEPIECE_FILE, "tokenizer_file": TOKENIZER_FILE}
    model_input_names = ["input_ids", "attention_mask"]
    padding_side = "left"

    @classmethod
    def convert_to_native_format(cls, trust_remote_code=False, **kwargs):
        # transformers would rebuild the backend from vocab / merges extracted from the files (and store the whole
        # vocabulary in tokenizer_config.json); __init__ reads the files itself, so pass the paths through
        return kwargs

    def __init__(self, vocab_file=None, tokenizer_file=None, tokenizer_object=None, sp_model_proto=None, **kwargs):
        if sp_model_proto is None and vocab_file is not None and os.path.isfile(vocab_file):
            with open(vocab_file, "rb") as handle:
                sp_model_proto = handle.read()
        released = sp_model_proto is not None
        if tokenizer_object is None:
            if sp_model_proto is not None:
                tokenizer_object = unigram_from_sentencepiece(sp_model_proto)
            elif tokenizer_file is not None and os.path.isfile(tokenizer_file):
                tokenizer_object, released = _load_tokenizer_json(tokenizer_file)
            else:
                raise ValueError(
                    "PLDR-LLM tokenizer: the folder has neither `tokenizer.model` nor `tokenizer.json`; copy the "
                    "released tokenizer files next to the config"
                )
        if released:
            # the released special pieces and settings; a folder's tokenizer_config.json may still override them
            for key, piece in SPECIAL_PIECES.items():
                kwargs.setdefault(key, piece)
            kwargs.setdefault("padding_side", "left")
            # released tokenizer_config.json: add_bos_token / add_eos_token false (no post-processor adds them)
            kwargs.pop("add_bos_token", None)
            kwargs.pop("add_eos_token", None)
        kwargs.pop("legacy", None)
        kwargs.pop("tokenizer_class", None)
        super().__init__(tokenizer_object=tokenizer_object, **kwargs)
        self.sp_model_proto = sp_model_proto

    def save_pretrained(self, save_directory, *args, **kwargs):
        files = super().save_pretrained(save_directory, *args, **kwargs)
        # name the stock backend: the saved tokenizer.json is exact, so a plain transformers process without
        # plldr_hf loads the same tokenizer (with plldr_hf, AutoTokenizer still routes pldrllm folders here)
        config_file = os.path.join(save_directory, "tokenizer_config.json")
        with open(config_file, encoding="utf-8") as handle:
            config = json.load(handle)
        config["tokenizer_class"] = "TokenizersBackend"
        for key in ("is_local", "local_files_only"):
            config.pop(key, None)
        _write_atomic(config_file, (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
        if self.sp_model_proto is not None:
            path = os.path.join(save_directory, SENTENCEPIECE_FILE)
            _write_atomic(path, self.sp_model_proto)
            files = (*files, path)
        return files


def _write_atomic(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
