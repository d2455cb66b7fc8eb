"""The batch-size integrations' glue on stand-ins (neither framework, nor a
GPU, is here): Lightning's `LargestBatchFinder` and transformers'
`largest_batch_size` drive their trials through `largest_batch`, set the
size it finds where the framework reads it, and leave the model where it
was. `largest_batch` itself is tested in test_batch.py; the frameworks'
real runs, side by side with their own finders, in
tests/gpu/batch_finder_job.py."""

import types

import pytest

import vramscope.batch
from vramscope.batch import LargestBatch


@pytest.fixture
def finds(monkeypatch):
    """`largest_batch` replaced by one that runs each trial and answers 37."""
    asked = {}

    def fake(step_fn, sizes=(2, 4, 8), capacity=None, step=None, snapshot_dir=None, device=None, **_):
        asked.update(sizes=tuple(sizes), capacity=capacity, device=device)
        for size in sizes:
            step_fn(size)
        return LargestBatch(size=37, predicted_peak_bytes=123, notes=["n"], capacity_bytes=1 << 30)

    monkeypatch.setattr(vramscope.batch, "largest_batch", fake)
    return asked


class Log(list):
    pass


class Loss:
    def __init__(self, log):
        self.log = log

    def backward(self):
        self.log.append("backward")


class Optimizer:
    def __init__(self, log):
        self.log, self.param_groups, self.state = log, [{}], {}

    def step(self):
        self.log.append("step")
        self.state["p"] = "moments"

    def zero_grad(self, set_to_none=True):
        pass


class Module:
    def __init__(self, log, holder="module"):
        self.log, self.device = log, "cuda:0"
        if holder == "module":
            self.batch_size = 16
        else:
            self.hparams = {"batch_size": 16}

    def cpu(self):
        self.log.append("cpu")

    def to(self, device):
        self.log.append("to %s" % device)

    def size(self):
        return self.batch_size if hasattr(self, "batch_size") else self.hparams["batch_size"]

    def train_dataloader(self):
        self.log.append("loader %d" % self.size())
        return [["batch"]] * 5

    def configure_optimizers(self):
        self.optimizer = Optimizer(self.log)
        return {"optimizer": self.optimizer, "lr_scheduler": object()}

    def transfer_batch_to_device(self, batch, device, index):
        return batch

    def training_step(self, batch, index):
        return {"loss": Loss(self.log)}


@pytest.mark.parametrize("holder", ["module", "hparams"])
def test_the_lightning_finder_sets_the_size_it_finds_and_rebuilds_the_dataloader(stand_in_frameworks, finds, holder):
    from vramscope.integrations.lightning import LargestBatchFinder

    log = Log()
    module = Module(log, holder)
    setups = []
    trainer = types.SimpleNamespace(datamodule=None, fit_loop=types.SimpleNamespace(_combined_loader="old", setup_data=lambda: setups.append(1)))
    finder = LargestBatchFinder(sizes=(2, 4), steps_per_trial=2)
    finder.on_fit_start(trainer, module)
    assert (finder.optimal_batch_size, module.size(), finder.result.notes) == (37, 37, ["n"])
    assert finds == {"sizes": (2, 4), "capacity": None, "device": None}
    trial = ["to cuda:0", "backward", "step", "backward", "step", "cpu"]
    assert log == ["cpu"] + ["to cuda:0", "loader 2"] + trial[1:] + ["to cuda:0", "loader 4"] + trial[1:] + ["to cuda:0"]
    assert module.optimizer.state == {}, "the trial's optimizer state is let go"
    assert (trainer.fit_loop._combined_loader, setups) == (None, [1])


def test_the_lightning_finder_caps_the_size_and_needs_an_attribute(stand_in_frameworks, finds):
    from vramscope.integrations.lightning import LargestBatchFinder

    module = Module(Log())
    trainer = types.SimpleNamespace(datamodule=types.SimpleNamespace(), fit_loop=None)
    assert LargestBatchFinder(sizes=(2,), max_size=32).scale_batch_size(trainer, module) == 32
    del module.batch_size
    with pytest.raises(AttributeError, match="no 'batch_size' attribute on the model, its hparams or the datamodule"):
        LargestBatchFinder().scale_batch_size(trainer, module)


def test_the_transformers_helper_sets_the_per_device_size(stand_in_frameworks, finds, fake_cuda):
    from vramscope.integrations.transformers import largest_batch_size

    log = Log()
    model = types.SimpleNamespace(to=lambda device: log.append("to %s" % device), train=lambda: None)

    class Trainer:
        def __init__(self):
            self.args = types.SimpleNamespace(per_device_train_batch_size=8, device="cuda:0", bf16=False, fp16=False)
            self.model, self.optimizer, self._train_batch_size = model, None, 8

        def create_optimizer(self):
            if self.optimizer is None:
                self.optimizer = Optimizer(log)
            return self.optimizer

        def get_train_dataloader(self):
            log.append("loader %d" % self._train_batch_size)
            return [{"input_ids": "ids"}] * 4

        def _prepare_inputs(self, batch):
            return batch

        def compute_loss(self, model, inputs):
            return Loss(log)

    trainer = Trainer()
    found = largest_batch_size(trainer, sizes=(2, 4), steps=1)
    assert (found.size, trainer.args.per_device_train_batch_size, trainer._train_batch_size) == (37, 37, 37)
    assert trainer.optimizer is None, "the Trainer makes its own optimizer when training starts"
    trial = ["backward", "step", "to cpu"]
    assert log == ["to cpu", "to cuda:0", "loader 2"] + trial + ["to cuda:0", "loader 4"] + trial + ["to cuda:0"]
    assert largest_batch_size(trainer, sizes=(2,), steps=1, max_size=16).size == 37
    assert trainer.args.per_device_train_batch_size == 16
