"""BLEU / chrF through sacrebleu against the published WMT17 newstest2017 scores, and teacher-forced token accuracy."""

import gzip
import json

import numpy as np
import pytest
import sacrebleu
import torch

from plldr_hf.evaluation import corpus_bleu, corpus_chrf, token_accuracy, token_accuracy_counts, translation_scores


# best and worst system, the one whose file starts with a byte-order mark, and the rule-based one
SYSTEMS = ["uedin-nmt.4722", "online-F.0", "online-A.0", "PROMT-Rule-based.4735"]


def _read_lines(path):
    # split on "\n" and keep every line unstripped (tests/fixtures/README.md): the BOM of online-A.0 is part of the
    # score; the files are stored gzip-compressed, byte for byte
    with gzip.open(f"{path}.gz", "rt", encoding="utf-8", newline="") as handle:
        return handle.read().split("\n")[:-1]


@pytest.fixture(scope="module")
def wmt17(fixtures_dir):
    folder = fixtures_dir / "wmt17_newstest2017_en_de"
    expected = json.loads((folder / "expected_bleu.json").read_text(encoding="utf-8"))
    return folder, _read_lines(folder / "ref.de"), expected


@pytest.mark.parametrize("system", SYSTEMS)
def test_bleu_and_chrf_reproduce_newstest2017_scores(wmt17, system):
    folder, refs, expected = wmt17
    hyps = _read_lines(folder / expected[system]["file"])
    assert len(hyps) == len(refs) == 3004

    bleu = corpus_bleu(hyps, refs)
    chrf = corpus_chrf(hyps, refs)

    assert round(bleu.score, 2) == round(expected[system]["bleu"], 2), (bleu.score, expected[system]["bleu"])
    assert round(chrf.score, 2) == round(expected[system]["chrf"], 2), (chrf.score, expected[system]["chrf"])
    version = sacrebleu.__version__
    assert bleu.signature == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{version}"
    assert chrf.signature == f"nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:{version}"
    assert f"hyp_len = {expected[system]['sys_len']} ref_len = {expected[system]['ref_len']}" in bleu.detail
    assert str(bleu).startswith(f"BLEU|{bleu.signature} = {expected[system]['bleu']:.2f}")


def test_local_evaluate_module_matches_direct_sacrebleu(wmt17):
    from plldr_hf.metrics import load_translation_metric

    folder, refs, expected = wmt17
    hyps = _read_lines(folder / expected["KIT.4950"]["file"])[:400]
    refs = refs[:400]
    direct = translation_scores(hyps, refs)
    via_evaluate = load_translation_metric().compute(predictions=hyps, references=refs)
    assert via_evaluate == direct
    assert via_evaluate["bleu"] != pytest.approx(expected["KIT.4950"]["bleu"], abs=0.01), "subset should differ"


def test_multiple_reference_streams():
    hyps = ["the cat sat on the mat", "a dog runs in the park"]
    refs_a = ["the cat sat on the mat", "a dog is running in a park"]
    refs_b = ["on the mat sat the cat", "a dog runs in the park"]
    single = corpus_bleu(hyps, refs_a)
    multi = corpus_bleu(hyps, [refs_a, refs_b])
    assert multi.signature.startswith("nrefs:2|")
    assert multi.score > single.score
    assert multi.score == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs_a, refs_b]).score)


@pytest.mark.parametrize(
    "hyps, refs, error, match",
    [
        (["a b c d"], ["a b c d", "e f g h"], ValueError, "has 2 segments but there are 1 hypotheses"),
        ([], [], ValueError, "empty"),
        ("a b c d", ["a b c d"], TypeError, "not a single string"),
        (["a b c d", None], ["a", "b"], TypeError, r"hypotheses\[1\] is NoneType"),
    ],
    ids=["length-mismatch", "empty", "bare-string", "non-string"],
)
def test_bad_metric_input_is_named(hyps, refs, error, match):
    with pytest.raises(error, match=match):
        corpus_bleu(hyps, refs)


def test_token_accuracy_counts_only_non_ignored_labels():
    labels = np.array([[5, 6, 2, -100, -100], [7, 8, 9, 10, 2]])
    # row 0: 2 of 3 right (the prediction under -100 must not count); row 1: 4 of 5 right
    preds = np.array([[5, 0, 2, 3, 3], [7, 8, 9, 11, 2]])
    assert token_accuracy_counts(preds, labels) == (6, 8)
    assert token_accuracy(preds, labels) == pytest.approx(6 / 8)

    logits = torch.nn.functional.one_hot(torch.tensor(preds), num_classes=12).float()
    assert token_accuracy(logits, torch.tensor(labels)) == pytest.approx(6 / 8)

    with pytest.raises(ValueError, match="do not match labels"):
        token_accuracy(preds[:, :4], labels)
    with pytest.raises(ValueError, match="no target tokens"):
        token_accuracy(preds, np.full_like(labels, -100))


def test_ablation_summary_table_and_noise_rule(tmp_path):
    from benchmarks.position_ablation import markdown_table, plot, summarize, welch_resolved

    assert welch_resolved([70.5, 70.6, 70.7], [70.4, 70.6, 70.8]) is False
    assert welch_resolved([75.0, 75.1, 74.9], [70.0, 70.1, 69.9]) is True
    assert welch_resolved([75.0], [70.0, 70.1]) is None

    def record(variant, seed, acc, step):
        scores = {"accuracy": acc, "bleu": acc / 4, "chrf": acc / 2}
        return {"variant": variant, "seed": seed, "parameters": 1_000_000, "step_time": step,
                "step_cpu_time": step, "test": scores, "gnome": dict(scores)}  # fmt: skip

    records = [record("sinusoidal", s, 50.0 + s / 10, 0.2 + s / 100) for s in range(3)]
    records += [record("agf+pcmv", s, 60.0 + s / 10, 0.3 + s / 100) for s in range(3)]
    records += [record("rope", s, 50.05 + (s - 1) / 5, 0.2) for s in range(3)]
    summary = summarize(records, ["sinusoidal", "rope", "agf+pcmv"])
    assert summary["sinusoidal"]["step_time_ratio"]["values"] == [1.0, 1.0, 1.0]
    assert summary["agf+pcmv"]["step_time_ratio"]["values"][0] == pytest.approx(1.5)
    assert summary["agf+pcmv"]["test_accuracy"]["mean"] == pytest.approx(60.1)
    assert summary["agf+pcmv"]["test_accuracy"]["resolved_vs_reference"] is True
    assert summary["rope"]["test_accuracy"]["resolved_vs_reference"] is False

    meta = {"train_pairs": 10, "test_segments": 5, "gnome_segments": 6, "machine": "test", "wall_minutes": 1.0, "run_minutes": 1.0,
            "jobs": 1, "bleu_signature": "nrefs:1", "chrf_signature": "nrefs:1"}  # fmt: skip
    from benchmarks.position_ablation import FULL

    table = markdown_table(summary, FULL, meta)
    assert "| AGF + PCM-V | 70.73 |" in table and "| sinusoidal (vanilla) | 70.59 |" in table
    assert "60.10 ± 0.10 *" in table
    assert "beyond noise: AGF + PCM-V; within noise: RoPE." in table
    plot(summary, tmp_path / "ablation.png")
    assert (tmp_path / "ablation.png").read_bytes()[:4] == b"\x89PNG"
