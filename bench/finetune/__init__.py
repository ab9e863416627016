"""The parts of ``bench/bench_finetune.py``: the model, Keras' Orbax
callback as a contender, and the steady step time of each contender."""
