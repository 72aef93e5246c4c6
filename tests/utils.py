"""Shared assertion helpers and runner functions for the model tests."""

import torch


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """`torch.testing.assert_close` with a message that reports the max and mean absolute difference."""
    ref, out = ref.detach(), out.detach()
    assert ref.shape == out.shape, f"{name}: shape {tuple(out.shape)} != expected {tuple(ref.shape)}"
    diff = (ref.double() - out.double()).abs()
    msg = (
        f"{name}: max |diff| {diff.max().item():.3e}, mean |diff| {diff.mean().item():.3e} (atol {atol}, rtol {rtol})"
    )
    torch.testing.assert_close(out.to(ref.dtype), ref, atol=atol, rtol=rtol, msg=msg)
