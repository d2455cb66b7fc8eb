"""Loaded by Python at start-up because `vramscope agent` puts this folder
first on PYTHONPATH: starts `vramscope_capture` in every Python process of
the job (torchrun's workers inherit the environment), then runs the
sitecustomize this one shadows, if there is one."""

import os
import sys


def _start():
    try:
        import vramscope_capture

        vramscope_capture.install_from_env()
    except Exception as e:  # never break the job's start-up
        sys.stderr.write("vramscope_capture: not started: %s\n" % e)


def _chain():
    """Imports the next sitecustomize on sys.path (e.g. a distribution's)."""
    here = os.path.dirname(os.path.abspath(__file__))
    saved_path = list(sys.path)
    saved_module = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as e:
        sys.stderr.write("vramscope_capture: the shadowed sitecustomize failed: %s\n" % e)
    finally:
        sys.path[:] = saved_path
        if saved_module is not None:
            sys.modules["sitecustomize"] = saved_module


_start()
_chain()
