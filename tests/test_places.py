"""Where the exception happened decides: the frames of the whole traceback (a cut one too, a
faulthandler dump, a pasted py-spy stack) place a failure in its stage (`rules/places.yaml`)."""

from __future__ import annotations

from typing import Any

from tests.cli_runs import explained
from triage.knowledge import places

# faulthandler's format (`line N in f`, most recent call first), the paste cut before any
# exception line: a rank that waited inside DeepSpeed's checkpoint-tag all-reduce
SAVE_TAG_WAIT = """\
  File "/opt/py/site-packages/deepspeed/runtime/engine.py", line 3021 in _checkpoint_tag_validation
  File "/opt/py/site-packages/deepspeed/runtime/engine.py", line 3050 in save_checkpoint
  File "/opt/py/site-packages/transformers/trainer.py", line 2389 in _save_checkpoint
  File "/opt/py/site-packages/transformers/trainer.py", line 2302 in _maybe_log_save_evaluate"""

# the last frame is torch's writer, not a save function: the outer frames place it
SAVE_DEEP_CUT = """Traceback (most recent call last):
  File "/home/u/run_clm.py", line 88, in <module>
    trainer.train()
  File "/opt/py/site-packages/transformers/trainer.py", line 2745, in _save_checkpoint
    self._save_optimizer_and_scheduler(output_dir)
  File "/opt/py/site-packages/torch/serialization.py", line 618, in save
    with _open_zipfile_writer(f) as opened_zipfile:
  File "/opt/py/site-packages/torch/serialization.py", line 492, in __init__
    super().__init__(torch._C.PyTorchFileWriter(self.name))"""

# a pasted py-spy stack cut mid-path: the main thread waits in backward
BACKWARD_WAIT = 'Thread 2211 (idle): "MainThread"\n    backward (torch/autograd/__ini'

# the same save frames, but the exception was raised by the user's call: not the tag wait
SAVE_RAISED = """Traceback (most recent call last):
  File "/home/u/train.py", line 41, in <module>
    engine.save_checkpoint(args.out)
  File "/opt/py/site-packages/deepspeed/runtime/engine.py", line 3050, in save_checkpoint
    self._checkpoint_tag_validation(tag)
  File "/opt/py/site-packages/deepspeed/runtime/engine.py", line 3021, in _checkpoint_tag_validation
    bhash = torch.ByteTensor([s_hash.digest()]).flatten().to(self.device)
TypeError: can only concatenate str (not "int") to str"""


def test_a_stack_cut_inside_deepspeeds_checkpoint_tag_check_is_a_hang_of_the_save() -> None:
    d = explained(SAVE_TAG_WAIT, "--no-embed")
    assert d["stage"]["id"] == "ST5"
    assert d["root_causes"][0]["id"] == "R08", d["summary"]
    fix = d["fix_patterns"][0]
    assert fix["id"] == "F6" and "every rank" in fix["actions"][0]


def test_a_traceback_cut_below_save_checkpoint_is_a_checkpoint_save() -> None:
    d = explained(SAVE_DEEP_CUT, "--no-embed")
    assert d["symptoms"][0]["id"] == "S28", d["summary"]
    assert d["stage"]["id"] == "ST5"


def test_a_pasted_stack_waiting_in_backward_points_at_uneven_batches() -> None:
    d = explained(BACKWARD_WAIT, "--no-embed")
    assert d["root_causes"][0]["id"] == "R09", d["summary"]
    assert "drop_last=True" in d["fix_patterns"][0]["actions"][0]


def test_a_stack_of_no_known_rank_is_not_said_to_be_this_ranks() -> None:
    action = explained(BACKWARD_WAIT, "--no-embed")["fix_patterns"][0]["actions"][0]
    assert action.startswith("If one rank ran an extra or missing step"), action
    assert "rank {rank}" not in action.lower() and "rank None" not in action


def test_an_exception_raised_inside_the_save_is_not_read_as_a_wait() -> None:
    d = explained(SAVE_RAISED, "--no-embed")
    assert d["root_causes"][0]["id"] != "R08", d["summary"]
    assert d["symptoms"][0]["id"] == "S28" and d["stage"]["id"] == "ST5", d["summary"]


def _save_place(**over: Any) -> dict[str, Any]:
    """A checkpoint-save place as rules/places.yaml writes one, with `over` replacing keys."""
    return {
        "id": "checkpoint-save",
        "title": "t",
        "sources": ["s"],
        "frames": [{"function": "save_checkpoint"}],
        "concludes": {"symptom": {"S28": 0.6}, "stage": {"ST5": 0.8}},
        "examples": {"match": ["x/engine.py:save_checkpoint"]},
        **over,
    }


