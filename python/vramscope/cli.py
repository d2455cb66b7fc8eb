"""The `vramscope` binary from Python: `check`, `stats`, `predict` and
`upload` run it with `--json` and return its parsed answer.

The binary is looked for, in order: $VRAMSCOPE_BIN (an explicit choice wins),
the scripts folder the wheel installed it in (beside this interpreter's
`python`, or the user's scripts folder), then PATH.
"""

import json
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

from .errors import BinaryNotFound, MemoryBudgetExceeded, VramscopeError

__all__ = ["find_binary", "check", "stats", "predict", "upload", "binary_version"]

#: Environment variable naming the binary to use.
ENV_BINARY = "VRAMSCOPE_BIN"
_EXE = "vramscope" + (sysconfig.get_config_var("EXE") or "")


def _wheel_candidates():
    """Where pip puts the wheel's binary: the scripts folder of this
    interpreter's scheme, the user scheme's, and the one beside the
    site-packages this package was loaded from (a `pip install --target`)."""
    folders = [sysconfig.get_path("scripts")]
    try:
        user_scheme = sysconfig.get_preferred_scheme("user")  # Python 3.10+
    except AttributeError:
        user_scheme = "nt_user" if os.name == "nt" else "posix_user"
    try:
        folders.append(sysconfig.get_path("scripts", scheme=user_scheme))
    except KeyError:
        pass
    package = Path(__file__).resolve().parent
    # <prefix>/lib/pythonX.Y/site-packages/vramscope -> <prefix>/bin
    folders.append(str(package.parents[3] / "bin") if len(package.parents) > 3 else None)
    return [Path(folder) / _EXE for folder in folders if folder]


def find_binary():
    """The path of the `vramscope` binary to run; raises BinaryNotFound,
    saying where it looked, when there is none."""
    explicit = os.environ.get(ENV_BINARY)
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        raise BinaryNotFound("$%s=%s is not an executable file" % (ENV_BINARY, explicit))
    looked = []
    for candidate in _wheel_candidates():
        looked.append(str(candidate.parent))
        if candidate.is_file() and os.access(str(candidate), os.X_OK):
            return str(candidate)
    on_path = shutil.which("vramscope")
    if on_path:
        return on_path
    raise BinaryNotFound(
        "no vramscope binary: not beside this Python (looked in %s), not on PATH, and $%s is unset; "
        "install the vramscope wheel, or set $%s to the binary built from server/ (cargo build --release)"
        % (", ".join(dict.fromkeys(looked)), ENV_BINARY, ENV_BINARY)
    )


def _run(args, env=None):
    binary = find_binary()
    command = [binary] + [str(a) for a in args]
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    try:
        return command, subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env)
    except OSError as e:
        raise VramscopeError("cannot run %s: %s" % (binary, e), command=command) from e


def _message(stderr):
    """The binary's error line(s), without its `vramscope: error: ` prefix."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    text = "\n".join(lines) if lines else "(no message)"
    for prefix in ("vramscope: error: ", "error: "):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def _subcommand(command):
    return " ".join(["vramscope", command[1]] if len(command) > 1 else ["vramscope"])


def _decode(command, process):
    stdout = process.stdout.decode("utf-8", "replace")
    try:
        return json.loads(stdout)
    except ValueError:
        raise VramscopeError(
            "%s printed no JSON (exit code %d): %r" % (_subcommand(command), process.returncode, stdout[:200]),
            command=command,
            returncode=process.returncode,
            stderr=process.stderr.decode("utf-8", "replace"),
        ) from None


def run_json(args, env=None):
    """Runs `vramscope ARGS` and returns its JSON answer (stdout). Exit code
    2 (bad input) and any other failure raise VramscopeError with the
    binary's message."""
    command, process = _run(args, env)
    if process.returncode != 0:
        stderr = process.stderr.decode("utf-8", "replace")
        raise VramscopeError(
            "%s: %s" % (_subcommand(command), _message(stderr)),
            command=command,
            returncode=process.returncode,
            stderr=stderr,
        )
    return _decode(command, process)


