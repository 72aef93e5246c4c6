"""What gets published: both families pushed to the loopback fake Hub (`tools/fake_hub.py`), checked in its store.

The pushes run once per session (`tests/hub_utils.published`): a collapsed PLDR-LLM and an AGF model through
`plldr_hf.hub.push_to_hub`, `model.push_to_hub`, transformers' own push, `plldr-hf push` and `Trainer.push_to_hub`.
Loading them back, with and without the package, is `tests/hub/test_remote_code.py`; pipelines, `test_pipelines.py`.
"""

import hashlib
import json
from pathlib import Path

import pytest
from huggingface_hub import ModelCard
from safetensors import safe_open

from tests.hub_utils import (
    AGF_METRICS,
    PLDR_METRICS,
    REPO_ROOT,
    tiny_agf,
    tiny_tokenizer,
)


# the session fixtures fake_hub, published, remote_results, installed_results: one instance for all Hub tests
pytest_plugins = ["tests.hub_fixtures"]


PLDR_FILES = {
    "README.md",
    "collapse.py",
    "config.json",
    "configuration_pldrllm.py",
    "dag.py",
    "fused_units.py",
    "g_cache.py",
    "inputs.py",
    "layout.py",
    "outputs.py",
    "plga.py",
    "tensor_parallel.py",
    "generation_config.json",
    "model.safetensors",
    "modeling_pldrllm.py",
    "tokenizer.json",
    "tokenizer_config.json",
}
AGF_FILES = {
    "README.md",
    "config.json",
    "configuration_agf.py",
    "generation_config.json",
    "model.safetensors",
    "modeling_agf.py",
    "position_encodings.py",
    "positions.py",
    "rotary.py",
    "tokenizer.json",
    "tokenizer_config.json",
    "pipeline_agf.py",
}
# the base model and every head, not only the saved class (transformers' own save writes that one alone)
PLDR_AUTO_MAP = {
    "AutoConfig": "configuration_pldrllm.PldrllmConfig",
    "AutoModel": "modeling_pldrllm.PldrllmModel",
    "AutoModelForCausalLM": "modeling_pldrllm.PldrllmForCausalLM",
    "AutoModelForSequenceClassification": "modeling_pldrllm.PldrllmForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_pldrllm.PldrllmForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_pldrllm.PldrllmForQuestionAnswering",
}
AGF_AUTO_MAP = {
    "AutoConfig": "configuration_agf.AgfConfig",
    "AutoModel": "modeling_agf.AgfModel",
    "AutoModelForSeq2SeqLM": "modeling_agf.AgfForConditionalGeneration",
}


def _config(published, repo_id: str) -> dict:
    return json.loads((published.hub.store / repo_id / "config.json").read_text())


def _card(published, repo_id: str) -> ModelCard:
    return ModelCard.load(published.hub.store / repo_id / "README.md")


def _metrics(card: ModelCard) -> dict[str, float]:
    return {result.metric_type: result.metric_value for result in card.data.eval_results or []}


def test_pushed_repos_are_complete_and_self_contained(published):
    hub = published.hub
    assert hub.files("org/pldr-collapsed") == PLDR_FILES
    assert hub.files("org/agf") == AGF_FILES
    for repo_id, auto_map in (("org/pldr-collapsed", PLDR_AUTO_MAP), ("org/agf", AGF_AUTO_MAP)):
        assert {k: v for k, v in _config(published, repo_id)["auto_map"].items() if k in auto_map} == auto_map
    # the pushed model files are the installed package's files, byte for byte
    package = REPO_ROOT / "plldr_hf"
    for repo_id, source in (
        ("org/pldr-collapsed/modeling_pldrllm.py", package / "models/pldrllm/modeling_pldrllm.py"),
        ("org/agf/configuration_agf.py", package / "models/agf/configuration_agf.py"),
        ("org/agf/pipeline_agf.py", package / "models/agf/pipeline_agf.py"),
    ):
        assert (hub.store / repo_id).read_bytes() == source.read_bytes(), repo_id
    assert _config(published, "org/agf")["custom_pipelines"] == {
        "translation": {
            "impl": "pipeline_agf.AgfTranslationPipeline",
            "pt": ["AutoModelForSeq2SeqLM"],
            "type": "text",
        }
    }


def test_collapsed_pldrllm_is_published_collapsed(published):
    assert _config(published, "org/pldr-collapsed")["collapsed"] is True
    with safe_open(published.hub.store / "org/pldr-collapsed/model.safetensors", "pt") as weights:
        keys = set(weights.keys())
        frozen_g = weights.get_tensor("decoder.past_G_values")
    assert keys == set(published.refs["pldrllm"]["state_dict_keys"])
    assert {"decoder.past_G_values", "decoder.past_G_values_status"} <= keys
    assert frozen_g.abs().sum() > 0
    card = _card(published, "org/pldr-collapsed")
    assert "collapsed" in card.data.tags and "This checkpoint is collapsed" in card.text


def test_pushed_cards_carry_the_metrics(published):
    assert _metrics(_card(published, "org/pldr-collapsed")) == PLDR_METRICS
    assert _metrics(_card(published, "org/agf")) == AGF_METRICS


def test_model_push_to_hub_is_transformers_own(published):
    # importing the package patches nothing: `model.push_to_hub` uploads what save_pretrained writes (the remote
    # code included, so the repo loads), with transformers' bare card and without a tokenizer
    assert published.refs["push_method_is_transformers"]
    assert published.hub.files("org/pldr-method") == PLDR_FILES - {"tokenizer.json", "tokenizer_config.json"}
    assert _config(published, "org/pldr-method")["auto_map"] == PLDR_AUTO_MAP
    card = _card(published, "org/pldr-method")
    assert not card.data.eval_results and "method-push" in card.data.tags


