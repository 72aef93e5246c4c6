"""Write the 64-piece SentencePiece model of `tests/fixtures/pldrllm_legacy_pth/` (`tokenizer.model`).

    python tools/make_legacy_tokenizer.py tests/fixtures/pldrllm_legacy_pth/tokenizer.model

The tiny reference checkpoint of that folder has a vocabulary of 64; the released tokenizer has 32,000 pieces and
belongs to the released 110M models. This is a SentencePiece unigram model (the only kind `PldrllmTokenizer` reads)
with the released special pieces ([PAD] 0, [UNK] 1, [START] 2, [END] 3) and 60 pieces learned from the embedded
Shakespeare training text, at so small a vocabulary mostly single characters (character coverage 0.9995; the rest
map to [UNK]), so the conversion journey `plldr-hf convert ... --tokenizer` ends in text. The weights are random, so
the text is too.
"""

import io
import sys
from pathlib import Path


def main(path: str) -> None:
    import sentencepiece as spm

    from plldr_hf.training.corpus import load_text_corpus

    lines = [line for text in load_text_corpus()["train"]["text"][:3000] for line in text.splitlines() if line.strip()]
    model = io.BytesIO()
    spm.set_random_generator_seed(0)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        model_type="unigram",
        vocab_size=64,
        hard_vocab_limit=False,
        character_coverage=0.9995,
        add_dummy_prefix=True,
        normalization_rule_name="identity",
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        pad_piece="[PAD]",
        unk_piece="[UNK]",
        bos_piece="[START]",
        eos_piece="[END]",
        num_threads=1,
        minloglevel=2,
    )
    Path(path).write_bytes(model.getvalue())


if __name__ == "__main__":
    main(*sys.argv[1:])
