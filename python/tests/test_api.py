"""The package's functions: recording with the fake torch, and the binary's
answers on real corpus snapshots."""

import pickle
import subprocess
import sys

import pytest

import vramscope
from conftest import PROBE_LINES, CORPUS, PREDICT_RUNS, logged, stored_snapshots


def test_importing_the_package_does_not_import_torch():
    code = "import sys, vramscope, vramscope.pytest_plugin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, check=True)
    assert out.stdout.decode().strip() == "False"


def test_recorded_memory_records_around_the_block_and_writes_the_snapshot_also_when_it_raises(tmp_path, torch_log):
    with vramscope.recorded_memory(tmp_path / "snaps" / "step.pickle", max_entries=5000) as path:
        assert path.name == "step.pickle"
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        with vramscope.recorded_memory(tmp_path / "snaps" / "oom.pickle"):
            raise RuntimeError("CUDA out of memory")
    # The first recording of the process probes which context "auto" is,
    # before the cache is emptied: `alloc` under torch 2.11 on Python < 3.13
    # (seen losing the exception on a GPU), whatever the probe says.
    first = ["synchronize"] + PROBE_LINES + ["clear_cublas", "empty_cache"]
    again = ["synchronize", "clear_cublas", "empty_cache"]
    assert logged(torch_log) == (
        first + ["record enabled=all max_entries=5000 context=alloc", "synchronize", "dump step.pickle", "record stop"]
        + again + ["record enabled=all max_entries=1000000 context=alloc", "synchronize", "dump oom.pickle", "record stop"]
    )
    assert (tmp_path / "snaps" / "oom.pickle").read_bytes() == (CORPUS / "mlp_train_all.pickle").read_bytes()


def test_snapshot_names_a_parametrized_test_after_its_sizes():
    assert vramscope.snapshot_name("test_step") == "test_step.pickle"
    assert vramscope.snapshot_name("test_step", {"batch": 4, "seq": 128}) == "test_step.batch-4.seq-128.pickle"


def test_snapshot_adds_the_agents_capture_context(tmp_path, fake_cuda, monkeypatch):
    fake_cuda.reserved = 3 << 30
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    path = vramscope.snapshot(tmp_path / "now.pickle")
    with open(path, "rb") as f:
        taken = pickle.load(f)
    capture = taken["vramscope_capture"]
    assert capture["torch_version"] == "2.11.0+fake"
    assert capture["backend"] == "native"
    assert (capture["alloc_conf_var"], capture["alloc_conf"]) == ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert capture["devices"][0]["device"] == 0
    assert capture["devices"][0]["cuda_total_bytes"] == 80 << 30
    # The binary reads the added key, and the snapshot's own figures are untouched.
    assert vramscope.stats(path)["devices"][0]["reserved_peak_bytes"] == vramscope.stats(
        CORPUS / "mlp_train_all.pickle"
    )["devices"][0]["reserved_peak_bytes"]


def test_check_returns_the_verdict_when_every_rule_holds():
    peak = vramscope.stats(CORPUS / "oom_leak.pickle")["devices"][0]["reserved_peak_bytes"]
    verdict = vramscope.check(CORPUS / "oom_leak.pickle", max_reserved_peak=peak)
    assert verdict["passed"] is True
    assert verdict["rules"][0]["bytes"] == peak


def test_a_broken_rule_raises_with_the_figures_and_the_stacks_that_grew():
    with pytest.raises(vramscope.MemoryBudgetExceeded) as raised:
        vramscope.check(
            CORPUS / "oom_leak.pickle", baseline=CORPUS / "mlp_train_all.pickle", max_growth="10%", top=2
        )
    broken = raised.value
    assert [r["rule"] for r in broken.broken] == ["max_growth_reserved_peak", "max_growth_requested_peak"]
    assert broken.broken[0]["bytes"] == 2915041280
    assert broken.grown_stacks[0]["delta"] == 1207680000
    text = str(broken)
    assert "FAIL  --max-growth (reserved peak)   device 0: reserved peak 2.71 GiB against 236 MiB in the baseline, +1078.0%, limit +10%" in text
    assert "+1.12 GiB  linear.py:134 forward < /srv/jobs/train.py:96 run" in text
    assert isinstance(broken, AssertionError)


def test_check_can_return_a_broken_verdict_instead_of_raising():
    verdict = vramscope.check(CORPUS / "oom_leak.pickle", max_reserved_peak="1GiB", raise_on_failure=False)
    assert verdict["passed"] is False and verdict["failures"] == 1


