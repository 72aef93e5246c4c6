"""`plldr-hf convert PTH OUT_DIR`: a reference-code `.pth` checkpoint → a released-format PLDR-LLM folder."""

import argparse

from plldr_hf_cli.arguments import fail, positive_int


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "convert",
        help="convert a reference PLDR-LLM .pth checkpoint into a released-format folder",
        description=(
            "Load a .pth saved by the reference PyTorch code (weights_only=True), read every size off its tensor "
            "shapes, and write config.json, model.safetensors and generation_config.json (and the tokenizer, with "
            "--tokenizer) in the released Hugging Face format; AutoModelForCausalLM loads the folder strictly. "
            "Nothing is written when the file is wrong or incomplete."
        ),
    )
    parser.add_argument("pth", metavar="PTH", help="checkpoint saved by the reference code (model_state_dict inside)")
    parser.add_argument("output_dir", metavar="OUT_DIR", help="new folder for the converted model")
    parser.add_argument(
        "--max-position-embeddings",
        type=positive_int,
        required=True,
        metavar="N",
        help="RoPE table length, the training script's max_seq_len (required: the .pth does not store it; the "
        "released 110M models use 1024)",
    )
    parser.add_argument(
        "--reference-rope",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="interleaved RoPE of the v51 reference code (default); --no-reference-rope for the NeoX form of v52",
    )
    parser.add_argument("--tokenizer", metavar="FILE", help="SentencePiece tokenizer.model to save with the model")
    parser.add_argument(
        "--predefined-g",
        metavar="FILE",
        help="reference predefined-G pickle: write the fixed-G format (custom_G_type='external') with this G_LM",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    import pickle

    from plldr_hf.models.pldrllm.conversion import convert_pth

    try:
        model = convert_pth(
            args.pth,
            args.output_dir,
            max_position_embeddings=args.max_position_embeddings,
            reference_rope=args.reference_rope,
            tokenizer=args.tokenizer,
            predefined_g=args.predefined_g,
        )
    except (FileNotFoundError, FileExistsError, ValueError, pickle.UnpicklingError) as error:
        return fail("convert", error)
    cfg = model.config
    print(
        f"converted {args.pth} → {args.output_dir}: {cfg.num_hidden_layers} layers, width {cfg.hidden_size}, "
        f"{cfg.num_attention_heads} heads × {cfg.head_dim}, vocab {cfg.vocab_size}, max_position_embeddings "
        f"{cfg.max_position_embeddings}" + (", fixed G" if cfg.custom_G_type else "")
    )
    return 0
