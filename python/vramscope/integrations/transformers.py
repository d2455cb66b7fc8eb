"""`VramscopeCallback` for the Hugging Face `transformers.Trainer`:

    from vramscope.integrations.transformers import VramscopeCallback

    trainer = Trainer(..., callbacks=[VramscopeCallback(snapshot_dir="memory-snapshots", at_steps=[1])])

`largest_batch_size(trainer)` sets the per-device batch size to the
largest that fits before `trainer.train()`, in place of
`auto_find_batch_size=True` (predicted from a few small sizes; no size is
run out of memory).

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

__all__ = ["VramscopeCallback", "largest_batch_size"]


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


def largest_batch_size(trainer, sizes=(2, 4, 8), steps=3, capacity=None, step=None, snapshot_dir=None,
                       max_size=None):
    """Sets `trainer.args.per_device_train_batch_size` to the largest that
    fits and returns the `vramscope.LargestBatch`, in place of
    `auto_find_batch_size=True` (which halves the size after each OOM):

        trainer = Trainer(model=model, args=args, train_dataset=train)
        found = largest_batch_size(trainer)     # before trainer.train()
        trainer.train()

    The training step is recorded at each of `sizes` (`steps` steps: the
    Trainer's dataloader, `compute_loss`, backward and the Trainer's
    optimizer, under autocast for bf16/fp16 as training runs), then
    `vramscope predict` replays it at every larger size through the caching
    allocator's model. The model is moved off the GPU during the trials
    (each starts from an empty allocator) and back after; the optimizer's
    state is dropped after each. `capacity`, `step`, `snapshot_dir`: as
    `vramscope.largest_batch`; `max_size` caps the size set.
    """
    import torch

    from ..batch import largest_batch
    from ._trial import autocast, device_index, let_go

    args = trainer.args
    model = trainer.model
    original = args.per_device_train_batch_size
    device = args.device
    precision = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else None
    given_optimizer = getattr(trainer, "optimizer", None)
    model.to("cpu")

    def step_fn(size):
        _set_batch_size(trainer, size)
        model.to(device)
        optimizer = given_optimizer if given_optimizer is not None else trainer.create_optimizer()
        try:
            model.train()
            batches = iter(trainer.get_train_dataloader())
            for _ in range(steps):
                inputs = trainer._prepare_inputs(next(batches))
                with autocast(torch, precision):
                    loss = trainer.compute_loss(model, inputs)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                del inputs, loss
            del batches
        finally:
            let_go([optimizer])
            # The Trainer makes its own optimizer when training starts.
            trainer.optimizer = given_optimizer
            model.to("cpu")

    try:
        found = largest_batch(step_fn, sizes=sizes, capacity=capacity, step=step, snapshot_dir=snapshot_dir,
                              device=device_index(torch.device(device)))
    finally:
        model.to(device)
    size = found.size if found.size is not None else original
    if max_size is not None:
        size = min(size, int(max_size))
    _set_batch_size(trainer, size)
    return found


def _set_batch_size(trainer, size):
    """The arguments' per-device size and the Trainer's own copy, which its
    dataloader reads (some TrainingArguments versions refuse a plain set)."""
    try:
        trainer.args.per_device_train_batch_size = size
    except Exception:  # noqa: BLE001 - a frozen TrainingArguments (transformers 4.31-4.33)
        object.__setattr__(trainer.args, "per_device_train_batch_size", size)
    if hasattr(trainer, "_train_batch_size"):
        trainer._train_batch_size = size
