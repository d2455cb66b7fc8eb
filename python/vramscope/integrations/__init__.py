"""Training callbacks that record CUDA memory and write snapshots at OOM,
past a threshold of capacity, and at chosen steps:

* `vramscope.integrations.transformers.VramscopeCallback` (a `transformers.TrainerCallback`);
* `vramscope.integrations.lightning.VramscopeCallback` (a `lightning.pytorch.Callback`).

Both drive a `MemoryMonitor` (`vramscope.integrations.monitor`), which needs
neither framework.
"""
