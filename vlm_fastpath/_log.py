"""The package logger: visible by default inside engines, silent-able with one variable.

Engines configure their own loggers only; a plugin's INFO line would otherwise vanish. We
attach a stderr handler to ``vlm_fastpath`` unless the application configured the root
logger. ``VLM_FASTPATH_LOG_LEVEL`` (default INFO) sets the level.
"""

from __future__ import annotations

import logging

from . import settings

_CONFIGURED = False


def get_logger(name: str = "vlm_fastpath") -> logging.Logger:
    global _CONFIGURED
    root = logging.getLogger("vlm_fastpath")
    if not _CONFIGURED:
        _CONFIGURED = True
        level = settings.log_level()
        root.setLevel(getattr(logging, level, logging.INFO))
        if not logging.getLogger().handlers and not root.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            root.addHandler(handler)
            root.propagate = False
    return logging.getLogger(name)
