"""Twins: transformers processor objects that an engine holds, with our pixels.

A twin of a transformers processor ``original`` (an image or a video processor) is an instance
of a subclass of a transformers class whose ``__dict__`` *is* the original's. Every setting read
or written through either object is one setting: an engine that sets ``image_processor.size``
after it got the processor (vLLM's D3 and Alpamayo-2-Super do) changes both, and ours runs on
the settings as they are at call time. Whether ours reproduces a class with given settings is
decided by the kind's probes (``check_compatible``, ``check_video_compatible``) and cached per
(class, settings); a change after hand-out is probed at the next call, and a call whose
settings ours does not reproduce is the original's.

A twin's own state (its original, the patch that made it, the decision for the settings it
last saw, its speculative offer) lives in slots, never in the shared ``__dict__``, so the
engine's object gains nothing. ``copy``, ``deepcopy`` and pickling give a twin of the copied
original: SGLang's processor pool runs each worker thread on a ``deepcopy`` of the processor.

A *view* of an HF processor (the object holding the image and video processors) is a shallow
copy whose ``image_processor`` (or ``video_processor``) is the twin; the engine's object,
often cached, is never modified, so a revert gives the engine its originals back at once.

Engine-neutral: ``qwen_twin`` and ``qwen_video_twin`` define the two kinds, the engine patches
hand views out (``hand_out``).
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple

from ..._log import get_logger
from .speculative_offer import SpeculativeOffer
from .switches import active

logger = get_logger("vlm_fastpath.patches")

_MISSING = object()


def settings_snapshot(namespace: Mapping[str, Any]) -> tuple[Any, ...]:
    """A hashable picture of an object's public settings (its instance ``__dict__``)."""
    return tuple((key, _frozen(value)) for key, value in sorted(namespace.items())
                 if not key.startswith("_"))


