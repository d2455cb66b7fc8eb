"""The exceptions the package raises."""


class VramscopeError(Exception):
    """The `vramscope` binary refused its input (exit code 2: an unreadable
    file, no trace for a peak rule, a missing option) or could not run at
    all. The message is the binary's own, with the command that failed.

    Attributes: `command` (the argument list run, or None), `returncode`
    (None when the binary was not run), `stderr` (the binary's stderr text).
    """

    def __init__(self, message, command=None, returncode=None, stderr=""):
        super().__init__(message)
        self.command = command
        self.returncode = returncode
        self.stderr = stderr


class BinaryNotFound(VramscopeError):
    """No `vramscope` binary: not installed with the wheel, not on PATH, and
    $VRAMSCOPE_BIN unset or wrong."""


class MemoryBudgetExceeded(AssertionError):
    """A `vramscope check` rule is broken (exit code 1).

    `verdict` is the check's JSON (`passed`, `failures`, `rules` with each
    figure, `grown` with the stacks whose live memory grew most against the
    baseline); `broken` lists the broken rules; `grown_stacks` the grown
    stacks of every device, largest growth first. `str()` reads like the
    CLI's verdict: each broken rule with its figures, then the top stacks
    that grew.

    An AssertionError, so that a test asserting a budget fails (not errors)
    when it is broken.
    """

    def __init__(self, verdict, snapshot=None):
        self.verdict = verdict
        self.snapshot = snapshot
        self.broken = [rule for rule in verdict.get("rules", []) if not rule.get("passed", True)]
        self.grown_stacks = [stack for device in verdict.get("grown", []) for stack in device.get("stacks", [])]
        from ._format import describe_verdict

        super().__init__(describe_verdict(verdict, snapshot))
