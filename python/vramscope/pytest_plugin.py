"""The pytest plugin, active once the package is installed (entry point
`pytest11`):

    @pytest.mark.cuda_memory(max_reserved_peak="12GiB", baseline="train_step", max_growth="5%")
    def test_train_step(): ...

records the allocator's history around the test, writes its snapshot and
fails the test when `vramscope check` finds a rule broken, naming the rule,
its figures and the stacks that grew. Rules: `max_reserved_peak`,
`max_allocated_peak` (sizes: bytes or `"12GiB"`), `max_fragmentation`,
`max_growth` (percentages, the latter against `baseline`); `context`
chooses what the history records (default "auto", see
`vramscope.recorded_memory`). `baseline` is a name, looked up as NAME.pickle in the baseline folder, a path (relative to
the test's file), or True for the test's own snapshot name.

Without CUDA (no torch, or no GPU) a marked test is skipped, with the
reason. Options:

* `--vramscope-dir DIR`: keep each test's snapshot there (default
  $VRAMSCOPE_SNAPSHOTS, else pytest's temporary folder);
* `--vramscope-baseline-dir DIR`: where baselines named by name live
  (default `memory-baselines` under the rootdir);
* `--vramscope-update-baselines`: write each marked test's snapshot as its
  baseline instead of checking growth against it.

The `memory_snapshot` fixture records around a test without a budget and
gives the snapshot's path (`test_step.pickle`, or `test_step.batch-4.pickle`
for a parametrized test: the runs `vramscope predict` reads).
"""

import os
import shutil
from pathlib import Path

import pytest

from ._capture import CONTEXTS
from .cli import check
from .errors import MemoryBudgetExceeded
from .recording import recording, snapshot_name

MARKER = "cuda_memory"
_RULES = ("max_reserved_peak", "max_allocated_peak", "max_fragmentation", "max_growth")
_OPTIONS = _RULES + ("baseline", "max_entries", "top", "context")


def pytest_addoption(parser):
    group = parser.getgroup("vramscope", "CUDA memory budgets (vramscope)")
    group.addoption(
        "--vramscope-dir",
        metavar="DIR",
        default=None,
        help="keep each test's memory snapshot in DIR (default: $VRAMSCOPE_SNAPSHOTS, else pytest's temporary folder)",
    )
    group.addoption(
        "--vramscope-baseline-dir",
        metavar="DIR",
        default=None,
        help="where baselines given by name are read and written (default: memory-baselines under the rootdir)",
    )
    group.addoption(
        "--vramscope-update-baselines",
        action="store_true",
        default=False,
        help="write each cuda_memory test's snapshot as its baseline instead of checking growth against it",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "cuda_memory(max_reserved_peak=None, max_allocated_peak=None, max_fragmentation=None, "
        "baseline=None, max_growth=None): record the test's CUDA memory and fail it when "
        "vramscope check finds a rule broken; skipped without CUDA",
    )
    config._vramscope_baselines_written = []
    config._vramscope_unchecked = []


def cuda_unavailable_reason():
    """Why CUDA memory cannot be recorded here (None when it can)."""
    try:
        import torch
    except ImportError:
        return "vramscope: torch is not installed"
    try:
        available = torch.cuda.is_available()
    except Exception as e:  # a broken driver says so here
        return "vramscope: CUDA is not usable: %s" % e
    if not available:
        return "vramscope: CUDA is not available (torch %s sees no GPU)" % getattr(torch, "__version__", "?")
    return None


def snapshot_dir(config):
    """The folder this session's snapshots go to."""
    chosen = config.getoption("vramscope_dir") or os.environ.get("VRAMSCOPE_SNAPSHOTS")
    if chosen:
        return Path(chosen)
    if not hasattr(config, "_vramscope_tmp"):
        config._vramscope_tmp = config._tmp_path_factory.mktemp("vramscope", numbered=False) if hasattr(
            config, "_tmp_path_factory"
        ) else Path(".vramscope-snapshots")
    return config._vramscope_tmp


def snapshot_path(item):
    """Where this test's snapshot is written."""
    callspec = getattr(item, "callspec", None)
    name = snapshot_name(getattr(item, "originalname", item.name), callspec.params if callspec else None)
    return snapshot_dir(item.config) / name