def _frozen(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, Mapping):
        return ("map", tuple(sorted((str(k), _frozen(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_frozen(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", tuple(sorted(repr(v) for v in value)))
    tolist = getattr(value, "tolist", None)
    if callable(tolist):  # numpy arrays and scalars, tensors
        try:
            return ("array", _frozen(tolist()))
        except Exception:  # noqa: BLE001 - fall back to identity
            pass
    names = getattr(value, "__dict__", None)
    if isinstance(names, dict) and type(value).__module__.startswith("transformers."):
        # a transformers settings object (SizeDict...): its fields are the setting
        return ("obj", type(value).__name__, settings_snapshot(names))
    return ("id", type(value).__qualname__, id(value))


class TwinState(NamedTuple):
    """What a twin decided for the settings it last saw (replaced whole, never mutated)."""

    snapshot: tuple[Any, ...]
    fast: Any  # the kind's fast object for these settings; None: the original answers
    reason: str


class TwinMixin:
    """Shared behaviour of every twin class (the kinds add ``preprocess``)."""

    __slots__ = ("_vlm_original", "_vlm_patch", "_vlm_state", "_vlm_offer")
    _vlm_kind: ClassVar[TwinKind]

    # -- the settings as they are now -------------------------------------------------
    def vlm_fast(self) -> Any:
        """The fast object for this twin's settings now, or None where ours does not
        reproduce them (the probes run once per class and settings)."""
        snapshot = settings_snapshot(self.__dict__)
        state = self._vlm_state
        if state.snapshot != snapshot:
            fast, reason = self._vlm_kind.verdict(self._vlm_original, snapshot)
            state = TwinState(snapshot, fast, reason)
            self._vlm_state = state
            if self._vlm_offer is not None:
                self._vlm_offer.fast = fast
            if reason:
                logger.info("vlm_fastpath: %s: %s after a settings change: %s",
                            self._vlm_patch, type(self._vlm_original).__name__, reason)
                note_stand_aside(self._vlm_patch,
                                 f"{type(self._vlm_original).__name__} with changed settings",
                                 reason)
        return state.fast

    def vlm_serves(self, kwargs: dict[str, Any]) -> bool:
        """Whether this call may be ours: the patch is applied and the call runs on the CPU,
        or asks for a device while ``VLM_FASTPATH_CPU_PREPROCESS`` puts our CPU path in place
        of the engine's GPU preprocessing (``kwargs`` then loses its ``device``)."""
        if not active(self._vlm_patch):
            return False
        if not runs_on_device(kwargs.get("device")):
            return True
        from ...settings import cpu_preprocess

        if not cpu_preprocess():
            return False  # GPU preprocessing stays the engine's
        kwargs.pop("device")
        return True

    def vlm_original(self) -> Any:
        return self._vlm_original

    # -- copies are twins -------------------------------------------------------------
    def __copy__(self) -> Any:
        return self._vlm_kind.twin_like(self, copy.copy(self._vlm_original))

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        clone = self._vlm_kind.twin_like(self, copy.deepcopy(self._vlm_original, memo))
        memo[id(self)] = clone
        return clone

    def __reduce__(self) -> Any:
        return (rebuild_twin, (self._vlm_kind.label, self._vlm_original, self._vlm_patch))

    # -- it serializes and prints as the engine's processor ---------------------------
    def to_dict(self) -> dict[str, Any]:
        return self._vlm_original.to_dict()

    def to_json_string(self) -> str:
        return self._vlm_original.to_json_string()

    def __repr__(self) -> str:
        return f"Fastpath({self._vlm_original!r})"


KINDS: dict[str, TwinKind] = {}


def rebuild_twin(label: str, original: Any, patch: str) -> Any:
    """Unpickling a twin: the twin of the unpickled original (or the original itself where
    ours does not reproduce it in this process)."""
    twin, _ = KINDS[label].twin_of(original, patch)
    return original if twin is None else twin


class TwinKind:
    """One kind of twin (image or video processors): how to recognize, judge and build one."""

    label: str  # "image" | "video"
    attr: str  # the HF processor's attribute holding such a processor
    mixin: type  # the kind's twin classes derive from it

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._twins: dict[int, tuple[Any, str]] = {}  # id(original) -> (twin or None, reason)
        self._views: dict[int, Any] = {}  # id(HF processor) -> its view (None: none)
        self._verdicts: dict[tuple[type, tuple[Any, ...]], tuple[Any, str]] = {}
        KINDS[self.label] = self

    # -- what a kind defines ----------------------------------------------------------
    def mirrors(self, obj: Any) -> bool:
        """Cheap: whether ``obj`` is of a class this kind may mirror (probes decide)."""
        raise NotImplementedError

    def judge(self, original: Any) -> tuple[Any, str]:
        """``(fast, "")`` where ours reproduces ``original`` exactly as it is now (probes run),
        else ``(None, reason)``."""
        raise NotImplementedError

    def twin_class(self, original: Any) -> type:
        raise NotImplementedError

    def is_twin(self, obj: Any) -> bool:
        return isinstance(obj, self.mixin)

    # -- decisions, cached per class and settings -------------------------------------
    def verdict(self, original: Any, snapshot: tuple[Any, ...] | None = None) -> tuple[Any, str]:
        snapshot = settings_snapshot(original.__dict__) if snapshot is None else snapshot
        key = (type(original), snapshot)
        with self._lock:
            known = self._verdicts.get(key)
            if known is None:
                try:
                    known = self.judge(original)
                except Exception as exc:  # noqa: BLE001 - a probe that fails means stand aside
                    known = (None, f"probes failed: {type(exc).__name__}: {exc}")
                self._verdicts[key] = known
        return known

    # -- twins ------------------------------------------------------------------------
    def _new_twin(self, original: Any, patch: str, state: TwinState,
                  offer: SpeculativeOffer | None) -> Any:
        twin = object.__new__(self.twin_class(original))
        object.__setattr__(twin, "__dict__", original.__dict__)  # one set of settings
        twin._vlm_original = original
        twin._vlm_patch = patch
        twin._vlm_state = state
        twin._vlm_offer = offer
        with self._lock:
            self._twins[id(original)] = (twin, "")
        _forget_when_gone(original, self._twins)
        return twin

    def twin_of(self, original: Any, patch: str) -> tuple[Any, str]:
        """``(twin, "")`` for an object ours reproduces exactly now, else ``(None, reason)``;
        one twin per original object."""
        if self.is_twin(original):
            return original, ""
        with self._lock:
            known = self._twins.get(id(original))
        if known is not None:
            return known
        if not self.mirrors(original):
            return None, f"{type(original).__name__} is not a class vlm-fastpath mirrors"
        snapshot = settings_snapshot(original.__dict__)
        fast, reason = self.verdict(original, snapshot)
        if fast is None:
            logger.info("vlm_fastpath: %s keeps the engine's %s: %s", patch,
                        type(original).__name__, reason)
            with self._lock:
                self._twins[id(original)] = (None, reason)
            _forget_when_gone(original, self._twins)
            return None, reason
        offer = self.make_offer(fast, patch)
        return self._new_twin(original, patch, TwinState(snapshot, fast, ""), offer), ""

    def twin_like(self, twin: Any, original: Any) -> Any:
        """A twin of ``original`` (a copy of ``twin``'s) deciding as ``twin`` does."""
        offer = None if twin._vlm_offer is None else self.make_offer(twin._vlm_state.fast,
                                                                     twin._vlm_patch)
        return self._new_twin(original, twin._vlm_patch, twin._vlm_state, offer)

    def make_offer(self, fast: Any, patch: str) -> SpeculativeOffer | None:
        """The offer the decode layer may start (None for kinds that make none)."""
        return None

    # -- views of HF processors -------------------------------------------------------
    def held(self, hf_processor: Any) -> Any:
        return getattr(hf_processor, self.attr, None) if hf_processor is not None else None

    def processor_view(self, hf_processor: Any, patch: str) -> Any:
        """``hf_processor`` itself, or its view with the twin in place (one per original)."""
        held = self.held(hf_processor)
        if held is None or self.is_twin(held) or not self.mirrors(held):
            return hf_processor
        key = id(hf_processor)
        with self._lock:
            view = self._views.get(key, _MISSING)
        if view is _MISSING:
            twin, _ = self.twin_of(held, patch)
            view = None
            if twin is not None:
                view = copy.copy(hf_processor)
                view.__dict__[self.attr] = twin
            with self._lock:
                self._views[key] = view
            _forget_when_gone(hf_processor, self._views)
        return hf_processor if view is None else view

    def forget(self) -> None:
        """Drop every cached view, twin and decision (tests; the next hand-out decides anew)."""
        with self._lock:
            self._views.clear()
            self._twins.clear()
            self._verdicts.clear()


def _forget_when_gone(obj: Any, table: dict[int, Any]) -> None:
    """Drop ``table[id(obj)]`` when ``obj`` dies (ids are reused)."""
    try:
        weakref.finalize(obj, table.pop, id(obj), None)
    except TypeError:  # not weak-referenceable: the entry stays
        pass


def runs_on_device(device: Any) -> bool:
    """Whether an engine asks its processor for a device other than the CPU."""
    return device is not None and str(device) not in ("", "cpu")


def note_stand_aside(patch: str, what: str, reason: str) -> None:
    """Put a run-time stand-aside decision in the patch's status (doctor, ``status()``)."""
    try:
        from ..core.registry import REGISTRY

        REGISTRY.note_stand_aside(patch, what, reason)
    except Exception:  # noqa: BLE001 - reporting must never fail a request
        pass


def is_twin(obj: Any) -> bool:
    return isinstance(obj, TwinMixin)


def engine_call(twin: Any, method: str) -> Callable[..., Any]:
    """The original's ``method``: the engine's own code, on the same settings."""
    return getattr(twin._vlm_original, method)
