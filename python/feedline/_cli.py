"""The `feedline` command that `pip install ./python` puts on the environment's PATH: the CLI
binary packed beside the native module (feedline/_bin/feedline), run in this process's place."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "feedline")
    if not os.access(exe, os.X_OK):
        sys.exit("feedline: this install has no command-line binary (%s): it is packed by "
                 "`pip install ./python`; from a build tree, run build/release/tools/feedline" % exe)
    os.execv(exe, ["feedline"] + sys.argv[1:])


if __name__ == "__main__":
    main()
