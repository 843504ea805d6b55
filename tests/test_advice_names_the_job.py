# ruff: noqa: E501 (pasted loader lines are as long as the libraries made them)
"""The first action names what the paste names (the cached build, the extension, the package)
and never hands the user a placeholder such as `<pkg>` or `<version>` to fill in."""

from __future__ import annotations

import re

import pytest

from tests.cli_runs import explained

PLACEHOLDER = re.compile(r"<(?:pkg|package|version|module)>")

CASES = [
    # an op compiled at run time and cached for another torch: the cache entry is what to remove
    (
        "ImportError: /root/.cache/torch_extensions/py310_cu118/fused_adam/fused_adam.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
        "Delete the cached build `/root/.cache/torch_extensions/py310_cu118/fused_adam`",
    ),
    # a wheel's own extension: rebuilt by reinstalling its package against this torch
    (
        "ImportError: /usr/lib/python3/dist-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
        "Rebuild `flash_attn_2_cuda` against the installed torch",
    ),
    # a submodule the installed release lacks: the package is named, and how to see its version
    (
        "ModuleNotFoundError: No module named 'colossalai.global_variables'",
        "`pip show colossalai`",
    ),
    (
        "RuntimeError: Distributed package doesn't have NCCL built in",
        "install a CUDA build of torch",
    ),
]


@pytest.mark.parametrize(("paste", "named"), CASES)
def test_the_first_action_names_the_pastes_own_facts(paste: str, named: str) -> None:
    d = explained(paste)
    actions = [a for fix in d["fix_patterns"] for a in fix["actions"]]
    assert any(named in a for a in actions), actions
    assert not any(PLACEHOLDER.search(a) for a in actions), actions
