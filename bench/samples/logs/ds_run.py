"""A tiny real DeepSpeed run on CPU (2 ranks, gloo): the engine's own logger lines."""

import deepspeed
import torch
from deepspeed.utils.logging import set_log_level_from_string

# DeepSpeed 0.19 logs at WARNING by default; older releases (and most logs in the wild) at INFO
set_log_level_from_string("info")

deepspeed.init_distributed(dist_backend="gloo")
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
config = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 2,
    "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
    "wall_clock_breakdown": True,
    "zero_optimization": {"stage": 0},
}
engine, _, _, _ = deepspeed.initialize(
    model=model, model_parameters=model.parameters(), config=config
)
g = torch.Generator().manual_seed(0)
for _step in range(40):
    x, y = torch.randn(4, 32, generator=g), torch.randn(4, 1, generator=g)
    loss = torch.nn.functional.mse_loss(engine(x), y)
    engine.backward(loss)
    engine.step()
