"""The pytest plugin, run by pytester on CPU: the fake torch writes a real
corpus snapshot and `vramscope check` really runs on it."""

import pytest

from conftest import CORPUS, PLUGIN_ARGS, logged

TRAIN_STEP = """
import pytest

@pytest.mark.cuda_memory({rules})
def test_train_step():
    pass
"""


def run(pytester, *args):
    return pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", *args)


def test_a_budget_that_holds_passes_and_keeps_the_snapshot(pytester, torch_log):
    pytester.makepyfile(TRAIN_STEP.format(rules='max_reserved_peak="1GiB", max_fragmentation=50'))
    result = run(pytester, "--vramscope-dir", "snaps")
    result.assert_outcomes(passed=1)
    kept = pytester.path / "snaps" / "test_train_step.pickle"
    assert kept.read_bytes() == (CORPUS / "mlp_train_all.pickle").read_bytes()
    assert "record enabled=all max_entries=1000000 context=alloc" in logged(torch_log)


def test_a_broken_rule_fails_the_test_naming_the_rule_and_the_figures(pytester, torch_log):
    pytester.makepyfile(TRAIN_STEP.format(rules='max_reserved_peak="100MiB", max_allocated_peak="1GiB"'))
    result = run(pytester, "--vramscope-dir", "snaps")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*snaps/test_train_step.pickle: memory budget broken, 1 of 2 rules",
            "*FAIL  --max-reserved-peak            device 0: reserved peak 236 MiB, limit 100 MiB",
        ]
    )


def test_growth_against_a_baseline_names_the_stacks_that_grew(pytester, torch_log, monkeypatch):
    pytester.makepyfile(TRAIN_STEP.format(rules='baseline="train_step", max_growth="5%"'))
    # The baseline: the small run, written by --vramscope-update-baselines.
    first = run(pytester, "--vramscope-dir", "snaps", "--vramscope-update-baselines")
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["vramscope: wrote 1 baseline snapshot(s): *memory-baselines/train_step.pickle"])
    assert (pytester.path / "memory-baselines" / "train_step.pickle").is_file()
    # The same run again: no growth.
    run(pytester, "--vramscope-dir", "snaps").assert_outcomes(passed=1)
    # A leaking run against it: the growth rules break, the leaking stacks are named.
    monkeypatch.setenv("FAKE_TORCH_SNAPSHOT", str(CORPUS / "oom_leak.pickle"))
    leaked = run(pytester, "--vramscope-dir", "snaps")
    leaked.assert_outcomes(failed=1)
    leaked.stdout.fnmatch_lines(
        [
            "*memory budget broken, 2 of 2 rules",
            "baseline: *memory-baselines/train_step.pickle",
            "*FAIL  --max-growth (reserved peak)   device 0: reserved peak 2.71 GiB against 236 MiB in the baseline, +1078.0%, limit +5%",
            "*FAIL  --max-growth (requested peak)  device 0: requested peak 2.36 GiB against 226.10 MiB in the baseline, +968.9%, limit +5%",
            "stacks that grew most against the baseline (device 0 vs baseline device 0; all stacks +1.92 GiB):",
            "*+1.12 GiB  linear.py:134 forward < /srv/jobs/train.py:96 run",
        ]
    )
    assert leaked.stdout.str().count("memory budget broken") == 1
    leaked.stdout.no_fnmatch_line("*During handling of the above exception*")


def test_a_missing_baseline_fails_saying_how_to_record_one(pytester, torch_log):
    pytester.makepyfile(TRAIN_STEP.format(rules="baseline=True, max_growth=5"))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no baseline snapshot at *memory-baselines/test_train_step.pickle; record one with --vramscope-update-baselines*"])


def test_without_cuda_marked_tests_are_skipped_with_the_reason(pytester, torch_log, monkeypatch):
    monkeypatch.setenv("FAKE_TORCH_CUDA", "0")
    pytester.makepyfile(
        TRAIN_STEP.format(rules='max_reserved_peak="1MiB"')
        + "\ndef test_plain():\n    pass\n\ndef test_fixture(memory_snapshot):\n    pass\n"
    )
    result = run(pytester, "-rs")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        ["SKIPPED [[]1[]] test_without_cuda_marked_tests_are_skipped_with_the_reason.py:3: vramscope: CUDA is not available (torch 2.11.0+fake sees no GPU)"]
    )
    assert logged(torch_log) == []


def test_the_snapshot_is_written_when_the_test_raises_and_the_failure_is_the_tests(pytester, torch_log):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.cuda_memory(max_reserved_peak="1MiB")
        def test_oom():
            raise RuntimeError("CUDA out of memory")
        """
    )
    result = run(pytester, "--vramscope-dir", "snaps")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError: CUDA out of memory*"])
    result.stdout.no_fnmatch_line("*memory budget broken*")
    assert (pytester.path / "snaps" / "test_oom.pickle").is_file()
    assert logged(torch_log)[-2:] == ["dump test_oom.pickle", "record stop"]


def test_the_fixture_names_a_parametrized_tests_snapshot_after_its_size(pytester, torch_log):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("batch", [4, 8])
        def test_step(memory_snapshot, batch):
            assert memory_snapshot.name == "test_step.batch-%d.pickle" % batch
        """
    )
    result = run(pytester, "--vramscope-dir", "snaps")
    result.assert_outcomes(passed=2)
    assert sorted(p.name for p in (pytester.path / "snaps").iterdir()) == [
        "test_step.batch-4.pickle",
        "test_step.batch-8.pickle",
    ]


def test_a_misspelt_rule_stops_the_run_even_without_cuda(pytester, torch_log, monkeypatch):
    monkeypatch.setenv("FAKE_TORCH_CUDA", "0")
    pytester.makepyfile(TRAIN_STEP.format(rules='max_reserve_peak="1GiB"'))
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*::test_train_step: @pytest.mark.cuda_memory takes keyword arguments*; got max_reserve_peak"])


def test_the_marker_is_registered(pytester):
    result = run(pytester, "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.cuda_memory(*"])


def test_regression_a_recording_that_fails_never_fails_the_test_and_the_summary_says_what_went_unchecked(pytester, torch_log, monkeypatch):
    monkeypatch.setenv("FAKE_TORCH_RECORD_FAILS", "1")
    pytester.makepyfile(TRAIN_STEP.format(rules='max_reserved_peak="1MiB"'))
    result = run(pytester, "--vramscope-dir", "snaps", "-W", "error")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["vramscope: *::test_train_step: budget not checked: the memory was not recorded (RuntimeError: fake torch: "
         "recording refused)"]
    )


def test_the_marker_records_the_context_it_is_given(pytester, torch_log, monkeypatch):
    monkeypatch.setenv("FAKE_TORCH_FREE_STACKS", "lost")
    pytester.makepyfile(TRAIN_STEP.format(rules='max_reserved_peak="1GiB", context="all"'))
    run(pytester, "--vramscope-dir", "snaps").assert_outcomes(passed=1)
    assert [l for l in logged(torch_log) if l.startswith("record enabled")] == [
        "record enabled=all max_entries=1000000 context=all"
    ]
    pytester.makepyfile(TRAIN_STEP.format(rules='context="everything"'))
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cuda_memory(context=...) is one of auto, all, alloc, state; got 'everything'"])
