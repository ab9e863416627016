"""Time to the first batch of a Grain pipeline resumed deep into an epoch.

    build/venv-jax/bin/python bench/bench_grain_resume.py [--place 1000000]

One epoch of ``--place`` + 100 batches (a seeded shuffle over indices, a
random map building each example, a batch of 32), resumed at batch
``--place`` the three ways the agent can (``colab_resume.data.grain``):

- ``MapDataset`` by index (``dataset[place:]``);
- ``IterDataset`` (read-ahead threads) by ``set_state()`` with the state
  a checkpoint at that batch carries;
- drawing and dropping ``place`` batches, what any iterable without a saved
  state gets (timed over ``--drawn`` batches and scaled, unless
  ``--draw-all``: at a million batches it takes minutes).

Each figure is the median of ``--repeats`` fresh pipelines; the ratio is
against drawing and dropping, measured in the same run. The state is taken
from a real run: the iterator is driven to ``--state-at`` batches, its
state saved, and the batch place in the state moved to ``--place`` (an
``IterDataset``'s state is its next index), so no million-batch warm-up is
needed to get one.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import grain
import numpy as np

from colab_resume.data.grain import GrainPosition

BATCH = 32
FEATURES = 64


def pipeline(batches: int, kind: str) -> Any:
    def example(index: int, rng: np.random.Generator) -> np.ndarray:
        return rng.normal(size=FEATURES).astype("float32") + np.float32(index)

    ds = grain.MapDataset.range(batches * BATCH).shuffle(seed=0)
    ds = ds.random_map(lambda i, rng: example(int(i), rng), seed=1).batch(BATCH)
    if kind == "map":
        return ds
    return ds.to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=8))


def saved_state(batches: int, place: int, state_at: int) -> dict[str, Any]:
    """What a checkpoint at batch ``place`` carries (see the module docstring)."""
    position = GrainPosition()
    batches_iter = position.open(
        pipeline(batches, "iter"), 0, drop=0, wanted=state_at + 1
    )
    assert batches_iter is not None
    for _ in range(state_at):
        next(batches_iter)
    entry = position.extras(0, state_at)["grain"]
    state = entry["state"]
    state["next_index"] = place  # the prefetch iterator's one field of place
    return dict(entry, batch=place, state=state)


def first_batch(position: GrainPosition, dataset: Any, place: int) -> float:
    began = time.perf_counter()
    batches = position.open(dataset, 0, drop=place, wanted=1)
    assert batches is not None
    next(batches)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--place", type=int, default=1_000_000)
    parser.add_argument("--drawn", type=int, default=2_000)
    parser.add_argument("--draw-all", action="store_true")
    parser.add_argument("--state-at", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    batches = args.place + 100
    saved = saved_state(batches, args.place, args.state_at)

    def by_index() -> float:
        return first_batch(GrainPosition(), pipeline(batches, "map"), args.place)

    def by_state() -> float:
        position = GrainPosition()
        position.restored({"grain": saved})
        took = first_batch(position, pipeline(batches, "iter"), args.place)
        assert position.how == "state", position.how
        return took

    drawn = args.place if args.draw_all else min(args.drawn, args.place)

    def by_drawing() -> float:
        took = first_batch(GrainPosition(), pipeline(batches, "iter"), drawn)
        return took * args.place / drawn

    rows = []
    for name, measure in [
        ("drawing and dropping (no state)", by_drawing),
        ("MapDataset by index", by_index),
        ("IterDataset by its saved state", by_state),
    ]:
        rows.append((name, statistics.median(measure() for _ in range(args.repeats))))
    base = rows[0][1]
    scaled = "" if drawn == args.place else f" (timed over {drawn:,}, scaled)"
    print(f"resumed at batch {args.place:,} of {batches:,} (batch {BATCH})")
    print("| positioned by | time to first batch | ratio |")
    print("|---|---|---|")
    for name, seconds in rows:
        note = scaled if name.startswith("drawing") else ""
        print(f"| {name} | {seconds:.4f} s{note} | {seconds / base:.2g} |")


if __name__ == "__main__":
    main()
