# ruff: noqa: E501 (pasted tracebacks and log lines are as long as the libraries made them)
"""Messages that the runtime-exception symptom (S18) used to swallow although their mechanism
names something more specific: an op whose inputs sit on two GPUs (a model spread over the
GPUs of one process), a shape check failing where a tensor-parallel slice meets a full tensor,
an attention reshape whose heads do not split over the ranks, and more below. Each paste is
read through `triage explain`; the symptom and root cause must be the mechanism's."""

from __future__ import annotations

import pytest

from tests.cli_runs import explained

# accelerate's device_map spread the model over the GPUs of one process; torch's device check
# names two GPUs
TWO_GPUS_IN_ONE_OP = """Traceback (most recent call last):
  File "/home/ana/eval.py", line 88, in <module>
    out = model.generate(**inputs, max_new_tokens=64)
  File "/opt/conda/lib/python3.10/site-packages/torch/nn/functional.py", line 2551, in layer_norm
    return torch.layer_norm(input, normalized_shape, weight, bias, eps, torch.backends.cudnn.enabled)
RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:2 and cuda:0! (when checking argument for argument weight in method wrapper_CUDA__native_layer_norm)"""

# DeepSpeed's hybrid engine fuses LoRA into a weight its inference containers hold sliced
TP_SLICE_MEETS_FULL = """Traceback (most recent call last):
  File "/home/ana/chat/step3_rlhf_finetuning/main.py", line 521, in main
    out = trainer.generate_experience(batch_prompt['prompt'], batch_prompt['prompt_att_mask'], step)
  File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/hybrid_engine.py", line 247, in generate
    self.fuse_lora_weight()
  File "/opt/conda/lib/python3.10/site-packages/deepspeed/module_inject/containers/features/hybrid_engine.py", line 67, in fuse_lora
    param.data += lora_scaling * torch.matmul(lora_left_weight.t(), lora_right_weight.t())
RuntimeError: The size of tensor a (2048) must match the size of tensor b (4096) at non-singleton dimension 0"""

# a tensor-parallel degree of 16 for a model of 8 KV heads: each rank holds half a head
HEADS_DO_NOT_SPLIT = """[rank3]: Traceback (most recent call last):
[rank3]:   File "/workspace/torchtitan/torchtitan/train.py", line 329, in main
[rank3]:     pred = model(input_ids)
[rank3]:   File "/workspace/torchtitan/torchtitan/models/llama/model.py", line 444, in forward
[rank3]:     h = layer(h, self.freqs_cis)
[rank3]: RuntimeError: shape '[1, 8192, -1, 128]' is invalid for input of size 524288"""

# (id, paste, symptom, root cause)
CASES = [
    ("two-gpus-in-one-op", TWO_GPUS_IN_ONE_OP, "S13", "R14"),
    ("tensor-parallel-slice-meets-full-tensor", TP_SLICE_MEETS_FULL, "S07", "R19"),
    ("attention-heads-do-not-split-over-tp", HEADS_DO_NOT_SPLIT, "S07", "R12"),
]


@pytest.mark.parametrize(
    ("text", "symptom", "cause"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_mechanism_names_the_symptom_and_cause(text: str, symptom: str, cause: str) -> None:
    d = explained(text)
    assert d["symptoms"] and d["symptoms"][0]["id"] == symptom, d["summary"]
    assert d["root_causes"] and d["root_causes"][0]["id"] == cause, d["summary"]
