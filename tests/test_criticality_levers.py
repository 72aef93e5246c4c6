"""The lever grid (`benchmarks/criticality_levers.py`): its cells and the PLGA-only weight decay. The grid itself runs
for about half an hour; its results are in `benchmarks/results/criticality_levers.md`."""

from types import SimpleNamespace

import pytest
import torch

from benchmarks import criticality_levers as levers
from tests.utils import tiny_model


def test_every_cell_has_its_own_key_and_moves_only_its_lever():
    cells = levers.grid()
    assert len({cell.key for cell in cells}) == len(cells)
    assert levers.grid(part=1) + levers.grid(part=2) + levers.grid(part=3) == cells
    for cell in cells:
        moved = {name for name, value in vars(cell).items() if value != getattr(levers.BASE, name)} - {"lever"}
        if cell.lever in ("base",):
            assert moved <= {"seed"}
        elif cell.lever in ("warmup", "context"):
            assert moved <= {"warmup_steps", "learning_rate", "block_size"}
        elif cell.lever.startswith("at_lr_"):
            assert (
                cell.learning_rate == 1e-2
                and len(moved - {"learning_rate", "seed"}) <= 1
                and moved != {"learning_rate"}
            )
        else:
            assert len(moved) == 1, (cell.key, moved)
        assert cell.setting  # what the table shows
    quick = levers.grid(steps_scale=0.01)
    assert all(c.steps >= 2 and c.eval_every >= 1 for c in quick)


@pytest.mark.parametrize("weight_decay", [0.0, 5.0])
def test_plga_weight_decay_shrinks_only_the_plga_tensors_and_integrates_the_rate(weight_decay):
    model = tiny_model()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    callback = levers.plga_weight_decay_callback(weight_decay)
    scheduler = SimpleNamespace(get_last_lr=lambda: [0.01])
    for step in (1, 2):
        callback.on_step_end(None, SimpleNamespace(global_step=step), None, model=model, lr_scheduler=scheduler)
    assert callback.integrated_lr == pytest.approx(0.02) and callback.by_step[2] == pytest.approx(0.02)
    shrink = (1 - 0.01 * weight_decay) ** 2
    plga = [name for name in before if name.rsplit(".", 1)[-1] in levers.PLGA_TENSORS]
    assert len(plga) == 5 * model.config.num_hidden_layers
    for name, parameter in model.named_parameters():
        expected = before[name] * shrink if name in plga else before[name]
        torch.testing.assert_close(parameter.detach(), expected, rtol=1e-6, atol=0)
