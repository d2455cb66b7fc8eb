"""`vramscope.largest_batch` on the fake torch: each size's recording is a
real run of the predict fixtures (a small transformer recorded on an H200
at batch 2, 4 and 6), and the prediction is the real binary's. What only a
GPU can show (the sizes it finds against Lightning's and accelerate's
finders) is `tests/gpu/batch_finder_job.py`."""

import os

import pytest

import vramscope
from conftest import CORPUS, PREDICT_RUNS, logged
from vramscope.batch import result_of

GiB = 1 << 30
TRANSFORMER = {2: "transformer_2.pickle", 4: "transformer_4.pickle", 6: "transformer_6.pickle"}


def runs_as_recorded(monkeypatch, files=TRANSFORMER, at_each=None):
    """A step_fn whose recording at size N is the fixture of size N (the
    fake torch dumps $FAKE_TORCH_SNAPSHOT); `at_each(size)` runs inside."""
    called = []

    def step_fn(size):
        called.append(size)
        monkeypatch.setenv("FAKE_TORCH_SNAPSHOT", str(PREDICT_RUNS / files[size]))
        if at_each is not None:
            at_each(size)

    return step_fn, called


def test_the_answer_is_the_binarys_prediction_from_the_recorded_sizes(tmp_path, fake_cuda, torch_log, monkeypatch):
    step_fn, called = runs_as_recorded(monkeypatch)
    found = vramscope.largest_batch(step_fn, sizes=(6, 2, 4), capacity="2GiB")
    assert called == [2, 4, 6]
    direct = vramscope.predict({PREDICT_RUNS / f: s for s, f in TRANSFORMER.items()}, largest=True, capacity="2GiB")
    assert found.size == direct["largest_fitting_size"] and found.size > 6
    peaks = [p["reserved_peak_bytes"] for p in direct["predictions"] if p["size"] == found.size and not p["oom"]]
    assert found.predicted_peak_bytes == peaks[0] <= 2 * GiB
    assert (found.capacity_bytes, found.capacity_source) == (2 * GiB, "given")
    assert found.notes == direct["notes"]
    assert found.snapshots == {}  # the temporary folder is gone
    # Each size recorded from an emptied cache, then let go as a new process
    # would start: cuBLAS's workspaces too (seen held between sizes on an H100).
    lines = logged(torch_log)
    assert [l for l in lines if l.startswith("dump")] == ["dump size-2.pickle", "dump size-4.pickle", "dump size-6.pickle"]
    after_each = [i for i, l in enumerate(lines) if l.startswith("dump")]
    for i in after_each:
        assert lines[i + 1 : i + 6] == ["record stop", "synchronize", "clear_cublas", "empty_cache", "reset_peak"], lines[i:]


def test_without_a_capacity_it_is_the_devices_total_less_what_lies_outside_the_allocator(fake_cuda, monkeypatch, tmp_path):
    step_fn, _ = runs_as_recorded(monkeypatch)
    fake_cuda.total = 24 * GiB
    found = vramscope.largest_batch(step_fn, sizes=(2, 4, 6), snapshot_dir=tmp_path / "kept")
    assert (found.capacity_bytes, found.capacity_source) == (24 * GiB, "measured")
    assert found.notes[0].startswith("capacity: measured now, the device's %d bytes less 0 bytes" % (24 * GiB))
    assert found.report["capacity_bytes"] == 24 * GiB
    assert sorted(found.snapshots) == [2, 4, 6]
    assert all(os.path.isfile(p) for p in found.snapshots.values())
    # Under a per-process memory fraction, the fraction's share.
    fake_cuda.fraction = 0.25
    found = vramscope.largest_batch(step_fn, sizes=(2, 4, 6))
    assert found.capacity_bytes == 6 * GiB
    assert "per-process memory fraction 0.25" in found.notes[0]
    smaller = vramscope.largest_batch(step_fn, sizes=(2, 4, 6), capacity=6 * GiB)
    assert (smaller.size, smaller.predicted_peak_bytes) == (found.size, found.predicted_peak_bytes)