def test_bad_input_raises_with_the_binarys_message(tmp_path):
    with pytest.raises(vramscope.VramscopeError, match=r"vramscope check: cannot open .*missing\.pickle") as raised:
        vramscope.check(tmp_path / "missing.pickle", max_reserved_peak="1GiB")
    assert raised.value.returncode == 2
    with pytest.raises(vramscope.VramscopeError, match="ambiguous|12G") as raised:
        vramscope.check(CORPUS / "oom_leak.pickle", max_reserved_peak="12G")
    with pytest.raises(vramscope.VramscopeError, match="baseline"):
        vramscope.check(CORPUS / "oom_leak.pickle", max_growth=5)


def test_stats_answers_the_binarys_json():
    devices = vramscope.stats(CORPUS / "oom_leak.pickle")["devices"]
    assert devices[0]["reserved_peak_bytes"] == 2915041280
    assert devices[0]["ooms"] == 1


def test_predict_takes_runs_with_their_sizes():
    runs = {PREDICT_RUNS / ("attention_%d.pickle" % n): n for n in (128, 256, 384)}
    answer = vramscope.predict(runs, at=[512])
    assert answer["predictions"][0]["size"] == 512
    assert answer["predictions"][0]["reserved_peak_bytes"] == 811597824
    # Every integer size is searched unless a step is given (issue 43): the
    # H200's grid at step 64 found 2688 fitting and 2752 not.
    largest = vramscope.predict(runs, largest=True, capacity="8GiB")
    assert largest["largest_fitting_size"] == 2697 and largest["step"] == 1
    with pytest.raises(TypeError, match="must be an integer"):
        vramscope.predict({"a.pickle": "8"}, at=[16])


def test_upload_to_an_unreachable_server_raises_naming_it():
    with pytest.raises(vramscope.VramscopeError, match="cannot reach http://127.0.0.1:9/api/v1/snapshots") as raised:
        vramscope.upload(CORPUS / "oom_leak.pickle", server="http://127.0.0.1:9", token="secret", job="train")
    assert "secret" not in " ".join(raised.value.command)


def test_a_missing_binary_says_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAMSCOPE_BIN", str(tmp_path / "nothing"))
    with pytest.raises(vramscope.BinaryNotFound, match="VRAMSCOPE_BIN=.*nothing is not an executable file"):
        vramscope.stats(CORPUS / "oom_leak.pickle")


def test_python_m_vramscope_version_prints_both_versions():
    out = subprocess.run([sys.executable, "-m", "vramscope", "--version"], stdout=subprocess.PIPE, check=True)
    lines = out.stdout.decode().splitlines()
    assert lines[0] == "vramscope (Python package) %s" % vramscope.__version__
    assert lines[1].startswith("vramscope %s (" % vramscope.__version__)


def test_the_package_version_is_the_workspaces():
    cargo = (CORPUS.parent.parent.parent / "Cargo.toml").read_text()
    assert 'version = "%s"' % vramscope.__version__ in cargo


def test_upload_stores_the_snapshot_with_its_labels(server):
    answer = vramscope.upload(CORPUS / "oom_leak.pickle", server=server, job="train", rank=1, tags=["step=3"], trigger="oom")
    assert answer["status"] == "ready"
    stored = stored_snapshots(server)
    assert [(s["id"], s["job"], s["rank"], s["tags"], s["trigger"]) for s in stored] == [
        (answer["id"], "train", 1, ["step=3"], "oom")
    ]


def test_regression_upload_takes_the_trigger_from_the_file(server):
    # trigger defaulted to "manual", even for a file that records an OOM.
    oom = vramscope.upload(CORPUS / "oom_leak.pickle", server=server)
    quiet = vramscope.upload(CORPUS / "mlp_train_all.pickle", server=server)
    said = vramscope.upload(CORPUS / "ring_overflow.pickle", server=server, trigger="threshold")
    triggers = {s["id"]: s["trigger"] for s in stored_snapshots(server)}
    assert (triggers[oom["id"]], triggers[quiet["id"]], triggers[said["id"]]) == ("oom", "manual", "threshold")


# -- do no harm: the history context and what recording does when it fails --


def test_regression_auto_records_frees_without_stacks_where_checkpointing_would_die(tmp_path, fake_cuda, torch_log, monkeypatch, capfd):
    """PyTorch 2.11 on Python < 3.13 turns the exception non-reentrant
    checkpointing raises into a SystemError when frees record their stacks
    (issue 42): the probe sees it and `auto` records `alloc`."""
    from vramscope import _capture

    monkeypatch.setenv("FAKE_TORCH_FREE_STACKS", "lost")
    with vramscope.recorded_memory(tmp_path / "step.pickle"):
        pass
    assert "record enabled=all max_entries=1000000 context=alloc" in logged(torch_log)
    assert capfd.readouterr().err == (
        "vramscope_capture: frees are recorded without their stacks (context 'alloc'): with torch 2.11.0+fake on "
        "Python %d.%d, recording them turns an exception raised inside backward (as non-reentrant gradient "
        "checkpointing raises at every step) into a SystemError. Allocation stacks, the leak ranking and the OOM "
        "post-mortem are unaffected.\n" % sys.version_info[:2]
    )
    # Said once per process, and carried by the snapshots the process takes.
    with vramscope.recorded_memory(tmp_path / "again.pickle"):
        pass
    assert capfd.readouterr().err == ""
    history = vramscope.recording.take_snapshot()["vramscope_capture"]["history"]
    assert history["context"] == "alloc" and history["requested"] == "auto" and "SystemError" in history["note"]
    assert _capture.free_stacks_are_safe(__import__("torch"))[0] is False


