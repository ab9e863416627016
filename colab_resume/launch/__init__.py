"""What a launcher hands a training process, and what it reads back.

- :mod:`~colab_resume.launch.identity`: the run directory from the
  launcher's environment (``COLAB_RESUME_RUN_DIR``, Vertex AI's
  ``AIP_CHECKPOINT_DIR``, SkyPilot's ``SKYPILOT_TASK_ID``...).
- :mod:`~colab_resume.launch.notices`: preemption notices from the
  Compute Engine metadata server, acted on like SIGTERM.
- :mod:`~colab_resume.launch.teardown`: the user's command that stops the
  bill once a run has completed (``on_done``).

The exit statuses themselves are :mod:`colab_resume.exit_status`.
Nothing here imports a framework or anything above storage.
"""
