"""Model cards: rendered from the packaged templates, parsed back as Hub model cards, carrying what they were given.

`plldr_hf.hub.render_model_card` fills `plldr_hf/model_cards/<family>.md` (repo-root `model_cards/` links there);
`huggingface_hub.ModelCard` must parse the result, and its metadata (license, language, datasets, base model,
`model-index`) must hold exactly the values passed in. `attach_model_card` makes Trainer's card step render the same
card. (The pushed cards are checked in `tests/hub/test_push_to_hub.py`.)
"""

import json
from pathlib import Path

import pytest
from huggingface_hub import EvalResult, ModelCard

from plldr_hf import hub
from plldr_hf.hub import ModelCardInfo, attach_model_card, card_info_from_folder, render_model_card
from plldr_hf.models import FAMILIES
from tests.hub_utils import REPO_ROOT, tiny_agf, tiny_pldrllm


CARDS = {
    "pldrllm": ModelCardInfo(
        metrics={"perplexity": 23.75, "order_parameter": 4.2e-4},
        datasets=["roneneldan/TinyStories"],
        eval_dataset="roneneldan/TinyStories",
        eval_dataset_name="TinyStories",
        eval_split="validation",
        base_model="fromthesky/PLDR-LLM-v51-SOC-110M-1",
        training={"learning_rate": 3e-4, "betas": (0.9, 0.95), "max_steps": 1000, "dag_weights": "0.005 / 0 / 0"},
        limitations=["Fine-tuned for 1000 steps only."],
        language="en",
    ),
    "agf": ModelCardInfo(
        metrics={"bleu": 27.125, "chrf": 55.5, "accuracy": 0.625},
        datasets=["wmt17"],
        eval_dataset="wmt17",
        eval_dataset_name="WMT17 newstest2017",
        eval_dataset_config="de-en",
        metric_details={"bleu": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"},
        training="Transformer-base recipe: Adam (0.9, 0.98), inverse-sqrt warm-up 4000 steps, label smoothing 0.1.",
        license="cc-by-4.0",
        language=["en", "de"],
    ),
}


@pytest.fixture(scope="module")
def models():
    return {"pldrllm": tiny_pldrllm(99, collapsed=False), "agf": tiny_agf(99)}


@pytest.mark.parametrize("family", ["pldrllm", "agf"])
def test_card_parses_as_a_hub_model_card_and_carries_the_metrics(models, family):
    info = CARDS[family]
    rendered = render_model_card(models[family], info, repo_id=f"org/{family}-tiny")
    card = ModelCard(str(rendered))  # parse the text back, as the Hub does
    data = card.data

    results = {r.metric_type: r for r in data.eval_results}
    assert {k: r.metric_value for k, r in results.items()} == info.metrics
    for result in results.values():
        assert isinstance(result, EvalResult)
        assert result.task_type == FAMILIES[family].card.pipeline_tag
        assert result.dataset_type == info.eval_dataset and result.dataset_name == info.eval_dataset_name
        assert result.dataset_split == info.eval_split and result.dataset_config == info.eval_dataset_config
    assert data.model_name == f"{family}-tiny"
    assert data.license == info.license and data.library_name == "transformers"
    assert data.language == ([info.language] if isinstance(info.language, str) else info.language)
    assert data.datasets == info.datasets and data.base_model == info.base_model
    assert data.pipeline_tag == FAMILIES[family].card.pipeline_tag
    assert set(FAMILIES[family].card.tags) <= set(data.tags)

    text = card.text
    assert "{{" not in text and "{%" not in text
    # usage for both install paths
    assert "import plldr_hf" in text and f'.from_pretrained("org/{family}-tiny")' in text
    assert f'.from_pretrained("org/{family}-tiny", trust_remote_code=True' in text
    # the recipe, the metric table (a `|` inside a value is escaped), the limitations
    if isinstance(info.training, dict):
        assert "| learning_rate | 0.0003 |" in text and "| betas | 0.9, 0.95 |" in text
    else:
        assert info.training in text
    for value in info.metric_details.values():
        assert value.replace("|", "\\|") in text
    for item in info.limitations:
        assert f"- {item}" in text
    assert "## Limitations" in text and "## Citation" in text


def test_card_without_metrics_has_no_model_index(models):
    card = ModelCard(str(render_model_card(models["agf"], ModelCardInfo(), repo_id="org/agf-plain")))
    assert card.data.eval_results is None and "model-index" not in card.content
    assert "No evaluation results were recorded" in card.text
    assert card.data.language == ["en", "de"]  # the family default


def test_card_states_whether_g_is_collapsed(models):
    learned = ModelCard(str(render_model_card(models["pldrllm"], repo_id="org/learned")))
    collapsed = ModelCard(str(render_model_card(tiny_pldrllm(99, collapsed=True), repo_id="org/collapsed")))
    assert "collapsed" in collapsed.data.tags and "This checkpoint is collapsed" in collapsed.text
    assert "collapsed" not in learned.data.tags and "This checkpoint is collapsed" not in learned.text
    assert "| G | learned" in learned.text and "| G | collapsed" in collapsed.text


def test_templates_ship_with_the_package_and_the_repo_root_points_to_them():
    for family in FAMILIES:
        packaged = hub.template_path(family)
        assert packaged.is_file() and packaged.parent == REPO_ROOT / "plldr_hf" / "model_cards"
        assert (REPO_ROOT / "model_cards" / f"{family}.md").read_text() == packaged.read_text()
        assert packaged.read_text().startswith("---\n{{ card_data }}\n---\n")


def test_card_info_is_read_from_the_run_files(tmp_path):
    (tmp_path / "train_report.json").write_text(
        json.dumps(
            {
                "scores": {"validation": {"perplexity": 31.5}},
                "diagnostics": {
                    "order_parameter_after": {
                        "prompt_vs_continuation_max_over_layers": {"A": 0.5, "G_LM": 0.25},
                        "across_inputs_max_over_layers": {"G_LM": 0.125},
                    }
                },
                "options": {"learning_rate": 0.001, "max_steps": 50},
            }
        )
    )
    (tmp_path / "collapse_report.json").write_text(json.dumps({"order_parameter": {"G_LM": 1e-7}}))
    info = card_info_from_folder(tmp_path)
    # calibration measurements are not results on the evaluation split (not in model-index)
    assert info.metrics == {"perplexity": 31.5}
    assert info.calibration == {
        "order_parameter_prompt_vs_continuation_max_over_layers": 0.25,
        "order_parameter_across_inputs_max_over_layers": 0.125,
    }
    assert info.collapse == {"order_parameter": {"G_LM": 1e-7}}
    assert info.training == {"learning_rate": 0.001, "max_steps": 50} and info.eval_split == "validation"

    # an explicit model_card.json wins over what was discovered; lists and metrics are merged
    (tmp_path / "model_card.json").write_text(
        json.dumps({"metrics": {"perplexity": 30.0}, "license": "mit", "tags": ["tiny"], "eval_split": "test"})
    )
    info = card_info_from_folder(tmp_path)
    assert (
        info.metrics == {"perplexity": 30.0}
        and info.calibration["order_parameter_across_inputs_max_over_layers"] == 0.125
    )
    assert info.license == "mit" and info.tags == ["tiny"] and info.eval_split == "test"

    # command-line options (overrides) win over model_card.json, even when they name a default value
    info = card_info_from_folder(tmp_path, {"eval_split": "validation", "license": "apache-2.0", "tags": ["cli"]})
    assert info.eval_split == "validation" and info.license == "apache-2.0" and info.tags == ["tiny", "cli"]

    (tmp_path / "model_card.json").write_text(json.dumps({"metrix": {}}))
    with pytest.raises(ValueError, match="unknown field"):
        card_info_from_folder(tmp_path)


def test_translation_run_files_give_bleu_chrf_accuracy(tmp_path):
    scores = {"bleu": 20.0, "chrf": 40.0, "accuracy": 0.5, "bleu_signature": "nrefs:1", "segments": 10}
    (tmp_path / "validation_results.json").write_text(json.dumps({**scores, "bleu": 19.0}))
    (tmp_path / "test_results.json").write_text(json.dumps(scores))
    info = card_info_from_folder(tmp_path)
    assert info.metrics == {"bleu": 20.0, "chrf": 40.0, "accuracy": 0.5} and info.eval_split == "test"
    assert info.metric_details == {"bleu": "nrefs:1"}


def test_trainer_card_step_renders_the_package_card(tmp_path, models):
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    trainer = Trainer(model=models["agf"], args=args)
    attach_model_card(trainer, ModelCardInfo(metrics={"bleu": 9.5}, datasets=["wmt17"]))
    trainer.save_model()
    # what Trainer.push_to_hub does after saving, with the card kwargs it was given
    trainer.create_model_card(
        language="de", license="mit", tags=["mine"], finetuned_from="org/base", dataset="iwslt2017", model_name="x"
    )
    card = ModelCard.load(Path(tmp_path) / "README.md")
    assert {r.metric_type: r.metric_value for r in card.data.eval_results} == {"bleu": 9.5}
    assert card.data.language == ["de"] and card.data.license == "mit" and card.data.base_model == "org/base"
    assert card.data.datasets == ["wmt17", "iwslt2017"] and card.data.model_name == "x"
    assert {"mine", "agf"} <= set(card.data.tags)
    assert (tmp_path / "pipeline_agf.py").is_file()
    assert "translation" in json.loads((tmp_path / "config.json").read_text())["custom_pipelines"]


def test_a_forced_collapse_says_so_with_its_approximation_and_calibration_is_no_split_result(tmp_path):
    model = tiny_pldrllm(64, collapsed=False)
    report = model.collapse(force=True)
    assert not report.invariant
    model.save_pretrained(tmp_path)
    (tmp_path / "collapse_report.json").write_text(json.dumps(report.to_dict()))
    (tmp_path / "train_report.json").write_text(
        # a report saved before `RunReport` (the order parameter at the top level) still reads
        json.dumps({"order_parameter_after": {"across_inputs_max_over_layers": {"G_LM": 3.5}}})
    )
    card = render_model_card(model, card_info_from_folder(tmp_path))
    assert "The collapse was forced" in card.text
    assert f"{report.max_abs_logit_diff}" in card.text and f"{100 * report.argmax_agreement:.2f}%" in card.text
    # the order parameter is a calibration measurement: in its own table, not in model-index
    assert "not on a dataset\nsplit" in card.text and "| 3.5 |" in card.text
    assert not card.data.eval_results

    invariant = tiny_pldrllm(64)
    info = card_info_from_folder(tmp_path).updated(collapse={"forced": True, "invariant": True})
    assert "The collapse was forced" not in render_model_card(invariant, info).text
