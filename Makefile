# The two commands of the README: `make run` and `make test`. Each does its own set-up.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The test suite's server; pytest-django creates and drops the database test_redrive on it.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres
export TEST_DATABASE_NAME ?= test_redrive

.PHONY: run test venv

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the pinned requirements change.
$(VENV)/.installed: requirements.txt requirements-dev.txt | $(BIN)/activate
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

run: venv
	$(BIN)/python manage.py migrate --noinput -v 0
	$(BIN)/python manage.py collectstatic --noinput -v 0
	$(BIN)/python manage.py run_console

test: venv
	bash .ci/ensure-services.sh
	DATABASE_URL=$(TEST_DATABASE_URL) $(BIN)/ruff check .
	DATABASE_URL=$(TEST_DATABASE_URL) $(BIN)/pytest $(PYTEST_ARGS)
