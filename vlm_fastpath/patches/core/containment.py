"""Run-time fault containment for patch fast paths.

A patch that applied cleanly can still hit a bug on an input nobody tested. Without
containment that bug fails the engine's forward (or the request) although the engine's own
function would have answered. ``contained`` (a decorator for a wrapper) and ``call_contained``
(the same for one call) run the fast path and, on an unexpected exception:

- re-raise user-input errors (``ValueError`` and subclasses such as ``KimiInputError``, which
  the engines turn into a 400) and exceptions raised inside the engine's original function
  (the original would only fail again), untouched;
- otherwise answer the call with the engine's original function, when the wrapper declares
  that nothing was changed before the fault (``fallback=True``), and count the fault (logged
  once per patch with the traceback) only when the original succeeds: if the engine's own
  code fails on the same arguments, the input was bad, the engine's error propagates and
  nothing is counted, so bad input can never disable a patch; with ``fallback=False`` (or no
  original) the fault is counted and the exception propagates;
- after ``VLM_FASTPATH_FAULT_LIMIT`` faults (default 3) the patch is disabled for the process:
  every guarded call goes straight to the original and the registry reverts the patch and
  reports it as ``faulted`` (``vlm_fastpath.status()``, ``doctor``).
"""

from __future__ import annotations

import functools
import threading
import traceback
from collections.abc import Callable
from types import CodeType, TracebackType
from typing import Any, TypeVar

from ... import settings
from ..._log import get_logger

logger = get_logger("vlm_fastpath.patches")

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

USER_ERRORS: tuple[type[BaseException], ...] = (ValueError,)
_ENGINE_MARK = "__vlm_fastpath_engine_error__"  # set on exceptions raised by an original
_STATE_MARK = "__vlm_fastpath_state_changed__"  # set when a no-fallback guard let one through


