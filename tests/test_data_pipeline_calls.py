# ruff: noqa: E501 (pasted errors are as long as the libraries made them)
"""A data pipeline calls the callables it was handed (a cut or sample transform, a collate
function) with its own protocol's arguments: a `TypeError` about `__call__()`'s arguments on
that call line is the user's transform not fitting the pipeline (S08, R27), not two releases
of a library that disagree (S03, R01), which the same words mean between two libraries' own
functions."""

from __future__ import annotations

import pytest

from tests.cli_runs import assert_top, explained

# lhotse's K2SpeechRecognitionDataset.__getitem__ applies each cut transform as `tnfm(cuts)`
LHOTSE_CUT_TRANSFORM = """Traceback (most recent call last):
  File "/home/me/icefall/egs/librispeech/ASR/conformer_ctc/train.py", line 1134, in scan_pessimistic_batches_for_oom
    batch = train_dl.dataset[cuts]
  File "/home/me/miniconda3/envs/asr/lib/python3.8/site-packages/lhotse/dataset/speech_recognition.py", line 109, in __getitem__
    cuts = tnfm(cuts)
TypeError: __call__() missing 1 required positional argument: 'sampling_rate'"""

# torchvision's Compose calls every member as `t(img)`
TORCHVISION_COMPOSE_MEMBER = """Traceback (most recent call last):
  File "/workspace/train.py", line 77, in <module>
    for images, labels in loader:
  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 631, in __next__
    data = self._next_data()
  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/_utils/fetch.py", line 51, in <listcomp>
    data = [self.dataset[idx] for idx in possibly_batched_index]
  File "/opt/conda/lib/python3.10/site-packages/torchvision/datasets/folder.py", line 231, in __getitem__
    sample = self.transform(sample)
  File "/opt/conda/lib/python3.10/site-packages/torchvision/transforms/transforms.py", line 95, in __call__
    img = t(img)
TypeError: __call__() takes 2 positional arguments but 3 were given"""

# DeepSpeed calling its own optimizer class with another release's arguments
LIBRARY_TO_LIBRARY = """Traceback (most recent call last):
  File "/workspace/train.py", line 30, in <module>
    engine, _, _, _ = deepspeed.initialize(model=model, config=cfg)
  File "/opt/venv/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1300, in _configure_fp16_optimizer
    optimizer = FP16_Optimizer(optimizer, deepspeed=self)
TypeError: __init__() missing 1 required positional argument: 'convert_fp16'"""


@pytest.mark.parametrize("paste", [LHOTSE_CUT_TRANSFORM, TORCHVISION_COMPOSE_MEMBER])
def test_a_transform_that_does_not_fit_the_pipeline_is_a_data_pipeline_defect(paste: str) -> None:
    d = explained(paste, "--no-embed")
    assert_top(d, "symptoms", "S08")
    assert_top(d, "root_causes", "R27")
    assert_top(d, "fix_patterns", "F6")


def test_two_releases_of_libraries_that_disagree_stay_a_version_mismatch() -> None:
    d = explained(LIBRARY_TO_LIBRARY, "--no-embed")
    assert_top(d, "root_causes", "R01")
