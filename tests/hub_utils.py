"""Shared pieces of the Hub tests: tiny models and tokenizer, subprocess runners, and the publishing run.

The fixtures that use them are in `tests/hub_fixtures.py`. The fake Hub is `tools/fake_hub.py` (loopback only).
Pushes and loads run in subprocesses with `HF_HUB_OFFLINE` removed and `HF_ENDPOINT` pointing at it, because
huggingface_hub reads its endpoint and offline flag at import time and the test session itself stays offline
(tests/conftest.py).

`publish` (the body of the `published` fixture's subprocess) pushes, with the package imported:

- `org/pldr-collapsed`: a tiny invariant PLDR-LLM, collapsed, via `plldr_hf.hub.push_to_hub` (tokenizer, card);
- `org/agf`: a tiny AGF / PCM-V model, via `plldr_hf.hub.push_to_hub`;
- `org/pldr-method`: the same PLDR-LLM via `model.push_to_hub(repo_id, tags=...)`, which stays transformers' own
  method with the package imported (no tokenizer, transformers' bare card);
- `org/agf-cli`: the AGF model saved to a folder with a `test_results.json`, via `plldr-hf push`;
- `org/agf-trainer`: the AGF model via `Trainer.push_to_hub(...)` after `attach_model_card`;

and records the reference outputs (`refs.pt`): `tests/hub_loader.compute_outputs` of the original models, and the
pipelines run in-process on the model objects. It then loads `org/pldr-collapsed` and `org/agf` back from the fake
Hub without `trust_remote_code` (`installed.pt`): a process with the package imported.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.utils import REPO_ROOT, TRANSLATION_WORDS, make_invariant, tiny_model, tiny_translation_tokenizer
from tests.utils import tiny_agf as tiny_agf_model


LOADER = REPO_ROOT / "tests" / "hub_loader.py"
FAKE_HUB = REPO_ROOT / "tools" / "fake_hub.py"

WORDS = TRANSLATION_WORDS
PROMPTS_EN = ["the cat sat on a mat", "a dog ran far away"]
PLDR_METRICS = {"perplexity": 17.25, "order_parameter": 3.5e-7}
AGF_METRICS = {"bleu": 12.5, "chrf": 33.25, "accuracy": 0.4375}
MAX_NEW_TOKENS = 6


tiny_tokenizer = tiny_translation_tokenizer


def tiny_pldrllm(vocab_size: int, collapsed: bool = True):
    """A tiny PLDR-LLM; with `collapsed`, its metric learner is made input-invariant and G is frozen."""
    model = tiny_model("sdpa", vocab_size=vocab_size, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if collapsed:
        report = make_invariant(model).collapse()
        assert report.invariant and model.config.collapsed
    return model


def tiny_agf(vocab_size: int):
    """A tiny AGF model with PCM-V and position parameters moved off their symmetric init."""
    model = tiny_agf_model(
        vocab_size=vocab_size,
        dropout=0.0,
        init_std=0.2,
        pcmv=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if any(key in name for key in ("radius_raw", "exponent", "base_raw", "amplitude_raw")):
                param.add_(torch.randn_like(param) * 0.5)
    return model


def cases(
    source_prefix: str, trust_remote_code: bool, *, pipelines: bool = True, pldr_repo: str = "pldr-collapsed"
) -> list[dict]:
    """The loader cases for the two families, reading from `<source_prefix><pldr_repo>` / `<source_prefix>agf`."""
    return [
        {
            "name": "pldrllm",
            "source": f"{source_prefix}{pldr_repo}",
            "kind": "causal",
            "trust_remote_code": trust_remote_code,
            "prompts": PROMPTS_EN,
            "max_new_tokens": MAX_NEW_TOKENS,
            "pipeline": pipelines,
        },
        {
            "name": "agf",
            "source": f"{source_prefix}agf",
            "kind": "seq2seq",
            "trust_remote_code": trust_remote_code,
            "prompts": PROMPTS_EN,
            "decoder_input_ids": [[1, 8, 9, 10]],
            "max_new_tokens": MAX_NEW_TOKENS,
            "pipeline": pipelines,
        },
    ]


def subprocess_env(hf_home: Path, endpoint: str | None = None) -> dict:
    """The test environment for a child process: offline unless `endpoint` is given, then online to it only."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HF_ENDPOINT", "HF_TOKEN")}
    env.update(HF_HOME=str(hf_home), HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false")
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if endpoint is not None:
        env.pop("HF_HUB_OFFLINE", None)
        env.pop("TRANSFORMERS_OFFLINE", None)
        env.update(HF_ENDPOINT=endpoint, HF_TOKEN="hf_fake")
    return env


def run_python(args: list[str], env: dict, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise AssertionError(f"{args[:2]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def run_loader(spec: dict, workdir: Path, env: dict) -> dict:
    """Run tests/hub_loader.py in a fresh isolated interpreter (`-I`: no PYTHONPATH, no user site, no cwd)."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_file, out_file = workdir / "spec.json", workdir / "out.pt"
    spec_file.write_text(json.dumps(spec))
    run_python(["-I", str(LOADER), str(spec_file), str(out_file)], env, cwd=workdir)
    return torch.load(out_file, weights_only=False)


def publish(workdir: str) -> None:
    """Body of the `published` fixture's subprocess (the package imported, HF_ENDPOINT = the fake Hub)."""
    from transformers import PreTrainedModel, Trainer, TrainingArguments, pipeline

    from plldr_hf import AgfPreTrainedModel, AgfTranslationPipeline, PldrllmPreTrainedModel, hub
    from plldr_hf.cli import main as cli_main
    from tests.hub_loader import GENERATION, compute_outputs, load

    torch.set_num_threads(1)
    out = Path(workdir)
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    pldr = tiny_pldrllm(len(tokenizer))
    agf = tiny_agf(len(tokenizer))
    models = {"pldrllm": pldr, "agf": agf}
    refs = {case["name"]: compute_outputs(models[case["name"]], tokenizer, case) for case in cases("", False)}
    refs["pldrllm"]["state_dict_keys"] = sorted(pldr.state_dict())
    generation = {**GENERATION, "max_new_tokens": MAX_NEW_TOKENS, "min_new_tokens": MAX_NEW_TOKENS}
    text_generation = pipeline("text-generation", model=pldr, tokenizer=tokenizer, device="cpu")
    translation = AgfTranslationPipeline(model=agf, tokenizer=tokenizer, device="cpu")
    for name, pipe in (("pldrllm", text_generation), ("agf", translation)):
        refs[name]["pipelines"] = {
            "single": pipe(PROMPTS_EN[0], **generation),
            "batch": pipe(PROMPTS_EN, **generation),
        }

    pldr_card = hub.ModelCardInfo(
        metrics=PLDR_METRICS, datasets=["tiny_shakespeare"], training={"learning_rate": 1e-3, "max_steps": 20}
    )
    agf_card = hub.ModelCardInfo(
        metrics=AGF_METRICS,
        datasets=["wmt17"],
        eval_dataset="wmt17",
        eval_dataset_config="de-en",
        metric_details={"bleu": "nrefs:1|case:mixed|tok:13a"},
    )
    commit = hub.push_to_hub(pldr, "org/pldr-collapsed", tokenizer=tokenizer, card=pldr_card)
    refs["commit_url"] = commit.commit_url
    hub.push_to_hub(agf, "org/agf", tokenizer=tokenizer, card=agf_card)
    refs["push_method_is_transformers"] = all(
        cls.push_to_hub is PreTrainedModel.push_to_hub for cls in (PldrllmPreTrainedModel, AgfPreTrainedModel)
    )
    pldr.push_to_hub("org/pldr-method", tags=["method-push"])

    folder = out / "agf_folder"
    agf.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    scores = {"bleu": 21.5, "chrf": 44.0, "accuracy": 0.5, "bleu_signature": "nrefs:1|bs:1000"}
    (folder / "test_results.json").write_text(json.dumps(scores))
    (folder / "checkpoint-1").mkdir()
    (folder / "checkpoint-1" / "junk.bin").write_bytes(b"not for the hub")
    refs["cli_rc"] = cli_main(["push", str(folder), "org/agf-cli", "--private", "--dataset", "wmt17"])

    args = TrainingArguments(
        output_dir=str(out / "trainer_out"),
        hub_model_id="org/agf-trainer",
        hub_token="hf_fake",
        report_to="none",
        use_cpu=True,
    )
    trainer = Trainer(model=agf, args=args, processing_class=tokenizer)
    hub.attach_model_card(trainer, hub.ModelCardInfo(metrics={"bleu": 9.75}))
    trainer.push_to_hub(language="de", license="mit", tags=["from-trainer"], finetuned_from="org/agf-base")
    torch.save(refs, out / "refs.pt")

    # the installed-package path: load what was pushed, without trust_remote_code
    torch.save(load({"mode": "package", "cases": cases("org/", False)}), out / "installed.pt")
