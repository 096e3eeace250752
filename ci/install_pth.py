"""Copy vlm_fastpath.pth into this interpreter's site-packages.

A wheel install ships the .pth itself (setup.py puts it at the wheel root); an editable install
(`pip install -e .`, what `make` does) does not, so make copies it here.
"""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

source = Path(__file__).resolve().parent.parent / "vlm_fastpath.pth"
target = Path(sysconfig.get_paths()["purelib"]) / "vlm_fastpath.pth"
shutil.copyfile(source, target)
print(f"installed {target}")
