"""The training callbacks' logic against the fake torch.cuda: the
framework-free MemoryMonitor, then the transformers and lightning classes
on stand-in base classes (neither framework is installed here), and the
ImportError without them."""

import pickle
import re
import subprocess
import sys
import types

import pytest

from conftest import CORPUS, logged, stored_snapshots
from vramscope.integrations.monitor import MemoryMonitor

GiB = 1 << 30


def trigger_lines(log):
    return [line for line in logged(log) if line.startswith(("record", "range", "attach", "dump"))]


def test_steps_are_record_function_ranges_in_a_trace_recorded_from_train_start(tmp_path, fake_cuda, torch_log):
    monitor = MemoryMonitor(snapshot_dir=tmp_path, threshold=None)
    monitor.start(rank=0, job="train")
    for step in (1, 2):
        monitor.step_begin(step)
        monitor.step_end(step)
    monitor.stop()
    assert trigger_lines(torch_log) == [
        "record enabled=all max_entries=64 context=all annotations=global",  # the probe
        "record stop",
        "record enabled=all max_entries=100000 context=alloc annotations=global",
        "attach_oom_observer",
        "range start step1",
        "range end step1",
        "range start step2",
        "range end step2",
        "record stop",
    ]
    assert monitor.snapshots == []


def test_gradient_accumulation_keeps_one_range_per_optimizer_step(tmp_path, fake_cuda, torch_log):
    monitor = MemoryMonitor(snapshot_dir=tmp_path, threshold=None)
    monitor.start()
    # Two micro-batches per step, the step counted after the optimizer ran.
    for begin, end in [(1, 0), (1, 1), (2, 1), (2, 2)]:
        monitor.step_begin(begin)
        monitor.step_end(end)
    assert [l for l in logged(torch_log) if l.startswith("range")] == [
        "range start step1",
        "range end step1",
        "range start step2",
        "range end step2",
    ]


def test_named_steps_write_labelled_snapshots_with_the_capture_context(tmp_path, fake_cuda, torch_log):
    fake_cuda.reserved = 2 * GiB
    monitor = MemoryMonitor(snapshot_dir=tmp_path / "snaps", threshold=None, at_steps=[2])
    monitor.start(rank=3, job="bert finetune")
    for step in (1, 2, 3):
        monitor.step_begin(step)
        monitor.step_end(step)
    assert [(s["trigger"], s["step"], s["rank"], s["job"]) for s in monitor.snapshots] == [
        ("step", 2, 3, "bert finetune")
    ]
    path = tmp_path / "snaps" / "bert_finetune-rank3-step2-step.pickle"
    assert monitor.snapshots[0]["path"] == str(path)
    with open(path, "rb") as f:
        taken = pickle.load(f)
    assert taken["vramscope_capture"]["torch_version"] == "2.11.0+fake"
    assert taken["segments"] == pickle.loads((CORPUS / "mlp_train_all.pickle").read_bytes())["segments"]


def test_crossing_the_threshold_writes_one_snapshot_until_memory_falls_back(tmp_path, fake_cuda, torch_log):
    fake_cuda.total = 10 * GiB
    fake_cuda.fraction = 0.5  # capacity 5 GiB
    monitor = MemoryMonitor(snapshot_dir=tmp_path, threshold=0.9)
    monitor.start()
    reserved_after_step = [4, 4.6, 4.8, 4.0, 4.7]  # GiB: crosses, stays, falls below 85%, crosses again
    for step, reserved in enumerate(reserved_after_step, start=1):
        monitor.step_begin(step)
        fake_cuda.reserved = int(reserved * GiB)
        monitor.step_end(step)
    threshold = [s for s in monitor.snapshots if s["trigger"] == "threshold"]
    assert [s["step"] for s in threshold] == [2, 5]
    assert threshold[0]["reason"] == "device 0 reserved %d of %d bytes (92.0%% >= 90.0%%)" % (int(4.6 * GiB), 5 * GiB)


def test_regression_a_threshold_crossed_and_left_within_one_step_is_not_missed(tmp_path, fake_cuda, torch_log):
    fake_cuda.total = 10 * GiB  # capacity 10 GiB
    monitor = MemoryMonitor(snapshot_dir=tmp_path, threshold=0.9)
    monitor.start()
    monitor.step_begin(1)
    fake_cuda.reserved = 2 * GiB
    monitor.step_end(1)
    monitor.step_begin(2)
    fake_cuda.peak = int(9.7 * GiB)  # reached and freed (empty_cache) inside step 2
    fake_cuda.reserved = 2 * GiB
    monitor.step_end(2)
    monitor.step_begin(3)
    monitor.step_end(3)  # the peak has not moved since: nothing new
    threshold = [s for s in monitor.snapshots if s["trigger"] == "threshold"]
    assert [s["step"] for s in threshold] == [2]
    assert threshold[0]["reason"] == "device 0 reserved %d of %d bytes (97.0%% >= 90.0%%)" % (int(9.7 * GiB), 10 * GiB)


