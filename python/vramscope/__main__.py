"""`python -m vramscope --version`: the package's version and its binary's.
Any other arguments are handed to the binary (`python -m vramscope stats FILE`)."""

import os
import subprocess
import sys

from . import __version__
from .cli import find_binary
from .errors import VramscopeError


def main(argv=None):
    """Prints both versions for `--version`; runs the binary otherwise."""
    argv = sys.argv[1:] if argv is None else argv
    if argv in (["--version"], ["-V"]):
        print("vramscope (Python package) %s" % __version__)
        try:
            binary = find_binary()
            out = subprocess.run([binary, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            print("%s (%s)" % (out.stdout.decode("utf-8", "replace").strip(), binary))
            return out.returncode
        except VramscopeError as e:
            print("vramscope binary: %s" % e, file=sys.stderr)
            return 2
    try:
        binary = find_binary()
    except VramscopeError as e:
        print("vramscope: error: %s" % e, file=sys.stderr)
        return 2
    if os.name == "posix":
        os.execv(binary, [binary] + argv)
    return subprocess.call([binary] + argv)


if __name__ == "__main__":
    sys.exit(main())
