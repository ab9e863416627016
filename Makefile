# The two commands a newcomer needs: `make test` and `make demo`.
# Both build the virtualenv from nothing on first use.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo lint bench clean

$(STAMP): setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(VENV)/bin/colab-resume demo

lint: $(STAMP)
	$(VENV)/bin/ruff check colab_resume tests bench
	$(VENV)/bin/ruff format --check colab_resume tests bench
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build *.egg-info
