"""`torch.cuda.memory`, faked (see `torch/__init__.py`)."""

import os
import pickle
import shutil

from .._log import log

_recording = False
# The context being recorded (None when not recording).
_context = None


def _record_memory_history(
    enabled="all", context="all", stacks="all", max_entries=1, global_record_annotations=False
):
    """$FAKE_TORCH_RECORD_FAILS=1: starting fails, as it does under a
    backend that keeps no history."""
    global _recording, _context
    if enabled is not None and os.environ.get("FAKE_TORCH_RECORD_FAILS") == "1":
        raise RuntimeError("fake torch: recording refused")
    _recording = enabled is not None
    _context = context if _recording else None
    if _recording:
        extra = " annotations=global" if global_record_annotations else ""
        log("record enabled=%s max_entries=%s context=%s%s" % (enabled, max_entries, context, extra))
    else:
        log("record stop")


def _dump_snapshot(filename="dump_snapshot.pickle"):
    """$FAKE_TORCH_DUMP_FAILS=1: the dump fails."""
    if os.environ.get("FAKE_TORCH_DUMP_FAILS") == "1":
        raise RuntimeError("fake torch: dump refused")
    if not _recording:
        raise RuntimeError("fake torch: _dump_snapshot while history is not recorded")
    shutil.copyfile(os.environ["FAKE_TORCH_SNAPSHOT"], filename)
    log("dump %s" % os.path.basename(filename))


def _snapshot(device=None):
    with open(os.environ["FAKE_TORCH_SNAPSHOT"], "rb") as f:
        taken = pickle.load(f)
    log("snapshot")
    return taken