def test_an_oom_writes_a_snapshot_at_the_failed_allocation(tmp_path, fake_cuda, torch_log):
    import torch

    monitor = MemoryMonitor(snapshot_dir=tmp_path, threshold=None)
    monitor.start(rank=1, job="train")
    monitor.step_begin(7)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        torch.cuda._fake_oom(3 * GiB)
    assert [(s["trigger"], s["step"], s["rank"]) for s in monitor.snapshots] == [("oom", 7, 1)]
    assert monitor.snapshots[0]["reason"].startswith("device 0: requested %d bytes" % (3 * GiB))
    assert (tmp_path / "train-rank1-step7-oom.pickle").is_file()
    # After stop, the observer (which cannot be detached) writes nothing.
    monitor.stop()
    with pytest.raises(torch.cuda.OutOfMemoryError):
        torch.cuda._fake_oom(GiB)
    assert len(monitor.snapshots) == 1


def test_on_oom_false_attaches_no_observer(tmp_path, fake_cuda, torch_log):
    MemoryMonitor(snapshot_dir=tmp_path, on_oom=False).start()
    assert "attach_oom_observer" not in logged(torch_log)


def test_a_failed_upload_keeps_the_file_and_training_goes_on(tmp_path, fake_cuda, torch_log, capfd):
    monitor = MemoryMonitor(snapshot_dir=tmp_path, threshold=None, at_steps=[1], server="http://127.0.0.1:9")
    monitor.start(job="train")
    monitor.step_begin(1)
    monitor.step_end(1)
    assert monitor.flush_uploads(60)
    assert re.search(
        r"vramscope: step kept at .*train-rank0-step1-step\.pickle, not uploaded: .*cannot reach", capfd.readouterr().err
    )
    assert monitor.snapshots[0]["upload"] is None
    assert (tmp_path / "train-rank0-step1-step.pickle").is_file()


def test_each_snapshot_is_uploaded_with_its_step_rank_and_job(tmp_path, fake_cuda, torch_log, server):
    fake_cuda.reserved = 75 * GiB  # of 80: past the threshold at the first step's end
    monitor = MemoryMonitor(snapshot_dir=tmp_path, threshold=0.9, at_steps=[1], server=server)
    monitor.start(rank=2, job="train")
    monitor.step_begin(1)
    monitor.step_end(1)
    assert monitor.flush_uploads(60)
    assert [(s["trigger"], s["upload"]["status"]) for s in monitor.snapshots] == [("step", "ready"), ("threshold", "ready")]
    stored = sorted(stored_snapshots(server), key=lambda s: s["trigger"])
    assert [(s["name"], s["job"], s["rank"], s["tags"], s["trigger"]) for s in stored] == [
        ("train-rank2-step1-step.pickle", "train", 2, ["step=1"], "manual"),
        ("train-rank2-step1-threshold.pickle", "train", 2, ["step=1"], "threshold"),
    ]


