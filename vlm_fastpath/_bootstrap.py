"""Imported by ``vlm_fastpath.pth`` at interpreter start; must be cheap and never raise."""

try:
    from .activation import bootstrap as _bootstrap

    _bootstrap()
except Exception:  # noqa: BLE001 - never stop the interpreter from starting
    pass
