"""Ships ``vlm_fastpath.pth`` at the root of site-packages (metadata lives in pyproject.toml).

The .pth makes every Python process arm our patches when vLLM or SGLang is imported, covering
processes the engines' plugin entry points do not reach. setuptools has no declarative way to
place a file at the wheel root, hence this small build_py extension.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "vlm_fastpath.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        self.copy_file(os.path.join(here, PTH), os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