def test_auto_records_free_stacks_where_the_exception_survives(tmp_path, fake_cuda, torch_log, capfd, monkeypatch):
    import torch
    from vramscope import _capture

    monkeypatch.setattr(torch, "__version__", "2.12.0+fake")  # a release not seen losing it

    with vramscope.recorded_memory(tmp_path / "step.pickle"):
        pass
    assert "record enabled=all max_entries=1000000 context=all" in logged(torch_log)
    assert capfd.readouterr().err == ""
    assert _capture._history == {"context": "all", "requested": "auto", "stacks": "all", "note": None}


def test_a_probe_that_cannot_tell_chooses_alloc(tmp_path, fake_cuda, torch_log, monkeypatch, capfd):
    import torch

    monkeypatch.delattr(torch.autograd, "Function")
    with vramscope.recorded_memory(tmp_path / "step.pickle"):
        pass
    assert "record enabled=all max_entries=1000000 context=alloc" in logged(torch_log)
    assert "could not be told: the probe failed (AttributeError" in capfd.readouterr().err


def test_an_explicit_context_is_recorded_as_asked_without_a_probe(tmp_path, fake_cuda, torch_log, monkeypatch):
    monkeypatch.setenv("FAKE_TORCH_FREE_STACKS", "lost")
    with vramscope.recorded_memory(tmp_path / "step.pickle", context="all"):
        pass
    assert [l for l in logged(torch_log) if l.startswith("record")] == [
        "record enabled=all max_entries=1000000 context=all",
        "record stop",
    ]


def test_regression_a_recording_that_cannot_start_lets_the_block_run_and_raise_its_own(tmp_path, fake_cuda, torch_log, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_TORCH_RECORD_FAILS", "1")
    ran = []
    with vramscope.recorded_memory(tmp_path / "step.pickle", context="all"):
        ran.append(1)
    with pytest.raises(KeyError) as raised:
        with vramscope.recorded_memory(tmp_path / "oom.pickle", context="all"):
            raise KeyError("the block's own")
    assert ran == [1] and not (tmp_path / "step.pickle").exists()
    # The block's exception is its own: ours is not chained to it.
    assert raised.value.__context__ is None and raised.value.__cause__ is None
    # Each file that will be missing is named.
    assert capfd.readouterr().err == "".join(
        "vramscope: the memory was not recorded (RuntimeError: fake torch: recording refused); the block runs "
        "unrecorded and %s is not written\n" % (tmp_path / name)
        for name in ("step.pickle", "oom.pickle")
    )


def test_regression_a_snapshot_that_cannot_be_written_never_replaces_the_blocks_exception(tmp_path, fake_cuda, torch_log, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_TORCH_DUMP_FAILS", "1")
    with pytest.raises(KeyError, match="the block's own"):
        with vramscope.recorded_memory(tmp_path / "oom.pickle"):
            raise KeyError("the block's own")
    with vramscope.recorded_memory(tmp_path / "step.pickle"):
        pass
    assert logged(torch_log)[-1] == "record stop"
    assert "the snapshot could not be written (RuntimeError: fake torch: dump refused)" in capfd.readouterr().err


def test_regression_auto_records_alloc_where_this_torch_was_seen_losing_the_exception(tmp_path, fake_cuda, torch_log, capfd, monkeypatch):
    """On an H100 (torch 2.11.0+cu130, Python 3.12.3) the Trainer with
    non-reentrant checkpointing died under `all` while an earlier probe had
    said "kept": 2.11 on Python < 3.13 records `alloc` whatever the probe
    says (the fake here keeps the exception)."""
    import torch

    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    with vramscope.recorded_memory(tmp_path / "step.pickle"):
        pass
    assert "record enabled=all max_entries=1000000 context=alloc" in logged(torch_log)
    assert "(seen on a GPU with this torch; the probe could not show it)" in capfd.readouterr().err
    monkeypatch.setattr(sys, "version_info", (3, 13, 0))
    from vramscope import _capture

    monkeypatch.setattr(_capture, "_probed", None)
    assert _capture.free_stacks_are_safe(torch) == (True, ""), "Python 3.13 does not lose it"
