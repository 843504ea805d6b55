"""The message atlas: harvested from library source, labelled by rules kept as data, shipped in
models/atlas/, and matched against a paste's lines before the words decide."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_runs import explained
from triage import knowledge
from triage.knowledge import atlas
from triage.model import Event, EventKind
from triage.train.harvest import harvest_tree

FIXTURE = Path(__file__).parent / "fixtures" / "atlas_src"


def _harvested() -> dict[str, atlas.Template]:
    out = {}
    for f in harvest_tree(FIXTURE):
        text = ("<*>" if f.leading else "") + "<*>".join(f.parts) + ("<*>" if f.trailing else "")
        out[text] = f
    return out


def test_python_messages_are_harvested_with_their_fields_masked_and_their_context() -> None:
    found = _harvested()
    f = found["tensor parallel size in checkpoint (<*>) differs from the current one (<*>)"]
    assert (f.kind, f.type, f.function, f.condition) == (
        "raise",
        "RuntimeError",
        "Engine.load_checkpoint",
        "tp != self.tp",
    )
    assert found["checkpoint directory <*> does not exist"].condition == "path.exists()"
    assert found["Missing key(s) in state dict: <*>"].type == "KeyError"  # held by `msg`
    log = found["Overflow detected, skipping step <*>, loss scale <*>"]
    assert (log.kind, log.type) == ("log", "warning")
    assert found["offload_optimizer is deprecated; use offload instead"].type == (
        "DeprecationWarning"
    )
    concat = found["world size <*> is not divisible by the tensor parallel size"]
    assert (concat.function, concat.condition) == ("init", "world % 2")


def test_cxx_macros_give_their_message_type_and_function_never_comments() -> None:
    found = _harvested()
    check = found["Tensor size must be positive, got <*>."]
    assert (check.kind, check.type, check.function, check.condition) == (
        "check",
        "RuntimeError",
        "ProcessGroupX::checkSize",
        "size > 0",
    )
    assert found["Timed out after <*> ms waiting for rank <*>"].type == "DistBackendError"
    warn = found["Net : Connect to <*> failed : <*>"]
    assert (warn.type, warn.function) == ("warn", "bootstrapConnect")
    assert found["Bootstrap : Using <*>:<*>"].type == "info"
    assert found["Failed to connect to <*>:<*>"].type == "error"
    assert "Mismatch in op.preamble.length: <*> != <*>" in found
    assert not any("never a message" in t for t in found)


def test_cxx_messages_built_before_they_are_reported_and_macro_bodies_are_harvested() -> None:
    # torch builds most of its c10d messages first (`auto msg = c10::str(...)`, a
    # stringstream, a string appended to on one branch) and reports them after, and its NCCL
    # checks live in `#define` bodies: each is a template, placed in its function or macro
    found = _harvested()
    watchdog = (
        "[Rank <*>] Watchdog caught collective operation timeout: <*> ran for <*> "
        "milliseconds before timing out."
    )
    assert (found[watchdog].kind, found[watchdog].type) == ("log", "error")
    assert found[watchdog].function == "WorkX::checkTimeout"
    streamed = found["Detected mismatch between collectives on ranks. Rank <*>"]
    assert streamed.type == "RuntimeError"
    # appended to on a branch: the text after it is left open, not guessed
    assert "Expected to have finished reduction before a new one. <*>" in found
    macro = found["PG error in: <*>:<*>"]
    assert (macro.type, macro.function) == ("DistBackendError", "PG_CHECK")
    assert found["from a macro body"].function == "CHECK_X"
    # ProcessGroupGloo reports through a helper that logs one message and throws the other
    thrown = found["Peers of rank <*> never connected: <*>"]
    assert (thrown.kind, thrown.type, thrown.function) == (
        "check",
        "RuntimeError",
        "ProcessGroupX::ProcessGroupX",
    )


def test_the_shipped_atlas_validates_and_agrees_with_its_manifest_and_label_rules() -> None:
    kb = knowledge.load()
    templates = kb.atlas.templates
    manifest = kb.atlas.manifest
    assert len(templates) == manifest["templates"] >= 5000
    assert len({t.lib for t in templates}) == len(manifest["releases"]) >= 10
    assert sum(t.reviewed for t in templates) == manifest["reviewed"] > 0
    # every review is of a template the atlas holds (a re-harvest may drop one)
    assert set(kb.atlas_labels.reviewed) <= {t.id for t in templates}
    # the labels shipped are what rules/atlas_labels.yaml gives now (else: --relabel)
    stale = [t.id for t in templates if kb.atlas_labels.label(t)[0] != dict(t.labels)]
    assert stale == [], f"{len(stale)} templates disagree with rules/atlas_labels.yaml"
    assert knowledge.problems() == []


def test_torch_cpp_sources_are_recorded_with_the_commit_of_every_file_read() -> None:
    # torch's own C++ is not in its wheel: the manifest names each file copied from the
    # repository, at its commit, and how to fetch them again
    kb = knowledge.load()
    source = kb.atlas.manifest["tree_sources"]["torch-csrc"]
    assert source["repo"] == "github:pytorch/pytorch"
    files = source["files"]
    assert all(len(commit) == 40 and int(commit, 16) >= 0 for commit in files.values())
    read = {t.file for t in kb.atlas.templates if t.lib == "torch-csrc"}
    assert read and read <= set(files)
    assert "sparse checkout" in source["reproduce"]
    assert "torch-csrc=DIR" in kb.atlas.manifest["command"]


# (paste, the library function the atlas names, the top symptom): messages only the atlas knows
NAMED_BY_THE_ATLAS = [
    pytest.param(
        "Traceback (most recent call last):\n"
        '  File "train.py", line 12, in <module>\n'
        "AssertionError: key: decoder.layers.3.mlp.weight is not found in the checkpoint "
        "/ckpt/mp_rank_00_model_states.pt\n",
        "atlas:deepspeed:MegatronSDLoader.sanity_check",
        "S29",
        id="deepspeed-megatron-state-dict-check",
    ),
    # transformers' DeepSpeed integration prints the mismatched settings on the lines after
    # this one; a paste that kept only the first line is still that check refusing a config
    pytest.param(
        "ValueError: Please correct the following DeepSpeed config values that mismatch "
        "TrainingArguments values:\n",
        "atlas:transformers:HfTrainerDeepSpeedConfig.trainer_config_finalize",
        "S09",
        id="several-lines-cut-after-the-first",
    ),
    # OptimizerParamScheduler._check_and_set: `checkpointvalue`, as megatron-core prints it
    pytest.param(
        "[rank0]: AssertionError: OptimizerParamScheduler: class input value 50000 and "
        "checkpointvalue 100000 for total number of iterations do not match\n",
        "atlas:megatron-core:OptimizerParamScheduler._check_and_set",
        "S29",
        id="megatron-resume-with-another-schedule",
    ),
]


@pytest.mark.parametrize(("paste", "named", "symptom"), NAMED_BY_THE_ATLAS)
def test_a_message_only_the_atlas_knows_is_named_with_its_library_function_and_labels(
    paste: str, named: str, symptom: str
) -> None:
    report = explained(paste)
    assert named in [e["why"] for e in report["evidence"]]
    assert report["symptoms"][0]["id"] == symptom


def test_torch_cpp_messages_are_named_by_the_function_that_prints_them() -> None:
    # ProcessGroupNCCL's watchdog, c10d's socket and DDP's reducer, as torch prints them:
    # each line is placed in torch's C++ function, and the answer agrees with it
    watchdog = (
        "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=6113, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) "
        "ran for 1800529 milliseconds before timing out.\n"
    )
    report = explained(watchdog)
    why = [e["why"] for e in report["evidence"]]
    assert "atlas:torch-csrc:ProcessGroupNCCL::WorkNCCL::checkTimeout" in why
    assert report["symptoms"][0]["id"] == "S17"
    port_taken = (
        "[W socket.cpp:436] [c10d] The server socket has failed to bind to [::]:29500 "
        "(errno: 98 - Address already in use).\n"
        "[E socket.cpp:472] [c10d] The server socket has failed to listen on any local "
        "network address.\n"
    )
    report = explained(port_taken)
    assert "atlas:torch-csrc:SocketListenOp::run" in [e["why"] for e in report["evidence"]]
    assert (report["symptoms"][0]["id"], report["root_causes"][0]["id"]) == ("S10", "R06")
    marked_twice = (
        "RuntimeError: Expected to mark a variable ready only once. This error is caused by "
        "one of the following reasons: 1) Use of a module parameter outside the `forward` "
        "function. Please make sure model parameters are not shared across multiple "
        "concurrent forward-backward passes. or try to use _set_static_graph() as a "
        "workaround if this module graph does not change during training loop.2) Reused "
        "parameters in multiple reentrant backward passes. For example, if you use multiple "
        "`checkpoint` functions to wrap the same part of your model, it would result in the "
        "same set of parameters been used by different reentrant backward passes multiple "
        "times, and hence marking a variable ready multiple times. DDP does not support such "
        "use cases in default. You can try to use _set_static_graph() as a workaround if your "
        "module graph does not change over iterations.\nParameter at index 195 has been "
        "marked as ready twice.\n"
    )
    report = explained(marked_twice)
    why = [e["why"] for e in report["evidence"]]
    assert "atlas:torch-csrc:Reducer::checkAndRaiseMarkedTwiceError" in why
    assert (report["symptoms"][0]["id"], report["root_causes"][0]["id"]) == ("S25", "R13")


def test_torch_cuda_allocator_store_and_gloo_messages_are_named_by_their_cpp_function() -> None:
    # c10/cuda's caching allocator, the libuv store, ProcessGroupGloo, ProcessGroup, DDP's
    # reducer and c10/cuda's device count, as torch prints them: each line is placed in the
    # C++ function that prints it, and the answer agrees with what that function checks
    cases = [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 3 has "
            "a total capacity of 23.43 GiB of which 210.06 MiB is free. Including non-PyTorch "
            "memory, this process has 23.21 GiB memory in use. Of the allocated memory 21.41 GiB "
            "is allocated by PyTorch, and 206.09 MiB is reserved by PyTorch but unallocated. If "
            "reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
            "documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n",
            "atlas:torch-csrc:malloc",
            ("S14", "R16"),
        ),
        (
            "[rank8]:[E ProcessGroupGloo.cpp:144] Gloo connectFullMesh failed with "
            "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error\n",
            "atlas:torch-csrc:ProcessGroupGloo::ProcessGroupGloo",
            ("S10", "R07"),
        ),
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            "local network address. useIpv6: 0, code: -98, name: EADDRINUSE, message: address "
            "already in use\n",
            "atlas:torch-csrc:makeWithPort",
            ("S10", "R06"),
        ),
        (
            "RuntimeError: [Rank 0]: Rank 3 failed to pass monitoredBarrier in 30000 ms\n"
            " Original exception: \n[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81]"
            " Timed out waiting 30000ms for recv operation to complete\n",
            "atlas:torch-csrc:ProcessGroupGloo::monitoredBarrier",
            ("S17", None),
        ),
        (
            "Traceback (most recent call last):\n"
            '  File "train.py", line 40, in <module>\n'
            "    dist.all_reduce(t)\n"
            "RuntimeError: No backend type associated with device type cpu\n",
            "atlas:torch-csrc:ProcessGroup::getBackend",
            ("S18", "R14"),
        ),
        (
            "[rank0]:[W reducer.cpp:1360] Warning: find_unused_parameters=True was specified in "
            "DDP constructor, but did not find any unused parameters in the forward pass. This "
            "flag results in an extra traversal of the autograd graph every iteration,  which "
            "can adversely affect performance. If your model indeed never has any unused "
            "parameters in the forward pass, consider turning this flag off. Note that this "
            "warning may be a false positive if your model has flow control causing later "
            "iterations to have unused parameters. (function operator())\n",
            "atlas:torch-csrc:Reducer::search_unused_parameters",
            ("S22", None),
        ),
        (
            "Traceback (most recent call last):\n"
            '  File "train.py", line 9, in <module>\n'
            "    torch.cuda.set_device(local_rank)\n"
            "RuntimeError: No CUDA GPUs are available\n",
            "atlas:torch-csrc:device_count_ensure_non_zero",
            ("S04", None),
        ),
        (
            "RuntimeError: Backend gloo does not support reduce_scatter\n",
            "atlas:torch:reduce_scatter",
            ("S18", None),
        ),
    ]
    for paste, function, (symptom, cause) in cases:
        report = explained(paste)
        assert function in [e["why"] for e in report["evidence"]], function
        assert report["symptoms"][0]["id"] == symptom, function
        if cause is not None:
            assert report["root_causes"][0]["id"] == cause, function


def test_a_field_between_two_fields_matches_one_space() -> None:
    # c10d's socket prints "... to {} {}." with one space between the address and the
    # error: the space alone must not ask for two
    report = explained(
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to "
        "[node-1]:29500 (errno: 110 - Connection timed out).\n"
    )
    why = [e["why"] for e in report["evidence"]]
    assert "atlas:torch-csrc:SocketConnectOp::tryConnect" in why
    # errno 110: no answer from the store's host, a network fault (R07) or a master that is
    # not there at that address (R06); the c10d rule and the reference threads hold both
    assert report["symptoms"][0]["id"] == "S10"
    assert [c["id"] for c in report["root_causes"][:2]] in (["R07", "R06"], ["R06", "R07"])


def test_a_config_dataclass_check_is_a_rejected_config_not_data_loading() -> None:
    # accelerate validates its plugins in utils/dataclasses.py: a path that once read as the
    # data pipeline's (`utils/data`)
    shipped = knowledge.shipped().atlas.templates
    plugin = [t for t in shipped if t.file == "accelerate/utils/dataclasses.py" and t.labels]
    assert plugin, "accelerate's plugin checks are in the atlas"
    assert not [t for t in plugin if t.labels.get("symptom") == "S08"]
    checks = [t for t in plugin if t.function.endswith("__post_init__")]
    # a setting refused is S09; "X is not available, please install it" stays an install issue
    assert {t.labels["symptom"] for t in checks if "install" not in " ".join(t.parts)} <= {
        "S09",
        "S03",
    }
    assert {t.labels["symptom"] for t in checks if "install" in " ".join(t.parts)} == {"S02"}


def _row(parts: list[str], labels: dict[str, str]) -> list[object]:
    return ["a", "lib", "raise", "ValueError", parts, False, False, "f.py", "", "", [], 1, labels,
            "", False, ""]  # fmt: skip


def _broken_models(tmp_path: Path, rows: list[object]) -> Path:
    models = tmp_path / "models"
    shutil.copytree(knowledge.models_dir(), models, ignore=shutil.ignore_patterns("atlas"))
    (models / "atlas").mkdir()
    # anchored on a word of the paste below: a row is read (and checked) when a line holds it
    header = {"columns": list(atlas.COLUMNS), "anchors": ["something" for _ in rows]}
    with gzip.open(models / "atlas" / atlas.TEMPLATES_FILE, "wt") as fh:
        fh.write("\n".join(json.dumps(x) for x in [header, *rows]) + "\n")
    return models


@pytest.mark.parametrize(
    ("row", "said"),
    [
        (["x"], "a row is a list of 16 values"),
        (_row([], {}), "`parts` must be non-empty strings"),
        (_row(["bad label here"], {"symptom": "S99"}), "symptom='S99' is not a taxonomy id"),
    ],
)  # fmt: skip
def test_malformed_atlas_data_is_a_clear_error_naming_the_row(
    tmp_path: Path, row: list, said: str
) -> None:
    models = _broken_models(tmp_path, [row])
    with pytest.raises(atlas.AtlasError, match="row 1") as exc:
        atlas.Atlas(models / "atlas").templates  # noqa: B018
    assert said in str(exc.value)
    assert [str(p) for p in exc.value.problems] == [str(exc.value)]
    env = {**os.environ, knowledge.MODELS_ENV: str(models)}
    out = subprocess.run(
        [sys.executable, "-m", "triage", "explain", "ValueError: something odd happened here"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 1
    assert "knowledge base cannot be used" in out.stderr and said in out.stderr


def test_a_label_rule_with_an_unknown_id_or_no_condition_is_reported() -> None:
    problems: list[tuple[str, str]] = []
    atlas.build(
        {
            "kind": "atlas_labels",
            "rules": [
                {"id": "a", "path": "x", "labels": {"symptom": "S77"}},
                {"id": "b", "labels": {"symptom": "S01"}},
                {"id": "c", "path": "x"},
                # `labels: {}` on purpose: a routine family that no later rule labels
                {"id": "d", "kind": ["log"], "type": "^info$", "labels": {}},
            ],
        },
        lambda item, msg: problems.append((item, msg)),
        False,
    )
    assert ("label rule 'a'", "symptom 'S77' is not a taxonomy id") in problems
    assert ("label rule 'b'", "has no condition: it would label every template") in problems
    assert [item for item, msg in problems if "names no `labels`" in msg] == ["label rule 'c'"]
    assert not [item for item, _ in problems if item == "label rule 'd'"]


def _atlas_labels(paste: str) -> list[tuple[str, dict[str, str]]]:
    """(the atlas evidence's rule id, its labels) for each labelled line of a paste, as the
    classifier's atlas layer gives them from the shipped atlas."""
    from triage.classify import atlas as matching

    found = matching.find(knowledge.shipped().atlas, [_event(paste)])
    return [
        (hit.rule_id, {f: next(iter(getattr(hit, f))) for f in atlas.FIELDS if getattr(hit, f)})
        for hit in matching.hits(found)
    ]


def test_lines_that_runs_which_work_print_carry_no_atlas_label() -> None:
    # torchrun's banner, a fallback warning, a fresh DeepSpeed start, NCCL's INFO narration
    # and torchrun stopping on a scheduler's SIGTERM: none of them names a failure, so the
    # atlas adds nothing to what the words say (a stop signal once read as a launcher
    # misconfiguration, `incompatible with gradient checkpointing` as a version mismatch)
    routine = (
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
        "avoid your system being overloaded, please further tune the variable for optimal "
        "performance in your application as needed.\n"
        "`use_cache=True` is incompatible with gradient checkpointing. Setting "
        "`use_cache=False`.\n"
        "Unable to find latest file at /ckpt/latest, if trying to load latest checkpoint please "
        "ensure this file exists or pass an explicit checkpoint tag when loading a checkpoint.\n"
        "Apex is not installed. Falling back to Torch LayerNorm\n"
        "node01:1234:1301 [0] NCCL INFO Connected all trees\n"
        "[I socket.cpp:700] [c10d] No socket on (node01, 29500) is listening yet, will retry.\n"
        "Received Signals.SIGTERM death signal, shutting down workers\n"
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 1234 got "
        "signal: 15\n"
    )
    assert _atlas_labels(routine) == []


def test_label_rules_read_the_mechanism_not_a_word() -> None:
    # activation checkpointing recomputes the forward: its mismatch is a training-step error,
    # not a checkpoint that failed to load
    recompute = (
        "torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed values for "
        "the following tensors have different metadata than during the forward pass.\n"
        "tensor at position 12:\n"
    )
    assert [labels.get("symptom") for _, labels in _atlas_labels(recompute)] == ["S18"]
    # a release bound is a version; a value bound (`>= 1`) is an argument refused
    too_old = (
        "RuntimeError: NCCL EP requires NCCL >= 2.28.0 at runtime; found 2.21.5. Upgrade NCCL "
        "to a compatible version."
    )
    assert [labels["symptom"] for _, labels in _atlas_labels(too_old)] == ["S03"]
    assert _atlas_labels("ValueError: ep_bootstrap requires num_topk >= 1 (got 0).") == []
    # ZeRO found a gradient reduced twice: unreduced or doubled gradients, not a shard shape
    twice = (
        "AssertionError: The parameter 311 has already been reduced.             Gradient "
        "computed twice for this partition.             Multiple gradient reduction is "
        "currently not supported"
    )
    assert {labels["symptom"] for _, labels in _atlas_labels(twice)} == {"S25"}


def _fixture_atlas(tmp_path: Path) -> atlas.Atlas:
    """The fixture tree's templates written as an atlas and read back, labelled by the shipped
    label rules."""
    templates = [
        atlas.Template(
            id=f"t{n}",
            lib="mylib",
            kind=f.kind,
            type=f.type,
            parts=f.parts,
            leading=f.leading,
            trailing=f.trailing,
            file=f.file,
            function=f.function,
            condition=f.condition,
            releases=("1.0",),
        )
        for n, f in enumerate(harvest_tree(FIXTURE))
    ]
    atlas.write(tmp_path, atlas.relabel(templates, knowledge.load().atlas_labels), {})
    return atlas.Atlas(tmp_path)


def _event(text: str) -> Event:
    return Event(source="<pasted>", kind=EventKind.TRACEBACK, text=text, line=1)


def test_a_line_instantiating_a_template_is_found_and_quoted_whole(tmp_path: Path) -> None:
    from triage.classify import atlas as matching

    book = _fixture_atlas(tmp_path)
    line = "[rank3]: KeyError: 'Missing key(s) in state dict: decoder.weight, decoder.bias'"
    found = matching.find(book, [_event(f"Traceback (most recent call last):\n{line}")])
    assert [(m.template.function, m.text, m.line) for m in found] == [
        ("Engine.load_checkpoint", line, 2)
    ]
    hits = matching.hits(found)
    assert hits and hits[0].rule_id == "atlas:mylib:Engine.load_checkpoint"
    assert hits[0].symptom == {"S29": pytest.approx(atlas_weight(found[0].template))}


def atlas_weight(t: atlas.Template) -> float:
    from triage.classify import atlas as matching

    literal = sum(len(p.strip()) for p in t.parts)
    return matching.RULE_WEIGHT * min(1.0, literal / matching.FULL_LITERAL)


def test_a_line_sharing_only_words_with_a_template_is_not_matched(tmp_path: Path) -> None:
    from triage.classify import atlas as matching

    book = _fixture_atlas(tmp_path)
    near_miss = "the checkpoint directory was never written, so it does exist later"
    assert matching.find(book, [_event(near_miss)]) == []
    printf = "node1:42:42 [0] NCCL WARN Net : Connect to 10.0.0.2<5012> failed : Connection refused"
    assert [m.template.type for m in matching.find(book, [_event(printf)])] == ["warn"]


def test_the_atlas_read_again_from_its_kept_rows_gives_the_same_templates(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triage import diskcache

    expected = _fixture_atlas(tmp_path / "first").templates
    assert len(list(cache_dir.glob("atlas-rows-*.bin"))) == 1

    def refuse(data: bytes) -> bytes:
        raise AssertionError("inflated although the rows were kept")

    with monkeypatch.context() as patched:
        patched.setattr(gzip, "decompress", refuse)
        assert atlas.Atlas(tmp_path / "first").templates == expected
    # another atlas is read from its own file, not from the rows kept for the first
    fewer = [t for t in expected if t.function != "Engine.load_checkpoint"]
    atlas.write(tmp_path / "second", fewer, {})
    assert atlas.Atlas(tmp_path / "second").templates == tuple(fewer)
    # a damaged file of kept rows costs an inflate, never a wrong row
    (kept,) = cache_dir.glob("atlas-rows-*.bin")
    body = bytearray(kept.read_bytes())
    body[-3] ^= 0xFF
    kept.write_bytes(bytes(body))
    assert atlas.Atlas(tmp_path / "second").templates == tuple(fewer)
    assert diskcache.read_verified(kept) is not None  # written again, whole
