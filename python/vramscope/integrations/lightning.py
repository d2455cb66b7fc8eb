"""`VramscopeCallback` for Lightning's `Trainer`:

    from vramscope.integrations.lightning import VramscopeCallback

    trainer = lightning.pytorch.Trainer(..., callbacks=[VramscopeCallback(snapshot_dir="memory-snapshots")])

Needs `lightning` (or the older `pytorch_lightning`; neither is a dependency
of vramscope). See `vramscope.integrations.monitor` for what is recorded
and written.
"""

try:
    from lightning.pytorch import Callback
except ImportError as lightning_missing:
    try:
        from pytorch_lightning import Callback
    except ImportError:
        raise ImportError(
            "vramscope.integrations.lightning needs the `lightning` package, which is not installed "
            "(pip install lightning): %s" % lightning_missing
        ) from lightning_missing

from ._options import CALLBACK_OPTIONS
from .monitor import Monitored

__all__ = ["VramscopeCallback"]


class VramscopeCallback(Monitored, Callback):
    __doc__ = (
        "Records CUDA memory from train start and writes snapshots on OOM, past "
        "`threshold` of capacity and at `at_steps`, labelled with the step "
        "(`trainer.global_step`), the global rank (`trainer.global_rank`) and "
        "the job (default the logger's name). Each optimizer step is a "
        "`record_function` range `step{N}` in the trace.\n" + CALLBACK_OPTIONS
    )

    def on_train_start(self, trainer, pl_module):
        logger = getattr(trainer, "logger", None)
        self.monitor.start(rank=getattr(trainer, "global_rank", None), job=getattr(logger, "name", None))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.monitor.step_begin(trainer.global_step + 1)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.monitor.step_end(trainer.global_step)

    def on_train_end(self, trainer, pl_module):
        self.monitor.stop()

    def on_exception(self, trainer, pl_module, exception):
        self.monitor.stop()