def test_a_place_whose_example_does_not_match_is_refused() -> None:
    problems: list[tuple[str, str]] = []
    body = {
        "places": [
            _save_place(
                examples={
                    "match": ["x/trainer.py:_load_from_checkpoint"],
                    "no_match": ["x/engine.py:save_checkpoint"],
                }
            ),
            {
                "id": "no-stage",
                "title": "t",
                "sources": ["s"],
                "frames": [{"file": "a"}],
                "concludes": {"symptom": {"S99": 0.5}},
                "examples": {"match": ["a:f"]},
            },
        ]
    }
    places.build(body, lambda item, msg: problems.append((item, msg)), False)
    said = " | ".join(f"{i}: {m}" for i, m in problems)
    assert "example does not match" in said and "no_match example matches" in said
    assert "S99 is not a taxonomy id" in said and "a place says which stage" in said


def test_an_action_given_as_a_list_is_refused_not_printed_as_one() -> None:
    """An action written as a YAML list used to reach the report as "['check ...', '...']"."""
    problems: list[tuple[str, str]] = []
    body = {"places": [_save_place(actions={"F5": ["free disk space", "then resume"]})]}
    built = places.build(body, lambda item, msg: problems.append((item, msg)), False)
    said = " | ".join(f"{i}: {m}" for i, m in problems)
    assert "actions.F5: must be one sentence (a string), not list" in said
    assert not any("[" in a for p in built.places for a in p.actions.values())


# vLLM's logger puts `ERROR date time file:line] ` before every line of the traceback it logs:
# the parser reads each line as an error line of its own
VLLM_PREFIXED = """\
INFO 03-02 10:11:12 config.py:510] This model supports multiple tasks: {'generate'}.
ERROR 03-02 10:11:40 engine.py:366] 'model.layers.0.self_attn.qkv_proj.weight_scale'
ERROR 03-02 10:11:40 engine.py:366] Traceback (most recent call last):
ERROR 03-02 10:11:40 engine.py:366]   File "/usr/lib/py/vllm/engine/multiprocessing/engine.py", \
line 357, in run_mp_engine
ERROR 03-02 10:11:40 engine.py:366]     engine = MQLLMEngine.from_engine_args(engine_args=args,
ERROR 03-02 10:11:40 engine.py:366]   File "/usr/lib/py/vllm/worker/worker.py", line 183, \
in load_model
ERROR 03-02 10:11:40 engine.py:366]     self.model_runner.load_model()
ERROR 03-02 10:11:40 engine.py:366]   File "/usr/lib/py/vllm/model_executor/models/mixtral.py", \
line 460, in load_weights
ERROR 03-02 10:11:40 engine.py:366]     param = params_dict[name]
ERROR 03-02 10:11:40 engine.py:366] KeyError: 'model.layers.0.self_attn.qkv_proj.weight_scale'"""

# deepspeed.initialize(training_data=...) builds the DataLoader in DeepSpeedEngine.deepspeed_io
DEEPSPEED_IO = """Traceback (most recent call last):
  File "/home/u/train.py", line 88, in <module>
    engine, _, loader, _ = deepspeed.initialize(args=args, model=model, training_data=dataset)
  File "/opt/py/site-packages/deepspeed/__init__.py", line 181, in initialize
    engine = DeepSpeedEngine(args=args,
  File "/opt/py/site-packages/deepspeed/runtime/engine.py", line 301, in __init__
    self.training_dataloader = self.deepspeed_io(training_data)
  File "/opt/py/site-packages/deepspeed/runtime/engine.py", line 1689, in deepspeed_io
    rank = self.mpu.get_data_parallel_rank()
AttributeError: 'NoneType' object has no attribute 'get_data_parallel_rank'"""

