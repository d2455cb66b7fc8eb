"""The agent's capture module (`vramscope_capture`, the package's `_capture`)
starting inside a job, against the fake torch: what it records, and that
nothing of its own that fails reaches the job."""

import pytest

from vramscope import _capture
from conftest import PROBE_LINES, logged


@pytest.fixture
def start(tmp_path, fake_cuda, monkeypatch):
    """`_start_torch` as the agent's sitecustomize runs it at the job's CUDA
    initialisation; the capture it made is closed after the test."""
    import torch

    monkeypatch.setattr(_capture, "_installed", None)
    made = []

    def start(**overrides):
        options = _capture._options(socket=None, spool_dir=str(tmp_path / "spool"), interval_s=3600.0, **overrides)
        capture = _capture._start_torch(torch, options)
        made.append(capture)
        return capture

    yield start
    for capture in made:
        if capture is not None:
            capture.close()


def test_regression_the_agent_records_allocations_only_where_free_stacks_would_kill_checkpointing(start, torch_log, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_TORCH_FREE_STACKS", "lost")
    capture = start()
    assert capture is not None and capture.history
    # The probe ran with the history on, then the allocator was made fresh
    # again (the job has allocated nothing yet), then the chosen context.
    assert logged(torch_log) == PROBE_LINES + [
        "empty_cache",
        "reset_peak",
        "reset_accumulated",
        "record enabled=all max_entries=100000 context=alloc annotations=global",
        "attach_oom_observer",
    ]
    assert "frees are recorded without their stacks (context 'alloc')" in capfd.readouterr().err


def test_an_explicit_context_is_started_as_asked(start, torch_log):
    start(context="state")
    assert logged(torch_log) == ["record enabled=all max_entries=100000 context=state annotations=global", "attach_oom_observer"]


def test_regression_a_history_that_cannot_start_leaves_telemetry_and_the_job(start, torch_log, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_TORCH_RECORD_FAILS", "1")
    capture = start(context="all")
    assert capture is not None and not capture.history and capture.hello["history"] is False
    assert "attach_oom_observer" not in logged(torch_log)
    assert capfd.readouterr().err == (
        "vramscope_capture: no snapshots: cannot record the allocator history (RuntimeError: fake torch: recording "
        "refused); telemetry only\n"
    )


def test_under_cudamallocasync_only_telemetry_streams(start, torch_log, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_TORCH_BACKEND", "cudaMallocAsync")
    capture = start()
    assert capture is not None and not capture.history and capture.hello["backend"] == "cudaMallocAsync"
    assert not [l for l in logged(torch_log) if l.startswith("record")]
    assert "no snapshots: the cudaMallocAsync backend keeps no allocator history; telemetry only" in capfd.readouterr().err


def test_regression_a_capture_that_cannot_be_made_stops_the_history_it_started(start, tmp_path, torch_log, capfd):
    (tmp_path / "spool").write_text("a file where the spool folder should be")
    assert start(context="all") is None
    assert [l for l in logged(torch_log) if l.startswith("record")][-1] == "record stop"
    assert "not capturing (FileExistsError" in capfd.readouterr().err


def test_the_oom_observer_never_raises_into_the_allocator(start, tmp_path, monkeypatch, capfd):
    import torch

    capture = start(context="all")
    monkeypatch.setattr(capture, "dump", lambda *a, **k: 1 / 0)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        torch.cuda._fake_oom(1 << 30)
    assert "no OOM snapshot (ZeroDivisionError" in capfd.readouterr().err


def test_the_watcher_makes_no_cuda_runtime_call(start, fake_cuda, torch_log, monkeypatch):
    """A runtime call from the watcher thread could fail the job's
    CUDA-graph capture (issue 42): the sampler reads the allocator's
    counters and the device's properties only."""
    import torch

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: pytest.fail("mem_get_info from the watcher"))
    fake_cuda.reserved = 1 << 30
    sample = _capture.torch_sampler(torch)()
    assert [(s["reserved"], s["total"], s["capacity"]) for s in sample] == [(1 << 30, 80 << 30, 80 << 30)]
