"""Builds feedline's native module with the project's CMake (see pyproject.toml)."""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    """Configures the whole project (release settings, no tests) for this interpreter, builds
    the _feedline target and puts the module where setuptools packs the extension."""

    def build_extension(self, ext):
        build = os.path.join(self.build_temp, "cmake")
        os.makedirs(build, exist_ok=True)
        subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                        "-DFEEDLINE_BUILD_TESTS=OFF", "-DFEEDLINE_WITH_PYTHON=ON",
                        "-DPython_EXECUTABLE=" + sys.executable], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "_feedline"], check=True)
        built = os.path.join(build, "python", "feedline")
        module = [f for f in os.listdir(built) if f.startswith("_feedline") and f.endswith(".so")]
        if len(module) != 1:
            raise RuntimeError("the CMake build made no _feedline module in " + built)
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(built, module[0]), dest)


setup(ext_modules=[Extension("feedline._feedline", sources=[])], cmdclass={"build_ext": CMakeBuild})
