"""The Agent: training that resumes exactly after a session or accelerator dies."""

from colab_resume.agent.core import Agent
from colab_resume.agent.options import AgentOptions

__all__ = ["Agent", "AgentOptions"]
