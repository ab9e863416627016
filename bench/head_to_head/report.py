"""Figures into markdown: the tables printed at the end of a head-to-head run."""

from __future__ import annotations

from typing import Any

NAMES = {
    "plain_fit": "plain `model.fit`, no checkpoints",
    "plain_loop": "plain hand-written loop, no checkpoints",
    "bar": "Keras `BackupAndRestore` (local dir)",
    "tfcm": "`tf.train.CheckpointManager`, sync (local dir)",
    "tfcm_async": "`tf.train.CheckpointManager`, async (local dir)",
    "cr_gcs": "colab_resume `agent.fit` (GCS emulator)",
    "cr_local": "colab_resume `agent.fit` (local dir)",
}
# Which no-checkpoint baseline a contender's training code matches.
BASELINE = {"bar": "plain_fit", "tfcm": "plain_loop", "tfcm_async": "plain_loop"}


def compare(path_a: str | None, path_b: str | None) -> dict[str, Any]:
    """Bitwise comparison of two variable dumps; max abs difference if not equal."""
    import numpy as np

    if not path_a or not path_b:
        return {"equal": None, "max_abs": None}
    a, b = np.load(path_a), np.load(path_b)
    if sorted(a.files) != sorted(b.files):
        return {"equal": False, "max_abs": None, "why": "different variables"}
    equal = all(np.array_equal(a[k], b[k]) for k in a.files)
    diff = max(
        float(np.max(np.abs(a[k].astype("float64") - b[k].astype("float64"))))
        if a[k].size
        else 0.0
        for k in a.files
    )
    return {"equal": equal, "max_abs": diff}


def add_bitwise(results: dict[str, Any]) -> None:
    """Compare each resumed run with the same contender's uninterrupted run."""
    clean = results["clean"]
    for scenario in ("kills", "unavailable"):
        for contender, figures in results[scenario].items():
            figures["bitwise"] = compare(figures["out"], clean[contender]["out"])
    for contender, figures in clean.items():
        base = BASELINE.get(contender, "plain_fit")
        if contender != base and base in clean:
            figures["vs_baseline"] = compare(figures["out"], clean[base]["out"])


def _bitwise(cell: dict[str, Any]) -> str:
    if cell.get("equal") is None:
        return "n/a (did not finish)"
    if cell["equal"]:
        return "**yes**"
    return f"no (max abs diff {cell['max_abs']:.2g})"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def _redone(figures: dict[str, Any]) -> str:
    deaths = figures["deaths"] + figures["in_process_restarts"]
    return " / ".join(f"{d['redone']} (at {d['died_at']})" for d in deaths) or "-"


def markdown(results: dict[str, Any], contenders: tuple[str, ...], command: str) -> str:
    clean, kills = results["clean"], results["kills"]
    plain = clean["plain_fit"]
    lines = []
    total = None
    for c in contenders:
        total = kills[c]["executed"] - _extra(kills[c])
        break
    lines += [
        "### Cost of checkpointing (uninterrupted run, save every 10 steps)",
        "",
        "| contender | saves | blocking per save (median / max) "
        "| whole run | vs plain `fit` |",
        "|---|---|---|---|---|",
    ]
    for c in ("plain_fit", "plain_loop", *contenders):
        f = clean[c]
        lines.append(
            f"| {NAMES[c]} | {f['saves']} | {_ms(f['block_median_s'])} / "
            f"{_ms(f['block_max_s'])} | {f['train_s']:.2f} s | "
            f"{f['train_s'] / plain['train_s']:.2f} |"
        )
    lines += [
        "",
        "### SIGKILL schedule: mid-epoch (step 37), during a save (first save "
        "from step 60, 10 ms in), again 3 steps after resuming",
        "",
        "| contender | steps redone per death (died at) | steps run in all "
        f"(of {total}) | processes | wall to finish | vs uninterrupted plain `fit` "
        "| final weights = uninterrupted |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in contenders:
        f = kills[c]
        notes = "; ".join(f["notes"])
        lines.append(
            f"| {NAMES[c]} | {_redone(f)} | {f['executed']} | {f['processes']}"
            f"{' (' + notes + ')' if notes else ''} | {f['wall_s']:.1f} s | "
            f"{f['wall_s'] / plain['process_s']:.2f} | {_bitwise(f['bitwise'])} |"
        )
    lines += [
        "",
        "### In-session `tf.errors.UnavailableError` (raised after step 37)",
        "",
        "| contender | what happened | steps redone | processes | wall to finish "
        "| final weights = uninterrupted |",
        "|---|---|---|---|---|---|",
    ]
    for c in contenders:
        f = results["unavailable"][c]
        what = (
            "recovered in the same process"
            if f["in_process_restarts"]
            else "process crashed; rerun resumed"
        )
        lines.append(
            f"| {NAMES[c]} | {what} | {_redone(f)} | {f['processes']} | "
            f"{f['wall_s']:.1f} s | {_bitwise(f['bitwise'])} |"
        )
    mode = results["damage_mode"]
    damage_what = (
        "64 bytes inverted mid-file, size unchanged"
        if mode == "flip"
        else "cut to half its size"
    )
    lines += [
        "",
        "### Safety: a second process while the first is alive; a damaged newest "
        "checkpoint",
        "",
        f"Damage: the largest data file of the newest checkpoint, {damage_what}, "
        f"after a death at step {_first(results['damage'], 'died_at')} "
        "(saves up to step 40 complete).",
        "",
        "| contender | second process on the same directory | both wrote "
        "checkpoints | damaged newest checkpoint: resume |",
        "|---|---|---|---|",
    ]
    for c in contenders:
        live, damage = results["live"][c], results["damage"][c]
        lines.append(
            f"| {NAMES[c]} | {live['second']} | "
            f"{'**yes**' if live['both_wrote'] else 'no'} | {damage['outcome']} |"
        )
    lines += [
        "",
        "Uninterrupted runs against their no-checkpoint baseline (same training "
        "code): "
        + "; ".join(
            f"{c}: {_bitwise(clean[c]['vs_baseline'])}"
            for c in contenders
            if "vs_baseline" in clean[c]
        )
        + ".",
        "",
        f"Measured in one run ({results['seconds'] / 60:.1f} min): `{command}`",
    ]
    return "\n".join(lines)


def _extra(figures: dict[str, Any]) -> int:
    deaths = figures["deaths"] + figures["in_process_restarts"]
    return sum(d["redone"] for d in deaths)


def _first(table: dict[str, Any], key: str) -> Any:
    return next(iter(table.values()))[key]
