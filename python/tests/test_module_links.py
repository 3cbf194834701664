"""The native module is one more client of the library: it links feedline's library targets
(loader and below), no part of the command line. Nothing of CLI11, toml++, MPI or the CLI's own
code (feedline::tools) is in _feedline, and it needs no MPI library to load.
"""
import re
import shutil
import subprocess

import pytest

from feedline import _feedline

MODULE = _feedline.__file__
CLI_SYMBOLS = re.compile(r"CLI::|toml::|\bMPI_|\bompi_|feedline::tools::")


def tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.skip("no %s (binutils) on PATH: the module's links are not checked" % name)
    return path


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_the_module_needs_no_library_of_the_command_line():
    out = run(tool("readelf"), "-d", MODULE)
    assert out.returncode == 0, out.stderr
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out.stdout)
    assert needed, out.stdout  # libc at least: the pattern still reads readelf's output
    assert not [n for n in needed if re.search(r"mpi|toml|cli11", n, re.IGNORECASE)], needed


def test_the_module_holds_no_code_of_the_command_line():
    nm = tool("nm")
    lines = []
    for args in (["-C"], ["-C", "-D"]):  # the symbol table (absent when stripped), the dynamic one
        out = run(nm, *args, MODULE)
        assert out.returncode == 0 or "no symbols" in out.stderr, out.stderr
        lines += out.stdout.splitlines()
    assert lines, "nm listed no symbol of " + MODULE
    found = [line for line in lines if CLI_SYMBOLS.search(line)]
    assert not found, "\n".join(found[:20])


def test_the_package_without_its_module_says_what_to_build(tmp_path):
    """The package's .py files alone (a source tree, or a build that made only the CLI): importing
    it says what to build, not Python's "circular import" guess."""
    import os
    import sys
    import feedline
    pkg = tmp_path / "feedline"
    pkg.mkdir()
    src = os.path.dirname(feedline.__file__)
    for name in os.listdir(src):
        if name.endswith(".py"):
            shutil.copy(os.path.join(src, name), pkg / name)
    out = subprocess.run([sys.executable, "-c", "import feedline"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 1, out
    assert "ImportError" in out.stderr and "--target _feedline" in out.stderr, out.stderr
    assert "circular import" not in out.stderr.splitlines()[-1], out.stderr