# a converter script of the user's own, named for what it does, under torch's excepthook prefix
CONVERTER = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/tools/hf_to_mcore.py", line 212, in <module>
[rank0]:     main()
[rank0]:   File "/workspace/tools/hf_to_mcore.py", line 198, in main
[rank0]:     state = build_state(hf_model, args)
[rank0]:   File "/workspace/tools/hf_to_mcore.py", line 143, in build_state
[rank0]:     qkv = hf_state["model.layers.0.self_attn.qkv.weight"]
[rank0]: KeyError: 'model.layers.0.self_attn.qkv.weight'"""

# cut before its exception line, inside the import of an installed package
IMPORT_CUT = """>>> import deepspeed
Traceback (most recent call last):
  File "<stdin>", line 1, in <module>
  File "/opt/py/site-packages/deepspeed/__init__.py", line 22, in <module>
    from . import ops
  File "/opt/py/site-packages/deepspeed/ops/__init__.py", line 6, in <module>
    from . import adam
  File "/opt/py/site-packages/deepspeed/ops/adam/__init__.py", line 6, in <module>
    from .cpu_adam import DeepSpeedCPUAdam"""


def test_a_traceback_under_vllms_log_prefix_is_placed_by_its_frames() -> None:
    d = explained(VLLM_PREFIXED, "--no-embed")
    placed = [e for e in d["evidence"] if e["why"] == "frames:model-init"]
    assert placed and "in load_weights" in placed[0]["text"], d["evidence"]
    assert d["symptoms"][0]["id"] == "S06" and d["stage"]["id"] == "ST2", d["summary"]


def test_a_dataset_deepspeed_could_not_load_is_a_data_loading_error() -> None:
    d = explained(DEEPSPEED_IO, "--no-embed")
    assert d["symptoms"][0]["id"] == "S08", d["summary"]
    assert d["stage"]["id"] == "ST2"


def test_a_failing_checkpoint_converter_is_a_conversion_failure() -> None:
    d = explained(CONVERTER, "--no-embed")
    assert d["symptoms"][0]["id"] == "S30", d["summary"]
    assert d["stage"]["id"] == "ST5"


def test_a_stack_cut_inside_a_librarys_import_is_placed_at_the_import() -> None:
    d = explained(IMPORT_CUT, "--no-embed")
    placed = [e for e in d["evidence"] if e["why"] == "frames:library-import"]
    assert placed and "cpu_adam" not in placed[0]["text"], d["evidence"]
    assert d["symptoms"][0]["id"] == "S02" and d["stage"]["id"] == "ST1", d["summary"]


# Lightning's checkpoint callback saving the top-k: the exception's class (an AttributeError in
# library code) would call it a training-step exception; the frames say it was the save
LIGHTNING_SAVE_RAISED = """Traceback (most recent call last):
  File "/workspace/train.py", line 77, in <module>
    trainer.fit(model, datamodule=dm)
  File "/opt/py/site-packages/lightning/pytorch/trainer/trainer.py", line 1035, in _run_stage
    self.fit_loop.run()
  File "/opt/py/site-packages/lightning/pytorch/callbacks/model_checkpoint.py", line 303, \
in on_train_epoch_end
    self._save_topk_checkpoint(trainer, monitor_candidates)
  File "/opt/py/site-packages/lightning/pytorch/callbacks/model_checkpoint.py", line 383, \
in _save_topk_checkpoint
    self._save_monitor_checkpoint(trainer, monitor_candidates)
  File "/opt/py/site-packages/lightning/pytorch/callbacks/model_checkpoint.py", line 703, \
in _save_monitor_checkpoint
    current = monitor_candidates.get(self.monitor)
AttributeError: 'NoneType' object has no attribute 'get'"""

# DeepSpeed builds the training loader in `deepspeed_io`; torch's DistributedSampler needs
# `len(dataset)`, which an IterableDataset has not
DEEPSPEED_IO_RAISED = """  File "/home/u/train_seg.py", line 52, in main
    engine, optimizer, loader, _ = deepspeed.initialize(model=model, training_data=train_set, \
config="ds.json")
  File "/opt/py/site-packages/deepspeed/__init__.py", line 181, in initialize
    engine = DeepSpeedEngine(args=args,
  File "/opt/py/site-packages/deepspeed/runtime/engine.py", line 301, in __init__
    self.training_dataloader = self.deepspeed_io(training_data)
  File "/opt/py/site-packages/deepspeed/runtime/engine.py", line 1712, in deepspeed_io
    data_sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, \
shuffle=False)
  File "/opt/py/site-packages/torch/utils/data/distributed.py", line 89, in __init__
    self.num_samples = math.ceil(len(self.dataset) / self.num_replicas)
TypeError: object of type 'IterableDataset' has no len()"""


def test_a_library_exception_raised_inside_the_checkpoint_callback_is_a_save_failure() -> None:
    d = explained(LIGHTNING_SAVE_RAISED, "--no-embed")
    assert d["symptoms"][0]["id"] == "S28", d["summary"]
    assert d["stage"]["id"] == "ST5"


def test_an_exception_building_the_training_loader_is_not_called_a_step_exception() -> None:
    d = explained(DEEPSPEED_IO_RAISED, "--no-embed")
    assert d["symptoms"][0]["id"] == "S08", d["summary"]
    assert "S18" not in {s["id"] for s in d["symptoms"]}


def test_only_taxonomy_symptoms_may_be_refined_by_a_place() -> None:
    problems: list[tuple[str, str]] = []
    places.build(
        {"places": [_save_place()], "refines": ["S18", "S99"]},
        lambda where, what: problems.append((where, what)),
        False,
    )
    assert problems == [("refines", "S99 is not a symptom id")]
