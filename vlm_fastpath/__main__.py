"""``python -m vlm_fastpath`` is ``vlm-fastpath``."""

import sys

from .cli import main

sys.exit(main())
