"""`VramscopeCallback` for Lightning's `Trainer`:

    from vramscope.integrations.lightning import VramscopeCallback

    trainer = lightning.pytorch.Trainer(..., callbacks=[VramscopeCallback(snapshot_dir="memory-snapshots")])

`LargestBatchFinder` sets the batch size to the largest that fits, in
place of Lightning's `BatchSizeFinder` (predicted from a few small sizes;
no size is run out of memory).

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

__all__ = ["VramscopeCallback", "LargestBatchFinder"]


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


class LargestBatchFinder(Callback):
    """Sets the batch size to the largest that fits before training, in
    place of Lightning's `BatchSizeFinder`: the training step is recorded
    at a few small sizes (`steps_per_trial` steps each, with a fresh
    optimizer from `configure_optimizers()`), and `vramscope predict`
    replays it at every larger size through the caching allocator's model.
    No size is run out of memory to find out.

        trainer = Trainer(callbacks=[LargestBatchFinder(sizes=(2, 4, 8))])
        trainer.fit(model, datamodule=dm)   # dm.batch_size set first

    sizes, capacity, step, snapshot_dir: as `vramscope.largest_batch`
        (capacity None: the device's total less what lies outside the
        allocator, measured after the trials).
    batch_arg_name: the attribute set, looked for as Lightning's finder
        does (the module, its `hparams`, the datamodule).
    max_size: the largest size set, whatever fits (None: no limit).

    After `on_fit_start`: `optimal_batch_size` and `result` (the
    `LargestBatch`, with the prediction's notes). The model is moved off the
    GPU during the trials (each starts from an empty allocator, as the
    prediction needs) and back after.
    """

    def __init__(self, sizes=(2, 4, 8), steps_per_trial=3, capacity=None, batch_arg_name="batch_size", step=None,
                 snapshot_dir=None, max_size=None):
        super().__init__()
        self.sizes = tuple(sizes)
        self.steps_per_trial = int(steps_per_trial)
        self.capacity = capacity
        self.batch_arg_name = batch_arg_name
        self.step = step
        self.snapshot_dir = snapshot_dir
        self.max_size = max_size
        self.optimal_batch_size = None
        self.result = None

    def on_fit_start(self, trainer, pl_module):
        self.scale_batch_size(trainer, pl_module)

    def scale_batch_size(self, trainer, pl_module):
        """Finds the size, sets it and rebuilds the training dataloader."""
        from ..batch import largest_batch
        from ._trial import device_index

        if not _hasattr(trainer, pl_module, self.batch_arg_name):
            raise AttributeError(
                "LargestBatchFinder: no %r attribute on the model, its hparams or the datamodule to set the batch "
                "size through (batch_arg_name=...)" % self.batch_arg_name
            )
        original = _getattr(trainer, pl_module, self.batch_arg_name)
        device = pl_module.device
        pl_module.cpu()

        def step_fn(size):
            _setattr(trainer, pl_module, self.batch_arg_name, size)
            pl_module.to(device)
            try:
                _train_steps(trainer, pl_module, self.steps_per_trial, device)
            finally:
                pl_module.cpu()

        try:
            self.result = largest_batch(
                step_fn, sizes=self.sizes, capacity=self.capacity, step=self.step, snapshot_dir=self.snapshot_dir,
                device=device_index(device),
            )
        finally:
            pl_module.to(device)
        size = self.result.size if self.result.size is not None else original
        if self.max_size is not None and size is not None:
            size = min(size, int(self.max_size))
        _setattr(trainer, pl_module, self.batch_arg_name, size)
        self.optimal_batch_size = size
        _reset_train_dataloader(trainer)
        return size


def _train_steps(trainer, pl_module, steps, device):
    """`steps` training steps as the fit loop runs them: the batch moved
    by the module's hook, the step under the precision plugin's context,
    backward and the optimizer's step (unless the module optimizes by
    hand); then gradients and optimizer state let go."""
    import contextlib

    from ._trial import let_go, loss_of, optimizers_of

    datamodule = getattr(trainer, "datamodule", None)
    source = datamodule if datamodule is not None and hasattr(datamodule, "train_dataloader") else pl_module
    loader = source.train_dataloader()
    optimizers = optimizers_of(pl_module.configure_optimizers())
    automatic = getattr(pl_module, "automatic_optimization", True)
    plugin = getattr(trainer, "precision_plugin", None)
    context = getattr(plugin, "forward_context", None) or getattr(plugin, "train_step_context", None)
    batches = iter(loader)
    try:
        for index in range(steps):
            batch = pl_module.transfer_batch_to_device(next(batches), device, 0)
            with context() if context is not None else contextlib.nullcontext():
                loss = loss_of(pl_module.training_step(batch, index))
            if automatic and loss is not None:
                loss.backward()
                for optimizer in optimizers:
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
            del batch, loss
    finally:
        let_go(optimizers)
        del batches


def _holders(trainer, pl_module):
    """Where a batch size can live, in the order Lightning's finder looks."""
    holders = [pl_module]
    hparams = getattr(pl_module, "hparams", None)
    if hparams is not None:
        holders.append(hparams)
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None:
        holders.append(datamodule)
    return holders


def _has(holder, name):
    return name in holder if isinstance(holder, dict) else hasattr(holder, name)


def _hasattr(trainer, pl_module, name):
    return any(_has(h, name) for h in _holders(trainer, pl_module))


def _getattr(trainer, pl_module, name):
    for h in _holders(trainer, pl_module):
        if _has(h, name):
            return h[name] if isinstance(h, dict) else getattr(h, name)
    return None


def _setattr(trainer, pl_module, name, value):
    """Sets it wherever it is (Lightning's `lightning_setattr` does the same)."""
    for h in _holders(trainer, pl_module):
        if _has(h, name):
            if isinstance(h, dict):
                h[name] = value
            else:
                setattr(h, name, value)


def _reset_train_dataloader(trainer):
    """The fit loop builds its dataloaders again, with the new size (what
    Lightning's finder does after its trials)."""
    loop = getattr(trainer, "fit_loop", None)
    if loop is None:
        return
    if hasattr(loop, "_combined_loader"):
        loop._combined_loader = None
    setup = getattr(loop, "setup_data", None)
    if setup is not None:
        setup()