class FaultLedger:
    """Per-process fault counts and the patches disabled for faults."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.disabled: dict[str, str] = {}  # patch -> reason
        self.last: dict[str, str] = {}  # patch -> "Type: message" of the latest fault

    def is_disabled(self, patch: str) -> bool:
        return patch in self.disabled

    def record(self, patch: str, exc: BaseException, where: str) -> bool:
        """Count one fault; returns True when this fault disables the patch."""
        limit = settings.fault_limit()
        with self._lock:
            count = self.counts.get(patch, 0) + 1
            self.counts[patch] = count
            self.last[patch] = f"{type(exc).__name__}: {exc}"
            first = count == 1
            disable = count >= limit and patch not in self.disabled
            if disable:
                self.disabled[patch] = (
                    f"disabled after {count} run-time fault(s) in its fast path "
                    f"(last in {where}: {self.last[patch]})"
                )
        if first:
            logger.warning(
                "vlm_fastpath: patch %s failed in %s (%s); this call uses the engine's own "
                "code; %d fault(s) disable the patch for this process\n%s",
                patch, where, self.last[patch], limit,
                "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            )
        return disable

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.disabled.clear()
            self.last.clear()


LEDGER = FaultLedger()


def code_objects(func: Any) -> frozenset[CodeType]:
    """Code objects of ``func`` and of everything it wraps (``__wrapped__``, bound methods)."""
    codes: set[CodeType] = set()
    seen: set[int] = set()
    todo = [func]
    while todo:
        obj = todo.pop()
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        code = getattr(obj, "__code__", None)
        if isinstance(code, CodeType):
            codes.add(code)
        todo.extend(getattr(obj, attr, None) for attr in ("__func__", "__wrapped__"))
        call = vars(type(obj)).get("__call__")  # a callable object's own __call__
        if not isinstance(obj, type) and code is None and call is not None:
            todo.append(call)
    return frozenset(codes)


def _frames(tb: TracebackType | None):
    while tb is not None:
        yield tb.tb_frame.f_code
        tb = tb.tb_next


def raised_by_original(exc: BaseException, codes: frozenset[CodeType]) -> bool:
    """True when ``exc`` passed through the original (or an inner guard said so)."""
    if getattr(exc, _ENGINE_MARK, False):
        return True
    return bool(codes) and any(code in codes for code in _frames(exc.__traceback__))


def _mark(exc: BaseException, mark: str) -> None:
    try:
        setattr(exc, mark, True)
    except (AttributeError, TypeError):  # exceptions with __slots__
        pass


def _disable(patch: str) -> None:
    from .registry import REGISTRY

    try:
        REGISTRY.quarantine(patch, LEDGER.disabled[patch])
    except Exception:  # noqa: BLE001 - disabling must never add a second failure
        logger.exception("vlm_fastpath: could not revert faulted patch %s", patch)


def call_contained(
    patch: str,
    fast: Callable[[], T],
    original: Callable[[], T] | None,
    *,
    where: str = "",
    original_codes: frozenset[CodeType] = frozenset(),
    fallback: bool = True,
    user_errors: tuple[type[BaseException], ...] = USER_ERRORS,
) -> T:
    """``fast()`` with containment; ``original()`` answers the call after a fault.

    ``original=None`` means there is no engine function to answer with: the fault is counted
    and propagates. ``original_codes`` are the code objects of the engine function ``fast``
    may call itself (its exceptions are the engine's and propagate unchanged).
    """
    if original is not None and LEDGER.is_disabled(patch):
        return original()
    try:
        return fast()
    except user_errors:
        raise
    except Exception as exc:
        if raised_by_original(exc, original_codes):
            _mark(exc, _ENGINE_MARK)
            raise
        # An inner guard that could not fall back: state may have changed under this call too.
        changed = getattr(exc, _STATE_MARK, False)
        if not fallback or original is None or changed:
            _count(patch, exc, where, fast)
            _mark(exc, _STATE_MARK)
            raise
        fault = exc
    # Outside the handler, so the engine's own error does not chain onto ours.
    return _engine_decides(patch, fault, original, where or _where(fast))


def _where(fast: Callable[..., Any]) -> str:
    return getattr(fast, "__qualname__", "fast path")


def _count(patch: str, exc: BaseException, where: str, fast: Callable[..., Any]) -> None:
    if LEDGER.record(patch, exc, where or _where(fast)):
        _disable(patch)


def _engine_decides(
    patch: str, fault: BaseException, original: Callable[[], T], where: str
) -> T:
    """Answer a faulted call with the engine; count the fault only if the engine succeeds.

    When the engine's own code fails on the same arguments too, the input is bad for the
    engine as well: its error is what the request gets without vlm-fastpath, and counting
    it would let a client disable the patch by sending bad input.
    """
    try:
        result = original()
    except Exception as engine_exc:
        _mark(engine_exc, _ENGINE_MARK)
        logger.debug(
            "vlm_fastpath: patch %s: %s also failed in the engine's own code (%s: %s); "
            "bad input, not counted as a fault", patch, where, type(engine_exc).__name__,
            engine_exc,
        )
        raise
    _count(patch, fault, where, original)
    return result


def contained(
    patch: str,
    original: Callable[..., Any] | None,
    *,
    fallback: bool = True,
    user_errors: tuple[type[BaseException], ...] = USER_ERRORS,
) -> Callable[[F], F]:
    """Decorator for a wrapper of ``original`` (same signature): see :func:`call_contained`.

    ``fallback=True`` declares that the wrapper changes no state before it could fail, so
    calling ``original`` with the same arguments after a fault is what the engine would have
    done. Exceptions raised inside ``original`` (called by the wrapper) propagate unchanged
    and are not counted.
    """

    def decorate(fast: F) -> F:
        codes = code_objects(original) if original is not None else frozenset()
        where = getattr(fast, "__qualname__", "fast path")

        @functools.wraps(fast)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            engine = None if original is None else functools.partial(original, *args, **kwargs)
            return call_contained(
                patch,
                functools.partial(fast, *args, **kwargs),
                engine,
                where=where,
                original_codes=codes,
                fallback=fallback,
                user_errors=user_errors,
            )

        guarded.__vlm_fastpath_contained__ = patch  # type: ignore[attr-defined]
        return guarded  # type: ignore[return-value]

    return decorate


def answer(value: Any) -> Callable[..., Any]:
    """An "original" that answers ``value`` whatever its arguments (for guarded decisions).

    For a fast-path *decision* (defer this item? mark it?), the engine's behaviour is a fixed
    answer: ``contained(patch, answer(False))(should_defer)`` means "not deferred" on a fault.
    """

    def engine_answer(*_args: Any, **_kwargs: Any) -> Any:
        return value

    return engine_answer


def reset() -> None:
    """Forget every fault (tests; the registry's quarantine is cleared separately)."""
    LEDGER.reset()