def test_memory_a_size_leaves_alive_is_said_in_the_notes(fake_cuda, monkeypatch):
    def leak(size):
        if size == 2:  # a tensor kept in a global: the next sizes do not start clean
            fake_cuda.reserved = fake_cuda.allocated = 20 << 20

    step_fn, _ = runs_as_recorded(monkeypatch, at_each=leak)
    found = vramscope.largest_batch(step_fn, sizes=(2, 4, 6), capacity="2GiB")
    said = [n for n in found.notes if n.startswith("before size")]
    assert said == [
        "before size %d: %d bytes reserved and %d allocated, where the first size started from 0 and 0: the last "
        "size left memory alive (a tensor kept in a global, a returned value, an exception's traceback), so this size "
        "did not start as a fresh process would" % (size, 20 << 20, 20 << 20)
        for size in (4, 6)
    ]


def test_runs_the_binary_refuses_are_said_with_the_sizes(fake_cuda, monkeypatch):
    # A recording whose ring buffer wrapped cannot be matched whole.
    files = {2: "../corpus/ring_overflow.pickle", 4: "transformer_4.pickle"}
    step_fn, _ = runs_as_recorded(monkeypatch, files=files)
    with pytest.raises(vramscope.VramscopeError, match=r"refused the recorded runs of sizes 2, 4: .*does not start from an empty allocator"):
        vramscope.largest_batch(step_fn, sizes=(2, 4), capacity="2GiB")


def test_the_jobs_own_exception_stands_and_the_allocator_is_let_go(fake_cuda, torch_log, monkeypatch):
    def oom(size):
        raise RuntimeError("CUDA out of memory (at size %d)" % size)

    step_fn, _ = runs_as_recorded(monkeypatch, at_each=oom)
    with pytest.raises(RuntimeError, match=r"CUDA out of memory \(at size 2\)") as raised:
        vramscope.largest_batch(step_fn, capacity="2GiB")
    assert raised.value.__context__ is None
    assert logged(torch_log)[-4:] == ["synchronize", "clear_cublas", "empty_cache", "reset_peak"]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"sizes": ()}, ValueError, "sizes is empty"),
        ({"sizes": (2, 4, 2)}, ValueError, "size 2 is given twice"),
        ({"sizes": (0, 4)}, ValueError, "positive integers, got 0"),
        ({"sizes": (2.5, 4)}, ValueError, "positive integers, got 2.5"),
        ({"sizes": (True, 4)}, ValueError, "positive integers, got True"),
        ({"sizes": "248"}, TypeError, "sequence of positive integers"),
        ({"capacity": 1.5}, TypeError, "capacity must be a number of bytes"),
        ({"step": 0}, ValueError, "step must be a positive integer"),
    ],
)
def test_arguments_are_checked_before_anything_runs(fake_cuda, torch_log, kwargs, error, message):
    with pytest.raises(error, match=message):
        vramscope.largest_batch(lambda size: None, **kwargs)
    assert logged(torch_log) == []


def test_step_fn_must_be_callable_and_cuda_there(fake_cuda, monkeypatch):
    with pytest.raises(TypeError, match="step_fn must be callable"):
        vramscope.largest_batch(None)
    monkeypatch.setenv("FAKE_TORCH_CUDA", "0")
    with pytest.raises(vramscope.VramscopeError, match="needs a CUDA device"):
        vramscope.largest_batch(lambda size: None)


def test_no_size_that_fits_is_none_and_said():
    report = vramscope.predict({PREDICT_RUNS / f: s for s, f in TRANSFORMER.items()}, largest=True, capacity="64MiB")
    found = result_of(report, ["a note of ours"])
    assert (found.size, found.predicted_peak_bytes) == (None, None)
    assert found.notes[:2] == ["no size fits: even the smallest runs out of memory under the capacity", "a note of ours"]
    assert found.capacity_bytes == 64 << 20


def test_the_corpus_is_where_the_tests_expect_it():
    assert (CORPUS / "ring_overflow.pickle").is_file()