def test_cli_push_uploads_only_the_repo_files_with_the_run_metrics(published):
    assert published.refs["cli_rc"] == 0
    assert published.hub.files("org/agf-cli") == AGF_FILES  # no checkpoint-*/ or run files
    card = _card(published, "org/agf-cli")
    assert _metrics(card) == {"bleu": 21.5, "chrf": 44.0, "accuracy": 0.5}
    assert card.data.datasets == ["wmt17"]
    assert "nrefs:1\\|bs:1000" in card.text  # the sacreBLEU signature, with its pipe escaped for the table


def test_trainer_push_publishes_the_package_card(published):
    files = published.hub.files("org/agf-trainer")
    assert AGF_FILES <= files and "training_args.bin" in files
    card = _card(published, "org/agf-trainer")
    assert _metrics(card) == {"bleu": 9.75}
    # what Trainer.push_to_hub was given is passed through, not regenerated into a bare card
    assert card.data.language == ["de"] and card.data.license == "mit"
    assert card.data.base_model == "org/agf-base"
    assert {"from-trainer", "agf"} <= set(card.data.tags)
    assert "trust_remote_code=True" in card.text


def _snapshot(folder) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() + f"@{p.stat().st_mtime_ns}"
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def saved_agf(tmp_path):
    folder = tmp_path / "model"
    tiny_agf(len(tiny_tokenizer())).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    (folder / "checkpoint-1").mkdir()
    (folder / "checkpoint-1" / "trainer_state.json").write_text("{}")
    return folder


def test_failed_repo_creation_says_what_failed_and_leaves_the_folder_untouched(saved_agf, capsys):
    from plldr_hf.cli import main

    # this session is offline (tests/conftest.py): huggingface_hub refuses the create-repo call
    before = _snapshot(saved_agf)
    assert main(["push", str(saved_agf), "org/unreachable"]) == 1
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.startswith("plldr-hf push: error: push of 'org/unreachable' to ")
    assert "failed while creating the repository: OfflineModeIsEnabled" in message
    assert "Nothing was changed in the local model folder" in message
    assert _snapshot(saved_agf) == before


def test_failed_upload_says_what_failed_and_leaves_the_folder_untouched(saved_agf, monkeypatch):
    from huggingface_hub import HfApi, RepoUrl

    from plldr_hf.hub import HubPushError, push_folder

    staged = []

    def refuse_upload(self, *, repo_id, folder_path, **kwargs):
        staged.append(sorted(p.name for p in Path(folder_path).iterdir()))
        raise OSError("503 Service Unavailable")

    monkeypatch.setattr(HfApi, "create_repo", lambda self, repo_id, **kw: RepoUrl(f"https://huggingface.co/{repo_id}"))
    monkeypatch.setattr(HfApi, "upload_folder", refuse_upload)
    before = _snapshot(saved_agf)
    with pytest.raises(HubPushError, match="failed while uploading the files: OSError: 503") as failure:
        push_folder(saved_agf, "org/down")
    assert failure.value.step == "uploading the files" and failure.value.repo_id == "org/down"
    # the complete repo was staged elsewhere, and the model folder is as it was
    assert staged == [sorted(AGF_FILES)]
    assert _snapshot(saved_agf) == before


def test_cli_passes_the_push_options_through(saved_agf, monkeypatch, tmp_path):
    from huggingface_hub import HfApi, RepoUrl

    from plldr_hf.cli import main

    calls = {}

    def create_repo(self, repo_id, **kwargs):
        calls["create_repo"] = {"repo_id": repo_id, **kwargs}
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def upload_folder(self, *, repo_id, folder_path, **kwargs):
        calls["upload_folder"] = {"repo_id": repo_id, **kwargs}
        calls["card"] = ModelCard.load(Path(folder_path) / "README.md")

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    card_info = tmp_path / "card.json"
    card_info.write_text(json.dumps({"metrics": {"bleu": 30.5}, "license": "mit", "eval_split": "validation"}))
    argv = ["push", str(saved_agf), "org/opts", "--private", "--revision", "dev", "--commit-message", "v1"]
    argv += ["--card-info", str(card_info), "--metric", "chrf=50.25", "--license", "cc-by-4.0", "--tag", "tiny"]
    assert main(argv) == 0
    assert calls["create_repo"]["private"] is True and calls["create_repo"]["exist_ok"] is True
    upload = calls["upload_folder"]
    assert (upload["repo_id"], upload["revision"], upload["commit_message"]) == ("org/opts", "dev", "v1")
    card = calls["card"]
    assert _metrics(card) == {"bleu": 30.5, "chrf": 50.25}
    assert card.data.license == "cc-by-4.0" and "tiny" in card.data.tags  # options win over --card-info
    assert card.data.eval_results[0].dataset_split == "validation"


@pytest.mark.parametrize(
    "argv, error",
    [
        (["--metric", "bleu"], "--metric expects NAME=NUMBER"),
        (["--metric", "bleu=high"], "--metric expects NAME=NUMBER"),
        (["--metric", "bleu=nan"], "--metric expects NAME=NUMBER"),
        (["--metric", "=3"], "--metric expects NAME=NUMBER"),
    ],
)
def test_cli_rejects_bad_card_options(tmp_path, capsys, argv, error):
    """A malformed --metric is a usage error while parsing: before the folder is read (this one is empty), one line."""
    from plldr_hf.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["push", str(tmp_path), "org/x", *argv])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and error in err and len(err.strip().splitlines()) == 1
