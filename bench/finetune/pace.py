"""Steady step time with a save every N steps, against plain ``model.fit``.

Each contender trains a fresh model in one ``model.fit`` of ``(2 + saves)
* every`` steps, a save every ``every`` steps: plain ``fit`` with no
checkpoints (the baseline); the agent's lighter path (``agent.restore`` and
``agent.callback()``, the way a user keeps their own ``fit``) for each
``frozen`` mode; Keras' ``OrbaxCheckpoint(save_freq=every)``. A callback
placed last stamps each batch's end, after the contender's own callback
has had that batch.

The steady window is the steps after the second save: tracing, the first
steps and the first save (which with ``"once"`` writes the base) come
before it. Its mean step time carries each later save's share. The rest
of ``fit``, timed from the first step's end to its return (its tracing is
the same work for everyone), adds the first save and the wait for the
last one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from finetune import keras_orbax
from finetune.model import BATCH, batches, build

# Keras' Orbax callback, on keras_orbax.STORES only.
ORBAX = "orbax"
LABELS = {
    "plain": "plain `fit`, no checkpoints",
    "every": 'colab_resume, frozen="every"',
    "once": 'colab_resume, frozen="once"',
    "rebuild": 'colab_resume, frozen="rebuild"',
    ORBAX: "Keras `OrbaxCheckpoint`",
}


def timed_fit(model: Any, args: Any, callbacks: list[Any]) -> dict[str, float]:
    """Train ``steps`` steps: the steady window's mean step, and the seconds
    from the first step's end to ``fit``'s return."""
    import keras

    stamps: list[float] = []

    class Clock(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            stamps.append(time.perf_counter())

    x, y = batches(args.width, steps_of(args), seed=11)
    model.fit(
        x,
        y,
        batch_size=BATCH,
        epochs=1,
        shuffle=False,
        callbacks=[*callbacks, Clock()],
        verbose=0,
    )
    ended = time.perf_counter()
    warm = 2 * args.save_every  # the stamp after the second save
    steady = (stamps[-1] - stamps[warm - 1]) / (len(stamps) - warm)
    # From the first step's end: its tracing is the same work for everyone.
    return {"step_s": steady, "fit_s": ended - stamps[0]}


def steps_of(args: Any) -> int:
    """Steps of each contender's ``fit``."""
    return int((2 + args.pace_saves) * args.save_every)


def plain(args: Any) -> dict[str, float]:
    return timed_fit(build(args.width, args.layers), args, [])


def agent(
    url: str, options: dict[str, Any] | None, mode: str, args: Any
) -> dict[str, float]:
    import colab_resume as cr

    model = build(args.width, args.layers)
    with cr.Agent(
        url,
        save_every_steps=args.save_every,
        save_every_seconds=None,
        frozen=mode,
        keep=2,
        storage_options=options,
        prefer="cpu",
    ) as run:
        run.restore(model)
        return timed_fit(model, args, [run.callback()])


def orbax(directory: str, args: Any) -> dict[str, float]:
    model = build(args.width, args.layers)
    return timed_fit(model, args, [keras_orbax.callback(directory, args.save_every)])


def measure(
    run: Callable[[str, str], dict[str, float]],
    stores: list[str],
    contenders: list[str],
    args: Any,
) -> dict[tuple[str, str], list[dict[str, float]]]:
    """``args.repeats`` rounds, contenders interleaved, each run's timings
    with its ratios to the plain ``fit`` of the same round and store.

    Args:
        run: ``run(contender, store)`` -> one run's timings (``"plain"``
            first in each round), each in a fresh process.
        contenders: the contenders besides ``"plain"``, in the order run.
    """
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    for round_ in range(args.repeats):
        for store in stores:
            base = run("plain", store)
            found = {"plain": base}
            for contender in contenders:
                if contender != ORBAX or store in keras_orbax.STORES:
                    found[contender] = run(contender, store)
            for contender, timing in found.items():
                timing["step_x"] = timing["step_s"] / base["step_s"]
                timing["fit_x"] = timing["fit_s"] / base["fit_s"]
                runs.setdefault((store, contender), []).append(timing)
            print(f"pace round {round_ + 1} {store}: done", flush=True)
    return runs


def table(runs: dict[tuple[str, str], list[dict[str, float]]], args: Any) -> str:
    import statistics

    def median(key: str, timings: list[dict[str, float]]) -> float:
        return statistics.median(t[key] for t in timings)

    steps = steps_of(args)
    lines = [
        f"Steady step time, a save every {args.save_every} steps "
        f"({steps} steps, the window after the second save; batch {BATCH}); "
        f"medians of {args.repeats} interleaved rounds, ratios to the plain "
        "`fit` of the same round",
        "",
        "| store | contender | steady step ms | ÷ plain fit | fit after step 1: s "
        "| ÷ plain fit |",
        "|---|---|---|---|---|---|",
    ]
    for (store, contender), timings in runs.items():
        step_ms = median("step_s", timings) * 1e3
        cells = [
            store,
            LABELS[contender],
            f"{step_ms:.1f}",
            f"{median('step_x', timings):.2f}x",
            f"{median('fit_s', timings):.2f}",
            f"{median('fit_x', timings):.2f}x",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
