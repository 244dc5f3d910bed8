# make run: set up .venv and run the main sample; make test: set up .venv and run the tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON ?= $(abspath $(PY))

.PHONY: run test bench install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m compileall -q naiad stages linq samples
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) -m samples.main

test: $(STAMP)
	$(PY) -m pytest -q --durations=15

bench: $(STAMP)
	$(PY) -m tests.benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis spark-warehouse metastore_db
