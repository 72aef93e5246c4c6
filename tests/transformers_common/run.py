"""Run transformers' own common model tests (`ModelTesterMixin`, `ConfigTester`) on both families (opt-in).

    python tests/transformers_common/run.py [--sdist transformers-X.tar.gz] [-k EXPR]

The test mixins are not in the transformers wheel; they ship in its source distribution. This script takes
`tests/test_modeling_common.py` and `tests/test_configuration_common.py` from the sdist of the installed version
(downloading it with `pip download transformers==VERSION --no-binary :all: --no-deps` when `--sdist` is not given),
writes stand-ins for the three test-suite modules the sdist lacks (`exporters/test_export.py`,
`generation/test_utils.py`: empty mixins; `utils/test_configuration_utils.py`: a few common config kwargs), and runs
`common_pldrllm.py` and `common_agf.py` with pytest. It exits 0 when every failure is listed in `EXPECTED_FAILURES`
(tests that are wrong for these architectures by design, each with its reason), and prints the counts per family.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path


HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# (family, test-name pattern) → why the test does not hold for this architecture; a listed test may also pass
EXPECTED_FAILURES: dict[tuple[str, str], str] = {
    ("pldrllm", r"test_keep_in_fp32_modules"): (
        "the metric learner and PLGA tensors are in both lists on purpose: the quantizers add only "
        "`_keep_in_fp32_modules` to their skip list (transformers/quantizers/base.py get_modules_to_not_convert), and "
        "float16 and bfloat16 loads upcast only `_keep_in_fp32_modules_strict`; the mixin's first assertion refuses "
        "the overlap, so tests/models/pldrllm/test_precision.py (both dtypes) and test_quantization.py check what the "
        "rest of this test would"
    ),
    ("pldrllm", r"test_eager_matches_sdpa_inference_\d+_\w+_no_attn_mask\w*"): (
        "without an attention mask PLDR-LLM reads pad_token_id (0) as padding, so that lm-evaluation-harness's "
        "unmasked right-padded batches score like batch 1 (README, 'Padding, batching and packing'); the mixin's "
        "random ids and batch extension contain id 0, and it compares every position, also these padding outputs, "
        "which differ between backends where a query row is fully masked"
    ),
    ("pldrllm", r"test_eager_matches_sdpa_inference_\d+_fp32_\w+_sdpa_kernels"): (
        "float32, learned G: one layer's eager and SDPA outputs agree to 1e-6 (tests/models/pldrllm/"
        "test_modeling_pldrllm.py::test_eager_and_sdpa_agree), but the next layer's Gram matrix and the power law "
        "A_LM^P with random exponents amplify that rounding: over 60 seeds of this tester's config with left "
        "padding the eager-vs-SDPA difference of the last hidden state has a median max |diff| of 2.0e-5 (p90 "
        "1.2e-4, max 7.5e-4), the same to the last digit before and after the model moved into sibling files; the "
        "mixin's per-row allclose(atol 1e-6, rtol 1e-4) then fails for some of its random inputs: one such "
        "variant failed in each of the 2 full runs after the move, none in 3 runs before, and each passes when run "
        "alone; the per-seed differences are bit-identical before and after"
    ),
    ("pldrllm", r"test_(eager|sdpa)_padding_matches_padding_free_with_position_ids"): (
        "bfloat16 by design of the test (padded batch vs the same sequences packed into one row, assert_close with "
        "rtol = atol = bf16 eps 0.0078): the two calls run GEMMs of different shapes, which round differently in "
        "bf16, and PLDR-LLM's reference initialisation gives logits about 7x larger than an equal-size Llama's "
        "(mean |logit| 0.57 vs 0.08), so the same relative rounding is 2 or more bf16 ulps of a logit. Measured over "
        "40 seeds of this tester's config (tools/padding_free_precision.py): learned G fails the check in 26/40 "
        "(median max |diff| 1.9e-2, max 0.54: the metric learner amplifies the tail), collapsed (fixed G, no metric "
        "learner) 25/40 (median 1.6e-2, max 2.9e-2), an equal-size Llama 0/40 (median 2.0e-3); in float32 padded "
        "and packed agree to 8.2e-5 (learned G) and 1.1e-6 (collapsed), and fp16 with a fixed G passes 40/40"
    ),
    ("pldrllm", r"test_eager_matches_sdpa_inference_\d+_(fp16|bf16)_\w*"): (
        "half precision: a random-weight metric learner amplifies the rounding of the fp16/bf16 queries into G "
        "(the PLGA maths runs in float32, its input does not), 1-8% mean relative at the last hidden state, beyond "
        "the mixin's 0.5-1% tolerance; float32 passes"
    ),
}

STANDINS = {
    "exporters/__init__.py": "",
    "exporters/test_export.py": (
        '"""Stand-in: the sdist lacks tests/exporters; export tests are not part of this suite."""\n\n\n'
        "class ExportTesterMixin:\n    pass\n"
    ),
    "generation/__init__.py": "",
    "generation/test_utils.py": (
        '"""Stand-in: the sdist lacks tests/generation; generation is covered by the package\'s own tests."""\n\n\n'
        "class GenerationTesterMixin:\n    pass\n"
    ),
    "utils/__init__.py": "",
    "utils/test_configuration_utils.py": (
        '"""Stand-in for the config kwargs that ConfigTester.check_config_arguments_init sets and reads back."""\n\n'
        "config_common_kwargs = {\n"
        '    "return_dict": False,\n    "output_hidden_states": True,\n    "output_attentions": True,\n'
        '    "dtype": "float16",\n    "tie_word_embeddings": False,\n    "chunk_size_feed_forward": 5,\n'
        '    "architectures": ["BertModel"],\n    "finetuning_task": "translation",\n'
        '    "id2label": {0: "label"},\n    "label2id": {"label": "0"},\n    "problem_type": "regression",\n'
        "}\n"
    ),
}