def test_without_cuda_the_monitor_says_so_once_and_records_nothing(tmp_path, fake_cuda, torch_log, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_TORCH_CUDA", "0")
    monitor = MemoryMonitor(snapshot_dir=tmp_path, at_steps=[1])
    monitor.start()
    monitor.step_begin(1)
    monitor.step_end(1)
    monitor.stop()
    assert logged(torch_log) == [] and monitor.snapshots == []
    assert capfd.readouterr().err == "vramscope: CUDA is not available; no memory is recorded\n"


def test_a_threshold_outside_0_1_is_refused():
    with pytest.raises(ValueError, match="threshold is a fraction of capacity"):
        MemoryMonitor(threshold=90)


# -- the framework classes, on stand-in base classes -----------------------




def test_the_transformers_callback_drives_the_monitor_from_the_trainers_hooks(tmp_path, fake_cuda, torch_log, stand_in_frameworks):
    transformers, _ = stand_in_frameworks
    from vramscope.integrations.transformers import VramscopeCallback

    callback = VramscopeCallback(snapshot_dir=tmp_path, at_steps=[2], threshold=None)
    assert isinstance(callback, transformers.TrainerCallback)
    args = types.SimpleNamespace(process_index=2, run_name="glue-mrpc")
    state = types.SimpleNamespace(global_step=0)
    callback.on_train_begin(args, state, None)
    for _ in range(2):
        callback.on_step_begin(args, state, None)
        state.global_step += 1  # the Trainer counts the step before on_step_end
        callback.on_step_end(args, state, None)
    callback.on_train_end(args, state, None)
    assert [(s["trigger"], s["step"], s["rank"], s["job"]) for s in callback.snapshots] == [("step", 2, 2, "glue-mrpc")]
    assert [l for l in logged(torch_log) if l.startswith(("range", "record"))] == [
        "record enabled=all max_entries=64 context=all annotations=global",  # the probe
        "record stop",
        "record enabled=all max_entries=100000 context=alloc annotations=global",
        "range start step1",
        "range end step1",
        "range start step2",
        "range end step2",
        "record stop",
    ]


def test_the_lightning_callback_drives_the_monitor_from_the_trainers_hooks(tmp_path, fake_cuda, torch_log, stand_in_frameworks):
    _, lightning_pytorch = stand_in_frameworks
    from vramscope.integrations.lightning import VramscopeCallback

    callback = VramscopeCallback(snapshot_dir=tmp_path, at_steps=[1], threshold=None, job="mnist")
    assert isinstance(callback, lightning_pytorch.Callback)
    trainer = types.SimpleNamespace(global_rank=1, global_step=0, logger=types.SimpleNamespace(name="lightning_logs"))
    callback.on_train_start(trainer, None)
    for batch_idx in range(2):
        callback.on_train_batch_start(trainer, None, None, batch_idx)
        trainer.global_step += 1
        callback.on_train_batch_end(trainer, None, None, None, batch_idx)
    callback.on_train_end(trainer, None)
    assert [(s["trigger"], s["step"], s["rank"], s["job"]) for s in callback.snapshots] == [("step", 1, 1, "mnist")]
    assert (tmp_path / "mnist-rank1-step1-step.pickle").is_file()


@pytest.mark.parametrize("module, package", [("transformers", "transformers"), ("lightning", "lightning")])
def test_importing_an_integration_without_its_framework_names_the_missing_package(module, package):
    # A fresh interpreter where the framework cannot be imported, installed or not.
    code = (
        "import sys\n"
        "sys.modules[%r] = None\n"
        "sys.modules['pytorch_lightning'] = None\n"
        "try:\n"
        "    import vramscope.integrations.%s\n"
        "except ImportError as e:\n"
        "    print(e)\n" % (package, module)
    )
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, check=True).stdout.decode()
    assert out.startswith(
        "vramscope.integrations.%s needs the `%s` package, which is not installed (pip install %s)" % (module, package, package)
    ), out


# -- do no harm: what the callbacks do when something of ours fails ----------


def test_regression_a_recording_that_cannot_start_leaves_the_training_untouched(tmp_path, fake_cuda, torch_log, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_TORCH_RECORD_FAILS", "1")
    monitor = MemoryMonitor(snapshot_dir=tmp_path, at_steps=[1], threshold=0.5)
    monitor.start()
    for step in (1, 2):
        monitor.step_begin(step)
        monitor.step_end(step)
    monitor.stop()
    assert not monitor.active and monitor.snapshots == []
    said = capfd.readouterr().err.splitlines()
    assert said == [
        "vramscope: starting the memory recording failed (RuntimeError: fake torch: recording refused); "
        "nothing is recorded; the training goes on"
    ]


def test_regression_a_failing_oom_snapshot_never_replaces_the_jobs_oom(tmp_path, fake_cuda, torch_log, monkeypatch, capfd):
    import torch

    monitor = MemoryMonitor(snapshot_dir=tmp_path / "not-a-folder")
    (tmp_path / "not-a-folder").write_text("a file where the snapshots' folder should be")
    monitor.start()
    # The job's own OutOfMemoryError reaches the job, not one of ours.
    with pytest.raises(torch.cuda.OutOfMemoryError):
        torch.cuda._fake_oom(1 << 30)
    assert monitor.snapshots == []
    assert "could not write a oom snapshot at step 0" in capfd.readouterr().err


def test_regression_under_cudamallocasync_the_callback_records_nothing_and_says_why(tmp_path, fake_cuda, torch_log, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_TORCH_BACKEND", "cudaMallocAsync")
    monitor = MemoryMonitor(snapshot_dir=tmp_path, at_steps=[1])
    monitor.start()
    monitor.step_begin(1)
    monitor.step_end(1)
    assert monitor.snapshots == [] and not [l for l in logged(torch_log) if l.startswith("record")]
    assert "cudaMallocAsync backend keeps no allocator history" in capfd.readouterr().err


def test_regression_the_callbacks_never_warn_through_the_warnings_module(tmp_path, fake_cuda, torch_log, monkeypatch):
    """A job run with `-W error` (pytest's filterwarnings = error) would
    turn a warning of ours into its own exception."""
    import warnings

    monkeypatch.setenv("FAKE_TORCH_CUDA", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monitor = MemoryMonitor(snapshot_dir=tmp_path, server="http://127.0.0.1:9")
        monitor.start()
        monkeypatch.setenv("FAKE_TORCH_CUDA", "1")
        monitor.start()
        monitor.write("manual")
        assert monitor.flush_uploads(60)


def test_a_context_the_history_does_not_know_is_refused():
    with pytest.raises(ValueError, match="context is one of auto, all, alloc, state"):
        MemoryMonitor(context="everything")
