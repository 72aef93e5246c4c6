"""The G-cache of a learned-G PLDR-LLM: each layer's G state kept next to its keys and values.

The papers' inference mode (arXiv 2502.13502, section on the KV and G caches) computes G once from the prompt at
prefill and reuses it for every new token. `PldrllmCacheLayer` holds that state in the cache layer, so it follows
beam reordering, batch expansion and selection, and resets with the cache.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

from .plga import PlgaState


class PldrllmCacheLayer(DynamicLayer):
    """A `DynamicLayer` (K, V) that also holds the layer's G-cache, a `PlgaState` of tensors (B or 1, H, d, d).

    Keeping the G state in the cache layer (not on the model) makes it follow beam reordering, batch expansion and
    selection, and resets it with the cache.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.pldr_state: PlgaState | None = None

    def reset(self) -> None:
        super().reset()
        self.pldr_state = None

    def _map_state(self, fn) -> None:
        # a state of batch size 1 (cache_first_G) is shared by every row and needs no reordering
        if self.pldr_state is not None and self.pldr_state.a.shape[0] > 1:
            self.pldr_state = self.pldr_state.map(fn)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        self._map_state(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        self._map_state(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        self._map_state(lambda t: t[indices, ...])


def install_g_cache_layers(cache: Cache, num_layers: int) -> None:
    """Give a stock `DynamicCache` G-cache layers; K/V already stored are kept (their G is then recomputed once)."""
    layers = cache.layers
    for idx in range(num_layers):
        if idx < len(layers) and isinstance(layers[idx], PldrllmCacheLayer):
            continue
        if idx < len(layers) and type(layers[idx]) is not DynamicLayer:
            raise ValueError(
                f"PLDR-LLM with a learned G needs a DynamicCache (its G-cache lives in the cache layers); got "
                f"{type(layers[idx]).__name__} in layer {idx}. StaticCache and other caches need a fixed G: "
                f"call `model.collapse()` or use a `custom_G_type` model."
            )
        new_layer = PldrllmCacheLayer()
        if idx < len(layers):
            old = layers[idx]
            new_layer.__dict__.update({k: v for k, v in old.__dict__.items() if k != "pldr_state"})
            layers[idx] = new_layer
        else:
            layers.append(new_layer)
