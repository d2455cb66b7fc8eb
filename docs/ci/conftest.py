"""The pytest fixture: `def test_train_step(memory_snapshot): ...` writes
memory-snapshots/test_train_step.pickle (or under $VRAMSCOPE_SNAPSHOTS).

A test parametrized by a size writes one snapshot per size, named after it:

    @pytest.mark.parametrize("batch", [4, 8])
    def test_train_step(memory_snapshot, batch): ...

writes test_train_step.batch-4.pickle and test_train_step.batch-8.pickle, the
runs `vramscope predict` needs to say what batch 64 would take:

    vramscope predict memory-snapshots/test_train_step.batch-4.pickle=4 \
        memory-snapshots/test_train_step.batch-8.pickle=8 --at 64
"""

import os
import pathlib

import pytest

from vramscope_memory import recorded_memory, snapshot_name


@pytest.fixture
def memory_snapshot(request):
    folder = pathlib.Path(os.environ.get("VRAMSCOPE_SNAPSHOTS", "memory-snapshots"))
    callspec = getattr(request.node, "callspec", None)
    name = snapshot_name(request.node.originalname, callspec.params if callspec else None)
    with recorded_memory(folder / name) as path:
        yield path
