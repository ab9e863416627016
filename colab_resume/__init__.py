"""colab_resume: long TensorFlow/Keras training runs that survive the hardware vanishing.

Importing this package never imports TensorFlow.
"""

from colab_resume._version import __version__
from colab_resume.storage import authenticate

__all__ = ["__version__", "authenticate"]