def _size(value, name):
    """A size for the CLI: bytes as an int, or text such as `12GiB` (checked by the binary)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError("%s must be a number of bytes or a size such as '12GiB', not %r" % (name, value))
    return str(value)


def _percent(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError("%s must be a percentage such as 5 or '5%%', not %r" % (name, value))
    return str(value).strip()


def _path(value, name):
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError("%s must be a path, not %r" % (name, value))
    return os.fspath(value)


def check(
    path,
    max_reserved_peak=None,
    max_allocated_peak=None,
    max_fragmentation=None,
    baseline=None,
    max_growth=None,
    top=5,
    junit=None,
    raise_on_failure=True,
):
    """Checks a snapshot against a memory budget (`vramscope check --json`).

    Sizes are bytes or text (`"12GiB"`, `"500MB"`); percentages a number or
    `"5%"`. `max_growth` needs `baseline`, another snapshot. Returns the
    verdict (`passed`, `failures`, `rules`, `grown`) when every rule holds;
    when one is broken raises MemoryBudgetExceeded carrying the verdict and
    the stacks that grew (or returns it, with `raise_on_failure=False`).
    Bad input (an unreadable file, no rule, no trace for a peak rule) raises
    VramscopeError with the binary's message.
    """
    args = ["check", _path(path, "path"), "--json", "--top", str(int(top))]
    if max_reserved_peak is not None:
        args += ["--max-reserved-peak", _size(max_reserved_peak, "max_reserved_peak")]
    if max_allocated_peak is not None:
        args += ["--max-allocated-peak", _size(max_allocated_peak, "max_allocated_peak")]
    if max_fragmentation is not None:
        args += ["--max-fragmentation", _percent(max_fragmentation, "max_fragmentation")]
    if baseline is not None:
        args += ["--baseline", _path(baseline, "baseline")]
    if max_growth is not None:
        args += ["--max-growth", _percent(max_growth, "max_growth")]
    if junit is not None:
        args += ["--junit", _path(junit, "junit")]
    command, process = _run(args)
    if process.returncode == 1:
        verdict = _decode(command, process)
        if verdict.get("passed") is False:
            if raise_on_failure:
                raise MemoryBudgetExceeded(verdict, snapshot=os.fspath(path))
            return verdict
    if process.returncode != 0:
        stderr = process.stderr.decode("utf-8", "replace")
        raise VramscopeError(
            "vramscope check: %s" % _message(stderr), command=command, returncode=process.returncode, stderr=stderr
        )
    return _decode(command, process)


def stats(path):
    """A snapshot's figures per device (`vramscope stats --json`): reserved,
    allocated, requested and their peaks, fragmentation, OOMs."""
    return run_json(["stats", "--json", _path(path, "path")])


def predict(runs, at=None, largest=False, capacity=None, alloc_conf=None, step=None, device=None):
    """What sizes never run would take (`vramscope predict --json`).

    `runs` maps each recorded run's snapshot to its size (`{"b8.pickle": 8,
    "b16.pickle": 16}`): runs of one program at several values of one
    integer knob. `at` lists sizes to predict; `largest=True` finds the
    largest size that fits under `capacity` (bytes or `"80GiB"`; default: the
    recorded memory fraction of the GPU, else its whole memory)."""
    if not runs:
        raise ValueError("predict needs recorded runs: {snapshot path: size, ...}, at least two")
    args = ["predict", "--json"]
    for path, size in runs.items():
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError("the size of run %s must be an integer, not %r" % (path, size))
        args.append("%s=%d" % (_path(path, "runs key"), size))
    if at:
        args += ["--at", ",".join(str(int(n)) for n in ([at] if isinstance(at, int) else at))]
    if largest:
        args.append("--largest")
    if capacity is not None:
        args += ["--capacity", _size(capacity, "capacity")]
    if alloc_conf is not None:
        args += ["--alloc-conf", str(alloc_conf)]
    if step is not None:
        args += ["--step", str(int(step))]
    if device is not None:
        args += ["--device", str(int(device))]
    return run_json(args)


def upload(path, server=None, token=None, name=None, job=None, host=None, rank=None, tags=None, trigger=None):
    """Uploads a snapshot to a vramscope server (`vramscope upload`) and
    returns the server's JSON answer (the stored snapshot's id and figures).

    `server` and `token` default to $VRAMSCOPE_SERVER and $VRAMSCOPE_TOKEN;
    the token is passed in the environment, never on the command line.
    `tags` is a list (or comma-separated text) such as `["step=120"]`.
    `trigger` is manual, threshold or oom; None takes it from the file
    (oom when its trace records an out-of-memory event, else manual)."""
    args = ["upload", _path(path, "path")]
    if trigger is not None:
        args += ["--trigger", str(trigger)]
    if server is not None:
        args += ["--server", str(server)]
    for option, value in (("--name", name), ("--job", job), ("--host", host)):
        if value is not None:
            args += [option, str(value)]
    if rank is not None:
        args += ["--rank", str(int(rank))]
    if tags:
        args += ["--tags", tags if isinstance(tags, str) else ",".join(str(t) for t in tags)]
    env = {"VRAMSCOPE_TOKEN": str(token)} if token is not None else None
    return run_json(args, env=env)


def binary_version():
    """`vramscope --version` of the binary this package runs, e.g. `vramscope 0.1.0`."""
    command, process = _run(["--version"])
    if process.returncode != 0:
        raise VramscopeError(
            "%s --version failed: %s" % (command[0], _message(process.stderr.decode("utf-8", "replace"))),
            command=command,
            returncode=process.returncode,
        )
    return process.stdout.decode("utf-8", "replace").strip()
