"""Builds feedline's native module and its `feedline` command with the project's CMake (see
pyproject.toml), and packs both with the Python files: `pip install --no-build-isolation
./python` puts `import feedline` and the `feedline` command into the environment.

What it builds is the module and the CLI alone (no tests, no examples), as a unity build with
precompiled headers and ccache where it is installed, in a build folder that stays between
installs (build/pip-<interpreter> in the source tree, or FEEDLINE_BUILD_DIR: a build folder of
the project's own, build/release say, where those targets are already built, makes an install
take seconds). Build requirements are checked first, and a missing one is named at once.
"""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TAG = "cp%d%d" % sys.version_info[:2]


def missing_requirements():
    """What this machine lacks to build the package, each with what installs it."""
    missing = []
    for tool, package in (("cmake", "cmake"), ("ninja", "ninja-build"), ("c++", "g++")):
        if shutil.which(tool) is None:
            missing.append("%s (Debian: apt install %s)" % (tool, package))
    include = sysconfig.get_paths().get("include") or ""
    if not os.path.exists(os.path.join(include, "Python.h")):
        missing.append("this interpreter's headers, Python.h in %s (Debian's python3: apt install "
                       "python3-dev; pyenv builds have them)" % (include or "?"))
    wants = [("numpy", "numpy (pip install numpy, or apt install python3-numpy)")]
    if importlib.util.find_spec("setuptools.command.bdist_wheel") is None:  # setuptools < 70.1
        wants.append(("wheel", "wheel (pip install wheel, or apt install python3-wheel)"))
    for module, package in wants:
        if importlib.util.find_spec(module) is None:
            missing.append(package)
    if pybind11_dir() is None:
        missing.append("pybind11 (apt install pybind11-dev, or pip install pybind11)")
    return missing


def pybind11_dir():
    """pybind11's CMake package: the pip package's where it is installed, else Debian's."""
    if importlib.util.find_spec("pybind11") is not None:
        import pybind11
        return pybind11.get_cmake_dir()
    for d in ("/usr/lib/cmake/pybind11", "/usr/share/cmake/pybind11"):
        if os.path.exists(os.path.join(d, "pybind11Config.cmake")):
            return d
    return None


def progress(line, tty):
    """Ninja's "[n/N] ..." lines on the terminal (pip shows a build's own output only with -v)."""
    m = re.match(r"\[(\d+)/(\d+)\]", line)
    if tty is not None and m:
        tty.write("\rfeedline: building the module and the command: %s of %s steps "
                  % (m.group(1), m.group(2)))
        tty.flush()


class CMakeBuild(build_ext):
    """Configures the project for this interpreter, builds the _feedline and feedline targets,
    and puts the module and the command (feedline/_bin/feedline) where setuptools packs them."""

    def build_extension(self, ext):
        build = os.environ.get("FEEDLINE_BUILD_DIR") or os.path.join(ROOT, "build", "pip-" + TAG)
        os.makedirs(build, exist_ok=True)
        configure = ["cmake", "-S", ROOT, "-B", build, "-G", "Ninja",
                     "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG",
                     "-DFEEDLINE_BUILD_TESTS=OFF", "-DFEEDLINE_WITH_PYTHON=ON",
                     "-DFEEDLINE_UNITY=ON", "-DPython_EXECUTABLE=" + sys.executable,
                     "-Dpybind11_DIR=" + pybind11_dir()]
        if shutil.which("ccache"):
            configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
        cache = os.path.join(build, "CMakeCache.txt")
        if os.environ.get("FEEDLINE_BUILD_DIR") and os.path.exists(cache):
            # A build folder of the project's own: used as it is configured, if for this Python.
            with open(cache) as f:
                m = re.search(r"^_?Python_EXECUTABLE:\w+=(.*)$", f.read(), re.M)
            if not m or os.path.realpath(m.group(1)) != os.path.realpath(sys.executable):
                raise RuntimeError("FEEDLINE_BUILD_DIR=%s is configured for %s, not for %s" % (
                    build, m.group(1) if m else "no Python", sys.executable))
        else:
            subprocess.run(configure, check=True, stdout=sys.stdout, stderr=sys.stderr)
        try:
            tty = open("/dev/tty", "w")
        except OSError:
            tty = None
        start = time.monotonic()
        with subprocess.Popen(["cmake", "--build", build, "-j", str(os.cpu_count() or 2),
                               "--target", "_feedline", "feedline"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
            for line in p.stdout:
                sys.stdout.write(line)
                progress(line, tty)
        if tty is not None:
            tty.write("\rfeedline: built in %.0f s%s\n" % (time.monotonic() - start, " " * 40))
            tty.close()
        if p.returncode != 0:
            raise RuntimeError("building feedline failed (pip install -v shows the compiler's "
                               "output)")
        built = os.path.join(build, "python", "feedline")
        module = [f for f in os.listdir(built) if f.startswith("_feedline") and f.endswith(".so")]
        if len(module) != 1:
            raise RuntimeError("the CMake build made no _feedline module in " + built)
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(built, module[0]), dest)
        # The command: packed beside the module, run by the `feedline` entry point (_cli.py).
        bindir = os.path.join(os.path.dirname(dest), "_bin")
        os.makedirs(bindir, exist_ok=True)
        shutil.copy2(os.path.join(build, "tools", "feedline"), os.path.join(bindir, "feedline"))


# pip's first step (dist_info) already needs wheel on old setuptools: check there too.
if any(a.startswith(("bdist", "build", "install", "develop", "editable", "dist_info", "egg_info"))
       for a in sys.argv[1:]):
    _missing = missing_requirements()
    if _missing:
        sys.exit("feedline cannot be built here; missing:\n  " + "\n  ".join(_missing))

setup(ext_modules=[Extension("feedline._feedline", sources=[])], cmdclass={"build_ext": CMakeBuild})
