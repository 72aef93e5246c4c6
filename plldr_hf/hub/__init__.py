"""The Hugging Face Hub side of the package: model cards (`cards.py`) and pushes (`push.py`).

Beside the training code, never imported by the model families. `push_to_hub(model, repo_id, ...)` here publishes a
complete repo (card, tokenizer, custom pipelines); the models' own `push_to_hub` method is transformers', unchanged.
"""

from plldr_hf.hub.cards import (
    CARD_INFO_FILE,
    ModelCardInfo,
    card_info_from_folder,
    family_of,
    model_card_data,
    render_model_card,
    template_path,
)
from plldr_hf.hub.push import (
    HubPushError,
    attach_model_card,
    finalize_folder,
    prepare_folder,
    push_folder,
    push_to_hub,
    upload_folder,
)
from plldr_hf.loading import load_folder


__all__ = [
    "CARD_INFO_FILE",
    "HubPushError",
    "ModelCardInfo",
    "attach_model_card",
    "card_info_from_folder",
    "family_of",
    "finalize_folder",
    "load_folder",
    "model_card_data",
    "prepare_folder",
    "push_folder",
    "push_to_hub",
    "render_model_card",
    "template_path",
    "upload_folder",
]
