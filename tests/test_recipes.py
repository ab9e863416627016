"""The launcher recipes in ``examples/`` say what the product relies on.

No launcher runs here (SkyPilot is too heavy to install for a test, and
Vertex AI and GKE are services), so each recipe is parsed (pyyaml) and
its fields checked against a small schema of what we rely on: spot
capacity, recovery set, the run directory where a restart finds it, and
that the command it runs is ``examples/preemptible/train.py`` with
options that script accepts: the script the supervisor test
(``test_supervised_restart.py``) restarts after SIGTERM.
"""

from __future__ import annotations

import os
import re
import shlex

import pytest
import yaml

from colab_resume import exit_status
from colab_resume.launch import identity

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
SCRIPT = "examples/preemptible/train.py"


def load(relative: str) -> dict:
    with open(os.path.join(EXAMPLES, relative), encoding="utf-8") as handle:
        loaded = yaml.safe_load(handle)
    assert isinstance(loaded, dict), relative
    return loaded


def script_options() -> set[str]:
    with open(os.path.join(ROOT, SCRIPT), encoding="utf-8") as handle:
        return set(re.findall(r'add_argument\(\s*"(--[a-z-]+)"', handle.read()))


def assert_runs_the_script(argv: list[str]) -> None:
    assert argv[:2] == ["python", SCRIPT], argv
    given = {arg.split("=")[0] for arg in argv[2:] if arg.startswith("--")}
    assert given <= script_options(), given - script_options()


def require(mapping: dict, *path: str):
    value = mapping
    for key in path:
        assert isinstance(value, dict) and key in value, f"missing {'.'.join(path)}"
        value = value[key]
    return value


@pytest.mark.parametrize(
    "recipe", ["skypilot/gpu_spot.yaml", "skypilot/tpu_slice.yaml"]
)
def test_skypilot_managed_jobs(recipe):
    task = load(recipe)
    assert set(task) <= {"name", "resources", "workdir", "envs", "setup", "run"}
    resources = require(task, "resources")
    assert resources["use_spot"] is True
    recovery = require(resources, "job_recovery")
    assert recovery["strategy"] in ("FAILOVER", "EAGER_NEXT_REGION")
    # 143 reaches SkyPilot as a user-code failure: restarts must be allowed,
    # and bounded, or a bug (exit 1) would be retried for ever.
    assert isinstance(recovery["max_restarts_on_errors"], int)
    assert 1 <= recovery["max_restarts_on_errors"] <= 10
    envs = require(task, "envs")
    assert envs[identity.BASE_DIR].startswith("gs://")  # the run survives the VM
    assert envs["KERAS_BACKEND"] in ("tensorflow", "jax")
    [command] = [line for line in task["run"].splitlines() if line.strip()]
    assert_runs_the_script(shlex.split(command))
    accelerator = require(resources, "accelerators")
    assert ("tpu" in accelerator) == (envs["KERAS_BACKEND"] == "jax")


def test_vertex_custom_job():
    spec = load("vertex/custom_job.yaml")
    scheduling = require(spec, "scheduling")
    assert scheduling["restartJobOnWorkerRestart"] is True
    assert scheduling["strategy"] == "SPOT"
    # AIP_CHECKPOINT_DIR is set only under a baseOutputDirectory.
    assert require(spec, "baseOutputDirectory", "outputUriPrefix").startswith("gs://")
    [pool] = require(spec, "workerPoolSpecs")
    assert pool["replicaCount"] == 1
    container = require(pool, "containerSpec")
    assert container["imageUri"]
    assert_runs_the_script(container["command"] + container.get("args", []))
    env = {item["name"]: item["value"] for item in container.get("env", [])}
    assert identity.RUN_DIR not in env  # the run is AIP_CHECKPOINT_DIR's


def test_jobset_restarts_only_the_restart_statuses():
    jobset = load("jobset/jobset.yaml")
    assert jobset["apiVersion"].startswith("jobset.x-k8s.io/")
    assert jobset["kind"] == "JobSet"
    policy = require(jobset, "spec", "failurePolicy")
    rules = {rule["name"]: rule for rule in policy["rules"]}
    assert set(rules) == {"restart-preempted", "fail-on-bugs"}
    assert rules["restart-preempted"]["action"] == "RestartJobSet"
    assert rules["restart-preempted"]["onJobFailureReasons"] == ["PodFailurePolicy"]
    assert rules["fail-on-bugs"]["action"] == "FailJobSet"
    assert rules["fail-on-bugs"]["onJobFailureReasons"] == ["BackoffLimitExceeded"]
    assert policy["maxRestarts"] >= 1
    [replicated] = require(jobset, "spec", "replicatedJobs")
    job = require(replicated, "template", "spec")
    assert job["backoffLimit"] == 0
    [by_code] = [r for r in job["podFailurePolicy"]["rules"] if "onExitCodes" in r]
    assert by_code["action"] == "FailJob"
    assert by_code["onExitCodes"]["operator"] == "In"
    assert set(by_code["onExitCodes"]["values"]) == {
        exit_status.PREEMPTED,
        exit_status.RESTART,
    }
    pod = require(job, "template", "spec")
    assert pod["restartPolicy"] == "Never"  # podFailurePolicy requires it
    [container] = pod["containers"]
    assert by_code["onExitCodes"]["containerName"] == container["name"]
    assert_runs_the_script(container["command"])
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env[identity.RUN_DIR].startswith("gs://")


def test_kaggle_notes_run_the_same_script_on_jax():
    with open(os.path.join(EXAMPLES, "kaggle", "README.md"), encoding="utf-8") as f:
        notes = f.read()
    assert f"!python {SCRIPT}" in notes
    assert 'os.environ["KERAS_BACKEND"] = "jax"' in notes
    assert identity.RUN_DIR in notes and "/kaggle/working" in notes
    assert "UserSecretsClient" in notes


# Where install lines live: what a user copies.
_INSTALL_DOCS = ("README.md", "docs", "notebooks", "examples")
_NAMED = re.compile(r"""pip install[^\n#]*?(?<![\w./-])['"]?colab-resume\b""")


def _documents():
    for top in _INSTALL_DOCS:
        path = os.path.join(ROOT, top)
        if os.path.isfile(path):
            yield path
        for folder, _, files in os.walk(path):
            for name in files:
                if name.endswith((".md", ".ipynb", ".yaml", ".yml", "Dockerfile")):
                    yield os.path.join(folder, name)


def test_no_install_line_names_an_index_the_package_is_not_on():
    """colab-resume is not on PyPI: a line that installs it by name from an
    index would fail, or install whatever squats the name. Such a line is
    only ever the "once published" form, said on the same line."""
    wrong = []
    for path in _documents():
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if _NAMED.search(line) and "publish" not in line:
                    wrong.append(
                        f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()}"
                    )
    assert wrong == []


def test_the_container_recipes_ship_their_dockerfile():
    dockerfile = os.path.join(EXAMPLES, "docker", "Dockerfile")
    with open(dockerfile, encoding="utf-8") as handle:
        text = handle.read()
    assert "COPY examples" in text and "pip install --no-cache-dir ." in text
    for recipe in ("vertex/custom_job.yaml", "jobset/jobset.yaml"):
        with open(os.path.join(EXAMPLES, recipe), encoding="utf-8") as handle:
            assert "examples/docker/Dockerfile" in handle.read(), recipe


def test_the_kaggle_notes_install_the_wheel():
    with open(os.path.join(EXAMPLES, "kaggle", "README.md"), encoding="utf-8") as f:
        assert "!pip install -q /kaggle/input/" in f.read()
