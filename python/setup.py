"""setup.py — the qgen package (pyproject.toml has its metadata). Building it copies
libqgen.so into the package when one is found: $QGEN_LIBRARY, else the build at
../build/libqgen.so (`cmake -S . -B build && cmake --build build` at the repository root).
Without either, the package finds libqgen at run time ($QGEN_LIBRARY or the system loader).
Nothing is downloaded or compiled here.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def found_library():
    env = os.environ.get("QGEN_LIBRARY")
    if env:
        if not os.path.exists(env):
            raise SystemExit(f"QGEN_LIBRARY={env}: no such file")
        return env
    built = os.path.join(HERE, "..", "build", "libqgen.so")
    return built if os.path.exists(built) else None


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        src = found_library()
        if src:
            dst = os.path.join(self.build_lib, "qgen", "libqgen.so.0")
            shutil.copyfile(os.path.realpath(src), dst)
            print(f"qgen: bundled {os.path.realpath(src)} as {dst}")
        else:
            print("qgen: no libqgen.so found to bundle; it is looked up at run time")


setup(cmdclass={"build_py": BuildPyWithLibrary})
