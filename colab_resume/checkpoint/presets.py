"""Which keras-hub presets ``build_model()`` loaded, watched while it runs.

A checkpoint that stores no copy of the frozen arrays (``frozen="rebuild"``)
can say more than "these arrays differ" when a resume's ``build_model()``
loads another base: it can name the preset it was trained on. keras-hub
keeps no trace of the preset on the model ``from_preset`` returns (as of
0.32), so the agent watches the build instead: while ``build_model()``
runs, every preset loader keras-hub starts (``PresetLoader``, where each
``from_preset`` of a task, backbone, tokenizer or preprocessor begins) is
noted, and the handles are kept beside the models built (:func:`mark`,
:func:`loaded`), weakly.

A handle is what the preset was loaded from: a built-in name becomes the
versioned Kaggle handle keras-hub downloads it from, a local directory its
absolute path. Hub handles (:data:`HUB_SCHEMES`) name what they hold: two
different ones are two bases. A directory names only a place, whose
contents may be the same preset copied, or another one written over it.

Nothing is noted when keras-hub is not imported before the build starts
(it is imported at the top of a notebook or script, as usual) or no
longer has that loader: the arrays alone then decide.
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from colab_resume.checkpoint.groups import ModelAndExtras, StateLike

_LOADERS = "keras_hub.src.utils.preset_utils"
# Handles that name a published preset (a version of it, where given).
HUB_SCHEMES = ("kaggle", "hf", "modelscope")

_built: weakref.WeakKeyDictionary[Any, tuple[str, ...]] = weakref.WeakKeyDictionary()


def handle(preset: Any, builtin: dict[str, Any] | None = None) -> str:
    """What ``from_preset(preset)`` loads from, as one string.

    Args:
        preset: the argument ``from_preset`` was given.
        builtin: keras-hub's built-in presets (name -> its metadata with
            ``kaggle_handle``), where known.
    """
    text = os.fspath(preset) if isinstance(preset, os.PathLike) else str(preset)
    if "://" in text:
        return text
    found = (builtin or {}).get(text)
    if isinstance(found, dict) and isinstance(found.get("kaggle_handle"), str):
        return str(found["kaggle_handle"])
    return os.path.abspath(text) if os.path.exists(text) else text


def names_contents(handle: str) -> bool:
    """True for a hub's handle (:data:`HUB_SCHEMES`), not a directory."""
    scheme, sep, _ = handle.partition("://")
    return bool(sep) and scheme.lower() in HUB_SCHEMES


@contextlib.contextmanager
def watching() -> Iterator[list[str]]:
    """``with watching() as seen: build_model()``: ``seen`` lists the
    handles of the presets keras-hub loaded in the block, each once.

    keras-hub's ``PresetLoader.__init__`` is wrapped for the block only,
    and put back as it was found, also when the block raises.
    """
    seen: list[str] = []
    module = sys.modules.get(_LOADERS)
    loader = getattr(module, "PresetLoader", None)
    original = getattr(loader, "__dict__", {}).get("__init__")
    if loader is None or original is None:
        yield seen
        return
    builtin = getattr(module, "BUILTIN_PRESETS", None)

    def noting(self: Any, preset: Any, *args: Any, **kwargs: Any) -> None:
        name = handle(preset, builtin if isinstance(builtin, dict) else None)
        if name not in seen:
            seen.append(name)
        original(self, preset, *args, **kwargs)

    loader.__init__ = noting
    try:
        yield seen
    finally:
        loader.__init__ = original


def _models(state: StateLike) -> list[Any]:
    import keras

    if isinstance(state, ModelAndExtras):
        state = state.model
    values = state.values() if isinstance(state, Mapping) else [state]
    return [v for v in values if isinstance(v, keras.Model)]


def mark(state: StateLike, handles: Iterable[str]) -> None:
    """Keep ``handles`` as what the models of ``state`` were loaded from."""
    kept = tuple(handles)
    for model in _models(state):
        _built[model] = kept


def said(handles: tuple[str, ...]) -> str:
    """``handles`` for a message."""
    return " and ".join(handles)


def decisive(trained_on: tuple[str, ...], built: tuple[str, ...]) -> bool:
    """Whether the handles alone tell two builds' bases apart: both known,
    different, and every one a hub's (a directory may hold the same
    preset copied elsewhere)."""
    return (
        bool(trained_on and built)
        and set(trained_on) != set(built)
        and all(names_contents(h) for h in (*trained_on, *built))
    )


def whence(trained_on: tuple[str, ...], built: tuple[str, ...]) -> str:
    """What the handles say of two builds whose arrays differ, in
    parentheses ("" where either is unknown)."""
    if not (trained_on and built):
        return ""
    if set(trained_on) != set(built):
        return (
            f" (trained on preset {said(trained_on)}, build_model() loaded "
            f"{said(built)})"
        )
    return f" (both loaded from preset {said(built)}, whose contents changed since)"


def loaded(state: StateLike) -> tuple[str, ...]:
    """The handles :func:`mark` kept for the models of ``state``, each once
    (empty: built from config, or not watched)."""
    found: list[str] = []
    for model in _models(state):
        found.extend(h for h in _built.get(model, ()) if h not in found)
    return tuple(found)
