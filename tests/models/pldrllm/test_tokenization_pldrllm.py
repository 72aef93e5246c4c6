"""The released PLDR-LLM tokenizer through `AutoTokenizer`, checked against `sentencepiece` itself.

Fixtures: `tests/fixtures/pldrllm_released/` (the real released `tokenizer.model`, `tokenizer_config.json`,
`special_tokens_map.json`, `config.json`; a Hub-layout `tokenizer.json` made by transformers' converter).
"""

import gzip
import json
import shutil
import subprocess
import sys

import pytest
import sentencepiece as spm
from transformers import AutoTokenizer

from plldr_hf import PldrllmTokenizer
from tests.utils import FIXTURES, REPO_ROOT


RELEASED = FIXTURES / "pldrllm_released"
HANDMADE = [
    "",
    " ",
    "Hallo Welt",
    "  leading and trailing spaces  ",
    "many     inner      spaces",
    "tabs\tand\nnewlines\r\n",
    "1234567890 3.14159 1,000,000 2026-12-01 +49 (0)30 123456",
    "Preis: 12,50 € — 99 % — 1/2",
    # NFKC normalisation cases: full-width, ligatures, circled digits, compatibility forms, decomposed accents
    "ＦＵＬＬ　ｗｉｄｔｈ　１２３",
    "ﬁnance ﬂow ﬀ",
    "① ② ③ ⅷ ㎞ ™",
    "Cafe\u0301 na\u0308ive Ångström Å",
    "Straße ÄÖÜ äöü ẞ",
    "“quotes” ‘single’ «guillemets» „deutsch“",
    "emoji 😀🚀 and CJK 漢字かな 한국어",
    "zero\u200bwidth soft\u00adhyphen",
    "user-defined pieces [SEP] and [CLS] are matched in text: a[SEP]b [CLS]",
    "▁ metaspace character ▁▁",
    "x" * 300,
]


def _lines() -> list[str]:
    with gzip.open(FIXTURES / "wmt17_newstest2017_en_de" / "ref.de.gz", "rt", encoding="utf-8", newline="") as f:
        german = f.read().split("\n")[:-1]
    gnome = REPO_ROOT / "plldr_hf" / "data" / "en_de_gnome" / "test.jsonl.gz"
    with gzip.open(gnome, "rt", encoding="utf-8") as f:
        english = [json.loads(line)["translation"]["en"] for line in f][:1000]
    return german + english + HANDMADE


LINES = _lines()


@pytest.fixture(scope="module")
def processor():
    return spm.SentencePieceProcessor(model_file=str(RELEASED / "tokenizer.model"))


