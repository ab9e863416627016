"""Run-directory storage: the only package that performs I/O on ``run_dir``."""

from colab_resume.storage.retry import RetryPolicy
from colab_resume.storage.sign_in import authenticate
from colab_resume.storage.store import ObjectInfo, Storage, split_url

__all__ = ["ObjectInfo", "RetryPolicy", "Storage", "authenticate", "split_url"]
