"""Train and evaluate an AGF translation model through the Python API (what `plldr-hf train agf` does).

Steps: the run's options (`TranslationOptions`, a preset plus changes) → `train` (data, joint tokenizer, `Seq2SeqTrainer` run, test scores)
→ reload the saved folder with the plain transformers Auto classes → translate and rescore with
`evaluate_translation`. Default data: the LibreOffice help pairs embedded in the package (offline); `--dataset
wmt17` downloads WMT17 en-de from the Hub, and local .json / .jsonl / .parquet files work too.

    python examples/train_agf_translation.py --tiny                       # CPU, under a minute
    python examples/train_agf_translation.py --position agf --pcmv --size small --max-steps 2000
    python examples/train_agf_translation.py --position sinusoidal --dataset wmt17 --max-steps 100000  # GPU

Several GPUs or processes, unchanged (Trainer picks up the launcher's environment):

    torchrun --nproc_per_node 4 examples/train_agf_translation.py --pcmv --dataset wmt17 --max-steps 100000
    accelerate launch --num_processes 4 examples/train_agf_translation.py --pcmv --dataset wmt17
"""

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--position", default="agf", help="agf, sinusoidal, rope, alibi, kerple_log, t5, ...")
    parser.add_argument("--pcmv", action="store_true", help="PCM-V (AGF only)")
    parser.add_argument("--size", default="small", choices=("tiny", "small", "base"))
    parser.add_argument("--dataset", nargs="+", default=["libreoffice"])
    parser.add_argument("--max-steps", type=int, default=2000)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--tiny", action="store_true", help="tiny model, small data, 30 steps: a CPU smoke run")
    args = parser.parse_args(argv)

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    import plldr_hf  # noqa: F401  (registers model_type "agf" with the Auto classes)
    from plldr_hf.training.options import TranslationOptions
    from plldr_hf.training.run import train
    from plldr_hf.training.translation_trainer import evaluate_translation, format_scores

    output_dir = args.output_dir or f"runs/example-agf-{args.position}{'-pcmv' if args.pcmv else ''}"
    # 1. every setting of the run: a preset (the CPU smoke run, or a named size) with what this script changes;
    # the recipe (Transformer-base, arXiv 1706.03762 §5: inverse-sqrt schedule, Adam β2 0.98) is the default
    settings = dict(position_encoding=args.position, pcmv=args.pcmv, dataset=args.dataset, output_dir=output_dir)
    if args.tiny:
        options = TranslationOptions.from_name("tiny", **settings)
    else:
        steps = dict(
            max_steps=args.max_steps, eval_steps=500, save_steps=500, warmup_steps=min(1000, args.max_steps // 5)
        )
        options = TranslationOptions.from_name(args.size, max_eval_samples=500, **steps, **settings)

    # 2. data + tokenizer + Seq2SeqTrainer + test-set scores (in-domain "test" and out-of-domain "gnome")
    run = train(options)
    for split, scores in run.scores.items():
        print(format_scores(scores, title=f"{split}: {scores['segments']} segments"))

    # 3. the saved folder is an ordinary transformers model + tokenizer
    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir)
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    sources = ["Click OK to close the dialog.", "Choose Format - Cells."]
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    for source, output in zip(sources, translator(sources, num_beams=options.num_beams, max_new_tokens=64)):
        print(f"{source} -> {output[0]['translation_text']}")

    # 4. rescoring the reloaded model gives the numbers printed in step 2
    test = run.datasets["test"]
    length = options.max_target_length
    again = evaluate_translation(
        model, tokenizer, test, num_beams=options.num_beams, max_source_length=length, max_target_length=length
    )
    print(f"reloaded: BLEU {again['bleu']:.2f} chrF {again['chrf']:.2f} accuracy {100 * again['accuracy']:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
