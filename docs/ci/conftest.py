"""The pytest fixture: `def test_train_step(memory_snapshot): ...` writes
memory-snapshots/test_train_step.pickle (or under $VRAMSCOPE_SNAPSHOTS)."""

import os
import pathlib

import pytest

from vramscope_memory import recorded_memory


@pytest.fixture
def memory_snapshot(request):
    folder = pathlib.Path(os.environ.get("VRAMSCOPE_SNAPSHOTS", "memory-snapshots"))
    with recorded_memory(folder / f"{request.node.name}.pickle") as path:
        yield path