def _released_folder(tmp_path, layout: str):
    folder = tmp_path / layout
    folder.mkdir()
    for name in ("config.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(RELEASED / name, folder / name)
    if layout in ("model", "both"):
        shutil.copy(RELEASED / "tokenizer.model", folder / "tokenizer.model")
    if layout in ("json", "both"):
        with gzip.open(RELEASED / "tokenizer.json.gz", "rb") as src, open(folder / "tokenizer.json", "wb") as dst:
            shutil.copyfileobj(src, dst)
    return folder


def assert_equals_sentencepiece(tokenizer, processor, lines=LINES):
    assert len(lines) >= 3000
    ids = tokenizer(lines, add_special_tokens=True)["input_ids"]
    expected = processor.encode(lines)
    wrong = [line for line, a, b in zip(lines, ids, expected) if a != b]
    assert not wrong, f"{len(wrong)} of {len(lines)} lines encode differently from sentencepiece, e.g. {wrong[:3]}"
    decoded = tokenizer.batch_decode(expected)
    expected_text = processor.decode(expected)
    wrong = [(a, b) for a, b in zip(decoded, expected_text) if a != b]
    assert not wrong, f"{len(wrong)} lines decode differently from sentencepiece, e.g. {wrong[:3]}"


@pytest.mark.parametrize("layout", ["model", "json", "both"])
def test_released_tokenizer_equals_sentencepiece(tmp_path, processor, layout):
    tokenizer = AutoTokenizer.from_pretrained(_released_folder(tmp_path, layout))
    assert isinstance(tokenizer, PldrllmTokenizer)
    assert_equals_sentencepiece(tokenizer, processor)
    # the released settings: no BOS/EOS added, left padding, [PAD] 0 / [UNK] 1 / [START] 2 / [END] 3
    assert tokenizer("Hallo")["input_ids"] == processor.encode("Hallo")
    assert tokenizer.padding_side == "left"
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (
        0,
        1,
        2,
        3,
    )
    batch = tokenizer(["Hallo", "Hallo Welt, wie geht es?"], padding=True)
    assert batch["input_ids"][0][0] == 0 and batch["attention_mask"][0][0] == 0


def test_documented_differences_from_sentencepiece(tmp_path, processor):
    """Two spellings where the HF tokenizer and SentencePiece differ by design (README, "released checkpoints")."""
    by_model = AutoTokenizer.from_pretrained(_released_folder(tmp_path, "model"))
    by_json = AutoTokenizer.from_pretrained(_released_folder(tmp_path, "json"))
    # control pieces written in the text are special tokens (as in the released HF tokenizer); SentencePiece reads
    # them as characters
    text = "[START] Hallo [END]"
    assert by_model(text)["input_ids"][0] == 2 and by_model(text)["input_ids"][-1] == 3
    assert 2 not in processor.encode(text) and 3 not in processor.encode(text)
    # the literal spelling of a byte piece can match that piece (SentencePiece never matches byte pieces in text)
    assert by_model("<0x41>")["input_ids"] == [265, 71] != processor.encode("<0x41>")
    for line in (text, "<0x41>", "a [END] b [SEP] c"):
        assert by_model(line)["input_ids"] == by_json(line)["input_ids"], line


def test_without_plldr_hf_transformers_builds_a_wrong_tokenizer(tmp_path, processor):
    """The problem this fixes, measured against the installed transformers: its LlamaTokenizer is BPE."""
    from transformers import LlamaTokenizer

    plain = LlamaTokenizer.from_pretrained(_released_folder(tmp_path, "model"))
    differ = sum(plain(x, add_special_tokens=False)["input_ids"] != processor.encode(x) for x in LINES[:500])
    if differ == 0:
        pytest.fail("transformers' LlamaTokenizer now equals sentencepiece: the routing can be reconsidered")
    assert differ > 100


def test_resaved_tokenizer_loads_exactly_without_plldr_hf(tmp_path, processor):
    tokenizer = AutoTokenizer.from_pretrained(_released_folder(tmp_path, "model"))
    saved = tmp_path / "saved"
    tokenizer.save_pretrained(saved)
    config = json.loads((saved / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "TokenizersBackend"
    assert "vocab" not in config
    assert {"tokenizer.json", "tokenizer.model"} <= {p.name for p in saved.iterdir()}
    # with plldr_hf: the same class again
    assert_equals_sentencepiece(AutoTokenizer.from_pretrained(saved), processor)

    # a plain transformers process where plldr_hf cannot be imported
    lines_file = tmp_path / "lines.json"
    lines_file.write_text(json.dumps(LINES))
    code = (
        "import json, runpy, sys\n"
        f"runpy.run_path({str(REPO_ROOT / 'tests' / 'hub_loader.py')!r})['block_package']()\n"
        "try:\n    import plldr_hf\nexcept ModuleNotFoundError:\n    pass\nelse:\n    sys.exit('plldr_hf imported')\n"
        "from transformers import AutoTokenizer\n"
        f"tok = AutoTokenizer.from_pretrained({str(saved)!r})\n"
        f"lines = json.load(open({str(lines_file)!r}))\n"
        "print(json.dumps({'cls': type(tok).__name__, 'side': tok.padding_side, "
        "'ids': tok(lines)['input_ids']}))\n"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["cls"] == "TokenizersBackend"
    assert result["side"] == "left"
    assert result["ids"] == processor.encode(LINES)


def test_tokenizer_errors_name_the_fix(tmp_path):
    folder = _released_folder(tmp_path, "none")
    with pytest.raises(ValueError, match="tokenizer.model"):
        PldrllmTokenizer.from_pretrained(folder)
    (folder / "tokenizer.model").write_bytes(b"not a sentencepiece model")
    with pytest.raises(ValueError, match="not a SentencePiece model"):
        PldrllmTokenizer.from_pretrained(folder)
