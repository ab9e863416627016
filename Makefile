# The two commands a newcomer needs: `make test` and `make demo`.
# Both build the virtualenv from nothing on first use.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test suite demo lint docs bench chaos clean colab-test browser-test jax-test pictures wheel

# keras-hub, a test dependency, without what it requires: its requirement
# tensorflow-text requires the full tensorflow (beside tensorflow-cpu here, and
# none at all in the JAX virtualenv). Its pure dependencies come by name.
HUB := keras-hub==0.32.0
HUB_DEPS := absl-py packaging regex rich kagglehub sentencepiece tokenizers

$(STAMP): setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	mkdir -p build && $(EDITABLE) $(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps $(HUB) 'tensorflow-text>=2.20'
	$(PY) -m pip install --quiet $(HUB_DEPS)
	touch $(STAMP)

# Every phase, in this order: lint (CI runs `make test` only, so this is
# where lint is enforced), the documentation site built strictly, the main suite, the JAX tests in their own
# virtualenv without TensorFlow, and the panel clicked in two browser
# frontends (each in its own virtualenv). A failing phase does not skip the
# ones after it: all run, the failures are listed at the end, and the exit
# status is non-zero if any failed.
TEST_PHASES := lint docs suite jax-test browser-test
test:
	@echo "=== make test: virtualenvs and emulators, several at a time"
	@# Mostly downloads: in parallel they take the time of the longest. A
	@# failure here is left to the phase that needs it, which tries again.
	-@$(MAKE) --no-print-directory -j 4 $(ENVIRONMENTS)
	@$(MAKE) --no-print-directory $(STAMP)
	@failed=""; \
	for phase in $(TEST_PHASES); do \
		echo "=== make test: $$phase"; \
		$(MAKE) --no-print-directory $$phase || failed="$$failed $$phase"; \
	done; \
	if [ -n "$$failed" ]; then \
		echo "=== make test: FAILED:$$failed (of: $(TEST_PHASES))"; \
		exit 1; \
	fi; \
	echo "=== make test: all phases passed ($(TEST_PHASES))"

# Editable installs of this package write its egg-info in the source tree:
# one at a time, also when the virtualenvs are built in parallel.
EDITABLE := flock build/.editable.lock

# Everything the phases install, built up front by `make test`.
ENVIRONMENTS = $(STAMP) $(DRIVE_MOCK)/.installed $(TORCH_VENV)/.installed \
	$(DOCS_VENV)/.installed $(JAX_VENV)/.installed $(BROWSER_VENV)/.installed \
	$(COLAB_VENV)/.installed

# The Drive API emulator the suite starts (tests/support/drive_emulator.py):
# google-drive-mock from npm with the express and cors it runs on, pinned.
DRIVE_MOCK := build/drive-mock
$(DRIVE_MOCK)/.installed: Makefile
	command -v npm >/dev/null || (apt-get update -qq && apt-get install -y -qq nodejs npm)
	npm install --silent --no-audit --no-fund --prefix $(DRIVE_MOCK) \
		google-drive-mock@1.2.0 express@5.2.1 cors@2.8.6
	touch $@

# Keras on torch, which the agent refuses by name (tests/test_torch_refused.py):
# a small virtualenv with the CPU build of torch, Keras and the package, no
# TensorFlow and no JAX.
TORCH_VENV := build/venv-torch
$(TORCH_VENV)/.installed: setup.py
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install --quiet torch==2.13.0 keras
	mkdir -p build && $(EDITABLE) $(TORCH_VENV)/bin/pip install --quiet -e .
	touch $@

# The main suite: three workers on two cores (most tests wait on training
# processes they started, so a third keeps the cores busy: 17 min against
# 20 with two), each taking whole files (module fixtures are built once).
suite: $(STAMP) $(DRIVE_MOCK)/.installed $(TORCH_VENV)/.installed
	COLAB_RESUME_TORCH_PYTHON=$(abspath $(TORCH_VENV))/bin/python \
		$(PY) -m pytest -q -n 3 --dist loadfile --durations=25

# The chaos soak (not in CI; ~15 min on 2 cores): >= 50 random SIGKILLs,
# takeover races, 5xx/resets/stalls and expiring tokens; prints its figures.
chaos: $(STAMP)
	$(PY) tests/soak/soak.py --kills 50 --out soak-results-$$(date +%s)

demo: $(STAMP)
	$(VENV)/bin/colab-resume demo

# The wheel to install from until the package is on an index (in Colab: from
# Drive or an upload, as the notebooks' install cell does):
# $(DIST)/colab_resume-<version>-py3-none-any.whl. setuptools stages the files
# in build/lib and never removes one there, so a module deleted since the last
# build would ship again: the staging folders go first.
DIST ?= dist
wheel: $(STAMP)
	rm -rf build/lib build/bdist.*
	$(PY) -m build --wheel --no-isolation --outdir $(DIST) .
	@ls $(DIST)/colab_resume-*-py3-none-any.whl

# lint-imports: the floors of docs/DESIGN.md §3 and where TensorFlow and
# JAX may be imported, as contracts (.importlinter).
lint: $(STAMP)
	$(VENV)/bin/ruff check colab_resume tests bench
	$(VENV)/bin/ruff format --check colab_resume tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# The documentation site (mkdocs.yml) into build/site, strictly: a broken
# link, a missing include or a docstring griffe cannot read fails it. Its own
# virtualenv, pinned by docs/requirements.txt; the API reference is read from
# the source, so it needs neither TensorFlow nor the package installed.
DOCS_VENV := build/venv-docs
$(DOCS_VENV)/.installed: docs/requirements.txt
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install --quiet -r docs/requirements.txt
	touch $@

docs: $(DOCS_VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --site-dir build/site
	@# A Sphinx role left raw in the API reference (docs/griffe_roles.py renders them).
	@! grep -oE ':(class|meth|func|mod|attr|data|exc|obj):`' build/site/api/index.html

# The panel's real-kernel click test again, with the versions Colab runs
# (ipywidgets 7.7 + ipykernel 6 + IPython 7.34) in a second virtualenv, which
# also serves the classic notebook (ipywidgets 7 extension) to the browser test.
COLAB_VENV := build/venv-colab
$(COLAB_VENV)/.installed: tests/browser/requirements-colab.txt
	$(PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/pip install --quiet -r tests/browser/requirements-colab.txt
	touch $@

colab-test: $(STAMP) $(COLAB_VENV)/.installed
	COLAB_RESUME_KERNEL_PYTHON=$(COLAB_VENV)/bin/python $(PY) -m pytest -q tests/test_panel_kernel.py

# Keras on JAX without TensorFlow (what Colab's TPU runs): a second
# virtualenv with jax[cpu] and keras but no TensorFlow, so "the JAX path
# never imports TensorFlow" is proven by its absence. tests/on_jax is collected
# only there; it runs the quickstart notebook's TPU path too (papermill, a
# kernel, and matplotlib for its report, as Colab has), and Grain pipelines.
JAX_VENV := build/venv-jax
$(JAX_VENV)/.installed: setup.py pyproject.toml tests/on_jax/requirements.txt
	$(PYTHON) -m venv $(JAX_VENV)
	$(JAX_VENV)/bin/pip install --quiet --upgrade pip
	$(JAX_VENV)/bin/pip install --quiet -r tests/on_jax/requirements.txt
	$(JAX_VENV)/bin/pip install --quiet --no-deps $(HUB)
	$(JAX_VENV)/bin/pip install --quiet $(HUB_DEPS)
	mkdir -p build && $(EDITABLE) $(JAX_VENV)/bin/pip install --quiet -e .
	touch $@

# The cross-backend tests run the TensorFlow side in the main virtualenv.
# Three workers, each taking whole files; then the multi-process files alone,
# as they would run on separate hosts: their peers' liveness bound (a few
# seconds of silence) is what they test, not what a loaded machine should
# trip.
JAX_ALONE := tests/on_jax/test_multihost.py tests/on_jax/test_demo_multihost.py
JAX_PYTEST := COLAB_RESUME_TF_PYTHON=$(abspath $(PY)) $(JAX_VENV)/bin/python -m pytest -q
jax-test: $(STAMP) $(JAX_VENV)/.installed
	@status=0; \
	$(JAX_PYTEST) -n 3 --dist loadfile --durations=5 \
		$(addprefix --ignore=,$(JAX_ALONE)) tests/on_jax || status=1; \
	$(JAX_PYTEST) --durations=5 $(JAX_ALONE) || status=1; \
	exit $$status

# The panel in a real browser, every button clicked while fit runs, in two
# frontends: JupyterLab 4 (ipywidgets 8; served from build/venv-browser, the
# kernel is $(VENV)) and the classic notebook with ipywidgets 7.7 as Colab
# ships it (build/venv-colab). Headless Debian Chromium, installed here when
# missing. tests/browser is collected only in build/venv-browser.
# Screenshots land in build/browser-artifacts/.
BROWSER_VENV := build/venv-browser
$(BROWSER_VENV)/.installed: setup.py tests/browser/requirements-lab.txt
	$(PYTHON) -m venv $(BROWSER_VENV)
	$(BROWSER_VENV)/bin/pip install --quiet -r tests/browser/requirements-lab.txt
	mkdir -p build && $(EDITABLE) $(BROWSER_VENV)/bin/pip install --quiet -e .
	touch $@

browser-test: $(STAMP) $(BROWSER_VENV)/.installed $(COLAB_VENV)/.installed
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	COLAB_RESUME_TF_PYTHON=$(abspath $(PY)) COLAB_RESUME_COLAB_PYTHON=$(abspath $(COLAB_VENV))/bin/python \
		$(BROWSER_VENV)/bin/python -m pytest -q --durations=5 tests/browser $(BROWSER_TEST_ARGS)

# The documentation's pictures, drawn by today's code: the live panel as the
# JupyterLab browser test sees it (after Checkpoint now), and the report of
# a demo run (a session SIGKILLed, found dead, its successor resuming).
PICTURES_RUN := build/pictures/demo-run
pictures: $(STAMP) $(BROWSER_VENV)/.installed $(COLAB_VENV)/.installed
	rm -rf build/pictures && mkdir -p build/pictures docs/img
	$(VENV)/bin/colab-resume demo --run-dir $(PICTURES_RUN)
	$(VENV)/bin/colab-resume report $(PICTURES_RUN) -o docs/img/report.png
	$(MAKE) browser-test BROWSER_TEST_ARGS="-k jupyterlab"
	cp build/browser-artifacts/jupyterlab-panel.png docs/img/panel.png
	ls -l docs/img

clean:
	rm -rf $(VENV) build *.egg-info
