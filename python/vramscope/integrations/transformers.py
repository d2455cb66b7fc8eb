"""`VramscopeCallback` for the Hugging Face `transformers.Trainer`:

    from vramscope.integrations.transformers import VramscopeCallback

    trainer = Trainer(..., callbacks=[VramscopeCallback(snapshot_dir="memory-snapshots", at_steps=[1])])

Needs `transformers` (not a dependency of vramscope). See
`vramscope.integrations.monitor` for what is recorded and written.
"""

try:
    from transformers import TrainerCallback
except ImportError as e:
    raise ImportError(
        "vramscope.integrations.transformers needs the `transformers` package, which is not installed "
        "(pip install transformers): %s" % e
    ) from e

from ._options import CALLBACK_OPTIONS
from .monitor import Monitored

__all__ = ["VramscopeCallback"]


class VramscopeCallback(Monitored, TrainerCallback):
    __doc__ = (
        "Records CUDA memory from train start and writes snapshots on OOM, past "
        "`threshold` of capacity and at `at_steps`, labelled with the step, the "
        "global rank (`args.process_index`) and the job (default `args.run_name`). "
        "Each optimizer step is a `record_function` range `step{N}` in the trace.\n"
        + CALLBACK_OPTIONS
    )

    def on_train_begin(self, args, state, control, **kwargs):
        self.monitor.start(rank=getattr(args, "process_index", None), job=getattr(args, "run_name", None))

    def on_step_begin(self, args, state, control, **kwargs):
        self.monitor.step_begin(state.global_step + 1)

    def on_step_end(self, args, state, control, **kwargs):
        self.monitor.step_end(state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        self.monitor.stop()