def prepare(sdist: Path | None, folder: Path) -> Path:
    """Extract the two common test modules into `folder/hf_common_tests` (a package) with the stand-ins."""
    import transformers

    if sdist is None:
        download = folder / "sdist"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"transformers=={transformers.__version__}",
                "--no-binary",
                ":all:",
                "--no-deps",
                "--no-build-isolation",
                "-q",
                "-d",
                str(download),
            ],
            check=True,
        )
        sdist = next(download.glob("transformers-*.tar.gz"))
    package = folder / "hf_common_tests"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            name = member.name.split("/", 1)[-1]
            if name in ("tests/test_modeling_common.py", "tests/test_configuration_common.py"):
                source = archive.extractfile(member).read()
                (package / Path(name).name).write_bytes(source)
    for relative, text in STANDINS.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if not (package / "test_modeling_common.py").is_file():
        raise SystemExit(f"{sdist} holds no tests/test_modeling_common.py")
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sdist", type=Path, help="transformers source distribution (.tar.gz) of the installed version"
    )
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="plldr_hf_common_"))
    prepare(args.sdist, folder)
    report = folder / "report.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "python_files=common_*.py",
        "-o",
        "addopts=",
        # the package's own test settings silence FutureWarning; the deprecation tests read them
        "-o",
        "filterwarnings=default",
        f"--junitxml={report}",
        "-rf",
        str(HERE / "common_pldrllm.py"),
        str(HERE / "common_agf.py"),
    ]
    if args.keyword:
        command += ["-k", args.keyword]
    env = {
        "PYTHONPATH": f"{folder}:{REPO}",
        **{k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"},
    }
    subprocess.run(command, env=env, cwd=REPO)
    counts: dict[str, dict[str, int]] = {}
    unexpected = []
    for case in ET.parse(report).getroot().iter("testcase"):
        family = "pldrllm" if "Pldrllm" in case.get("classname", "") else "agf"
        outcome = "passed"
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        counts.setdefault(family, {"passed": 0, "failed": 0, "skipped": 0})[outcome] += 1
        name = re.sub(r"\[.*\]$", "", case.get("name"))
        expected = any(f == family and re.fullmatch(pattern, name) for f, pattern in EXPECTED_FAILURES)
        if outcome == "failed" and not expected:
            unexpected.append(f"{case.get('classname')}::{case.get('name')}")
    for family, c in sorted(counts.items()):
        print(f"{family}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped")
    for (family, pattern), reason in EXPECTED_FAILURES.items():
        print(f"listed ({family}) {pattern}: {reason}")
    if unexpected:
        print("unexpected failures:\n  " + "\n  ".join(unexpected))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
