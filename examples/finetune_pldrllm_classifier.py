"""Fine-tune the released PLDR-LLM sequence-classification head with `Trainer` on local data, then classify with
`pipeline("text-classification")`.

The task is built from the embedded LibreOffice help pairs: is a paragraph English (0) or German (1)? The model is a
small randomly initialised PLDR-LLM with the head `score` and a SentencePiece tokenizer trained on the same pairs
(pass `--model DIR` to start from a released or trained checkpoint and its tokenizer instead, e.g. one converted with
`plldr-hf convert`, or `--tokenizer DIR` for another tokenizer such as a released model's).

    python examples/finetune_pldrllm_classifier.py --tiny          # CPU smoke run, seconds
    python examples/finetune_pldrllm_classifier.py --model DIR --max-steps 500 --output-dir runs/pldr-langid
"""

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="PLDR-LLM folder to start from (default: a small random model)")
    parser.add_argument(
        "--tokenizer",
        help="tokenizer folder (default: the --model folder's, else one trained on the embedded pairs)",
    )
    parser.add_argument("--output-dir", default="runs/pldr-langid")
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--train-pairs", type=int, default=400, help="LibreOffice pairs (each gives 2 examples)")
    parser.add_argument("--tiny", action="store_true", help="a few steps on a few examples (smoke run)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.max_steps, args.train_pairs = 30, 32

    import numpy as np
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments, pipeline

    import plldr_hf
    from plldr_hf.training.corpus import load_translation_dataset

    labels = {0: "English", 1: "German"}
    if args.tokenizer or args.model:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.model)
    else:
        from plldr_hf.training.tokenizers import train_sentencepiece_tokenizer

        pairs = load_translation_dataset("libreoffice")["train"]["translation"][:4000]
        tokenizer = train_sentencepiece_tokenizer([p[lang] for p in pairs for lang in ("en", "de")], vocab_size=1000)
    if args.model:
        model = AutoModelForSequenceClassification.from_pretrained(
            args.model, num_labels=2, id2label=labels, label2id={v: k for k, v in labels.items()}
        )
    else:
        config = plldr_hf.PldrllmConfig(
            vocab_size=len(tokenizer),
            hidden_size=64,
            num_attention_heads=4,
            head_dim=16,
            intermediate_size=170,
            num_hidden_layers=2,
            A_dff=24,
            num_reslayerA=2,
            max_position_embeddings=128,
            num_labels=2,
            id2label=labels,
            label2id={v: k for k, v in labels.items()},
        )
        model = plldr_hf.PldrllmForSequenceClassification(config)

    def examples(split, n):
        pairs = load_translation_dataset("libreoffice")[split].select(range(n))["translation"]
        texts = [p["en"] for p in pairs] + [p["de"] for p in pairs]
        enc = tokenizer(texts, truncation=True, max_length=64, padding="max_length")
        return Dataset.from_dict({**enc, "labels": [0] * n + [1] * n})

    train, test = examples("train", args.train_pairs), examples("validation", 50)

    def accuracy(prediction):
        return {"accuracy": float((np.argmax(prediction.predictions, -1) == prediction.label_ids).mean())}

    training = TrainingArguments(
        args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=16,
        learning_rate=2e-3,
        warmup_steps=max(1, args.max_steps // 10),
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
    )
    trainer = Trainer(model=model, args=training, train_dataset=train, eval_dataset=test, compute_metrics=accuracy)
    trainer.train()
    print(f"validation accuracy: {trainer.evaluate()['eval_accuracy']:.3f}")
    trainer.save_model(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    classifier = pipeline("text-classification", model=model.eval(), tokenizer=tokenizer)
    for text in ("Click the button to open the dialog.", "Klicken Sie auf die Schaltfläche, um den Dialog zu öffnen."):
        print(f"{text!r} → {classifier(text)[0]['label']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
