"""vramscope from Python: record PyTorch CUDA memory snapshots and gate on them.

    import vramscope

    with vramscope.recorded_memory("memory-snapshots/step.pickle"):
        train_step()
    vramscope.check("memory-snapshots/step.pickle", max_reserved_peak="12GiB")

`largest_batch(step_fn, sizes=(2, 4, 8))` records a training step at a few
small sizes and returns the largest that fits, predicted, never tried.

Also: `snapshot(path)` (the allocator now, as the agent captures it),
`stats`, `predict` and `upload`, which run the `vramscope` binary installed
with this package; a pytest plugin (`@pytest.mark.cuda_memory(...)`) and
training callbacks (`vramscope.integrations.transformers`,
`vramscope.integrations.lightning`). Importing the package never imports
torch.
"""

from .batch import LargestBatch, largest_batch
from .cli import binary_version, check, find_binary, predict, stats, upload
from .errors import BinaryNotFound, MemoryBudgetExceeded, VramscopeError
from .recording import recorded_memory, snapshot, snapshot_name

#: The package's version; the binary it ships with has the same.
__version__ = "0.1.0"

__all__ = [
    "BinaryNotFound",
    "LargestBatch",
    "MemoryBudgetExceeded",
    "VramscopeError",
    "binary_version",
    "check",
    "find_binary",
    "largest_batch",
    "predict",
    "recorded_memory",
    "snapshot",
    "snapshot_name",
    "stats",
    "upload",
    "__version__",
]
