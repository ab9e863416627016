"""Only ``colab_resume/backend/`` imports a framework (TensorFlow, JAX).

Read from the source with ``ast``, so an import inside a function (the
usual lazy kind here) counts as much as one at the top of a module. A
module that needs a framework asks ``colab_resume.backend.current()``
instead; the few exceptions below say why they stay.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import colab_resume

PACKAGE = pathlib.Path(colab_resume.__file__).parent
FRAMEWORKS = frozenset({"tensorflow", "jax", "jaxlib"})

ALLOWED = {
    # TensorFlow's own checkpoint format (tf.train.Checkpoint): it is the
    # format, not a branch on the backend; JAX never reaches it.
    "checkpoint/formats/tensorflow.py": "TensorFlow checkpoint format",
    # The demo's child is the user's training script, written as a user
    # writes one (tf.config.experimental.enable_op_determinism()).
    "demo.py": "the user's script in the demo",
}


def framework_imports(source: str) -> set[str]:
    """The frameworks ``source`` imports, anywhere in it (absolute imports)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        else:
            continue
        found.update(n.split(".")[0] for n in names if n.split(".")[0] in FRAMEWORKS)
    return found


def offenders() -> dict[str, set[str]]:
    """``{module path: frameworks}`` outside ``backend/`` and the allow-list."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("backend/") or relative in ALLOWED:
            continue
        imported = framework_imports(path.read_text(encoding="utf-8"))
        if imported:
            found[relative] = imported
    return found


def test_only_the_backend_imports_a_framework():
    assert offenders() == {}, (
        "these modules import a framework outside colab_resume/backend/: ask "
        "colab_resume.backend.current() (add what is missing to the Backend "
        "protocol in backend/base.py) instead of importing it"
    )


def test_the_scan_sees_lazy_and_dynamic_imports():
    lazy = "def f():\n    import tensorflow as tf\n    return tf\n"
    assert framework_imports(lazy) == {"tensorflow"}
    assert framework_imports("from jax import numpy") == {"jax"}
    assert framework_imports("import importlib\nimportlib.import_module('jax.numpy')")
    assert framework_imports("from .tensorflow import x\nimport keras") == set()


def test_every_allowed_module_still_needs_its_place():
    # An entry that no longer imports a framework must leave the list.
    for relative in ALLOWED:
        source = (PACKAGE / relative).read_text(encoding="utf-8")
        assert framework_imports(source), f"{relative} imports no framework now"


# Packages above the data path: they import colab_resume.data, never the
# other way round.
ABOVE_DATA = ("colab_resume.agent", "colab_resume.checkpoint")


def package_imports(source: str) -> set[str]:
    """The ``colab_resume`` modules ``source`` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("colab_resume")}


def test_the_data_package_imports_nothing_above_it():
    found = {}
    for path in sorted((PACKAGE / "data").rglob("*.py")):
        above = {
            name
            for name in package_imports(path.read_text(encoding="utf-8"))
            if any(name == up or name.startswith(up + ".") for up in ABOVE_DATA)
        }
        if above:
            found[path.relative_to(PACKAGE).as_posix()] = above
    assert found == {}, "colab_resume/data/ imports the agent or the checkpoints"


def test_the_package_scan_sees_lazy_imports():
    lazy = "def f():\n    from colab_resume import agent\n    return agent\n"
    assert "colab_resume.agent" in package_imports(lazy)
    assert "colab_resume.checkpoint.manager" in package_imports(
        "import colab_resume.checkpoint.manager"
    )


# The user's training script in the demo builds its callback as a user
# writes one.
CLASSES_IN_FUNCTIONS_ALLOWED = {"demo.py": "the user's script in the demo"}


def classes_in_functions(source: str) -> list[str]:
    """Classes defined inside a function of ``source`` (``f.Inner``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ClassDef):
                    found.append(f"{node.name}.{inner.name}")
    return found


def test_no_class_is_built_inside_a_function():
    """A Keras class lives in a module that imports Keras at the top and is
    imported once Keras is chosen (Keras' own backend/<name>/trainer.py), not
    built by a function so that its module imports no Keras."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        inner = classes_in_functions(path.read_text(encoding="utf-8"))
        if inner and relative not in CLASSES_IN_FUNCTIONS_ALLOWED:
            found[relative] = inner
    assert found == {}, f"classes built inside functions: {found}"


def test_the_class_scan_sees_a_nested_class():
    source = (
        "def make():\n"
        "    import keras\n"
        "    class Hook(keras.callbacks.Callback):\n"
        "        pass\n"
    )
    assert classes_in_functions(source) == ["make.Hook"]
    assert classes_in_functions("class Top:\n    def f(self):\n        pass\n") == []


def test_importing_every_module_without_keras_imports_no_keras():
    """The modules that import Keras at the top are imported only once a
    fit, a callback or a tracker's callback is made: importing the package
    and its trackers imports none of them."""
    code = (
        "import sys\n"
        "import colab_resume, colab_resume.trackers\n"
        "import colab_resume.agent.core, colab_resume.trackers.mlflow_run\n"
        "import colab_resume.trackers.wandb_run\n"
        "import colab_resume.trackers.tensorboard_log\n"
        "loaded = {'keras', 'tensorflow', 'jax'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