def marker_problem(item, marker):
    """What is wrong with a cuda_memory marker's arguments (None when nothing)."""
    unknown = set(marker.kwargs) - set(_OPTIONS)
    if marker.args or unknown:
        return "%s: @pytest.mark.cuda_memory takes keyword arguments %s; got %s" % (
            item.nodeid,
            ", ".join(_OPTIONS),
            ", ".join(sorted(unknown)) or "positional arguments",
        )
    context = marker.kwargs.get("context", "auto")
    if context not in CONTEXTS:
        return "%s: cuda_memory(context=...) is one of %s; got %r" % (item.nodeid, ", ".join(CONTEXTS), context)
    if marker.kwargs.get("max_growth") is not None and not marker.kwargs.get("baseline"):
        return "%s: cuda_memory(max_growth=...) needs baseline=NAME or a path" % item.nodeid
    return None


def baseline_path(item, baseline):
    """The baseline file a marker names: NAME -> <baseline dir>/NAME.pickle;
    a path (with a folder or a suffix) relative to the test's file; True ->
    the test's own snapshot name in the baseline dir."""
    config = item.config
    folder = Path(config.getoption("vramscope_baseline_dir") or Path(str(config.rootpath)) / "memory-baselines")
    if baseline is True:
        return folder / snapshot_path(item).name
    text = os.fspath(baseline)
    if os.sep in text or "/" in text or text.endswith((".pickle", ".pkl", ".gz", ".zst")):
        path = Path(text)
        return path if path.is_absolute() else Path(str(item.path)).parent / path
    return folder / ("%s.pickle" % text)


def pytest_collection_modifyitems(session, config, items):
    # A misspelt rule stops the run here, also on a machine without CUDA.
    problems = [p for p in (marker_problem(i, i.get_closest_marker(MARKER)) for i in items if i.get_closest_marker(MARKER)) if p]
    if problems:
        raise pytest.UsageError("\n".join(problems))
    # A skip mark (rather than pytest.skip in a hook) reports the test's own
    # file and line as the skip's place.
    needing_cuda = [i for i in items if i.get_closest_marker(MARKER) or "memory_snapshot" in getattr(i, "fixturenames", ())]
    if not needing_cuda:
        return
    reason = cuda_unavailable_reason()
    if reason is not None:
        for item in needing_cuda:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return (yield)
    options = dict(marker.kwargs)
    path = snapshot_path(item)
    chosen = {key: options[key] for key in ("max_entries", "context") if key in options}
    with recording(path, **chosen) as outcome:
        result = yield  # the test; if it raises, the snapshot is written all the same
    if not outcome.written:
        # Recording is never a reason for a test to fail: the test's own
        # outcome stands, and the session's summary says what went unchecked.
        item.config._vramscope_unchecked.append("%s: budget not checked: %s" % (item.nodeid, outcome.lost))
        return result
    item.user_properties.append(("vramscope_snapshot", str(path)))
    _check(item, options, path)
    return result


def _check(item, options, path):
    rules = {key: options[key] for key in _RULES if options.get(key) is not None}
    baseline = options.get("baseline")
    if baseline:
        base = baseline_path(item, baseline)
        if item.config.getoption("vramscope_update_baselines"):
            base.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, base)
            item.config._vramscope_baselines_written.append(str(base))
            rules.pop("max_growth", None)
        elif "max_growth" in rules:
            if not base.is_file():
                pytest.fail(
                    "%s: no baseline snapshot at %s; record one with --vramscope-update-baselines "
                    "(snapshot: %s)" % (item.nodeid, base, path),
                    pytrace=False,
                )
            rules["baseline"] = str(base)
    if not rules:
        return
    try:
        check(path, top=options.get("top", 5), **rules)
        return
    except MemoryBudgetExceeded as broken:
        message = str(broken)
    # Outside the except block: the failure is the verdict alone, not chained to the exception.
    pytest.fail(message, pytrace=False)


@pytest.fixture
def memory_snapshot(request):
    """Records the CUDA allocator around the test and yields the path its
    snapshot is written to (`test_step.pickle`, `test_step.batch-4.pickle`
    for a test parametrized by a size). Skipped without CUDA. In a test
    marked cuda_memory the marker records; the fixture just names the file."""
    reason = cuda_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    path = snapshot_path(request.node)
    if request.node.get_closest_marker(MARKER) is not None:
        yield path
        return
    with recording(path) as outcome:
        yield path
    if not outcome.written:
        request.config._vramscope_unchecked.append("%s: no snapshot: %s" % (request.node.nodeid, outcome.lost))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    written = getattr(config, "_vramscope_baselines_written", [])
    if written:
        terminalreporter.write_line("vramscope: wrote %d baseline snapshot(s): %s" % (len(written), ", ".join(written)))
    for line in getattr(config, "_vramscope_unchecked", []):
        terminalreporter.write_line("vramscope: %s" % line, yellow=True)
