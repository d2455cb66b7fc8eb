"""The callbacks under the real `transformers` and `lightning` packages, on
a machine without CUDA (CI): training runs to its end, the callbacks say
once on stderr that nothing is recorded (never through `warnings`, which
`-W error` would turn into the training's exception), and write nothing. Run apart from
python/tests, whose conftest puts a fake torch first on sys.path:

    python -m pytest python/tests_frameworks

Needs torch, transformers and lightning; `scripts/test-python` installs
them into its venv when VRAMSCOPE_PY_FRAMEWORKS=1 (the test command does),
and VRAMSCOPE_REQUIRE_FRAMEWORKS=1 turns a missing one into a failure
instead of a skip.
"""

import os
import warnings

import pytest

SAID = "vramscope: CUDA is not available; no memory is recorded\n"


@pytest.fixture(autouse=True)
def said_afresh(monkeypatch):
    """Each test starts as a new process would: nothing said yet (the line
    is said once per process)."""
    from vramscope import _capture

    monkeypatch.setattr(_capture, "_told", set())


def need(module):
    if os.environ.get("VRAMSCOPE_REQUIRE_FRAMEWORKS") == "1":
        return __import__(module)
    return pytest.importorskip(module)


def test_the_trainer_callback_trains_on_cpu_and_records_nothing(tmp_path, capfd):
    torch = need("torch")
    transformers = need("transformers")
    from vramscope.integrations.transformers import VramscopeCallback

    assert not torch.cuda.is_available()
    config = transformers.GPT2Config(
        vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0
    )
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 64, (8, 16), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": row, "labels": row} for row in ids]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=3,
        per_device_train_batch_size=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        logging_strategy="no",
    )
    callback = VramscopeCallback(snapshot_dir=tmp_path / "snaps", at_steps=[1, 2], threshold=0.5, job="cpu")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", module="vramscope")
        result = trainer.train()
    assert result.global_step == 3
    assert capfd.readouterr().err.count(SAID) == 1
    assert callback.snapshots == []
    assert not (tmp_path / "snaps").exists() or not any((tmp_path / "snaps").iterdir())


def test_the_lightning_callback_trains_on_cpu_and_records_nothing(tmp_path, capfd):
    torch = need("torch")
    need("lightning")
    import lightning.pytorch as pl
    from vramscope.integrations.lightning import VramscopeCallback

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            (x,) = batch
            return self.net(x).square().mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 8)), batch_size=4)
    callback = VramscopeCallback(snapshot_dir=tmp_path / "snaps", at_steps=[1, 2], threshold=0.5, job="cpu")
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=3,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("error", module="vramscope")
        trainer.fit(Tiny(), data)
    assert trainer.global_step == 3
    assert capfd.readouterr().err.count(SAID) == 1
    assert callback.snapshots == []
    assert not (tmp_path / "snaps").exists() or not any((tmp_path / "snaps").iterdir())
