# The two commands a new user needs: `make demo` (set up + the main job) and `make test`.
# Everything runs in the virtual environment .venv that `make setup` makes with
# $(PYTHON) (default python3: the system's is fine) and fills from requirements-dev.lock.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Commands started by a target (shrink, ruff, maturin) come from the venv too.
IN_VENV := PATH="$(CURDIR)/$(VENV)/bin:$$PATH"
SETUP_STAMP := $(VENV)/.setup-done

.PHONY: setup demo test lint bench lock clean

$(SETUP_STAMP): pyproject.toml requirements-dev.lock scripts/setup.sh native/Cargo.toml native/src/*.rs
	PYTHON="$(PYTHON)" bash scripts/setup.sh
	touch $(SETUP_STAMP)

setup: $(SETUP_STAMP)

demo: $(SETUP_STAMP)
	$(IN_VENV) $(PY) -m shrink.demo --out demo-out

# The tests marked compute (they compute only: no server, testbed, signal, timing or CPU
# pinning) run first, TEST_WORKERS at a time (pytest-xdist; each module on one worker); then
# the rest, which start servers, pin CPUs and time runs, one at a time with nothing
# beside them. Both halves run; either failing fails the target.
TEST_WORKERS ?= 2
# A value pytest-xdist would refuse is refused before set-up and the lint: it failed the
# first half only, and the second, serial half (minutes) ran before the target failed.
ifneq ($(filter test,$(MAKECMDGOALS)),)
ifeq (${shell case '$(TEST_WORKERS)' in auto|logical) echo ok;; ''|*[!0-9]*) ;; *) echo ok;; esac},)
$(error TEST_WORKERS=$(TEST_WORKERS) is not a number of test workers (or auto, logical))
endif
endif
test: $(SETUP_STAMP)
	$(IN_VENV) $(PY) -m ruff check .
	$(IN_VENV) $(PY) -m pytest -q -m compute -n $(TEST_WORKERS) --dist loadfile; a=$$?; \
	$(IN_VENV) $(PY) -m pytest -q -m "not compute"; b=$$?; \
	[ $$a -eq 0 ] && [ $$b -eq 0 ]

lint: $(SETUP_STAMP)
	$(IN_VENV) $(PY) -m ruff check .

bench: $(SETUP_STAMP)
	$(IN_VENV) bash bench/run_all.sh

# Re-resolves requirements-dev.lock (then requirements.lock, the same versions less
# the dev tools and Ray) from pyproject.toml, keeping every pin that still fits;
# `make lock UPGRADE=1` takes the newest versions within pyproject's bounds instead.
# Run make test after, and commit the lock files with the change that needed them.
# UPGRADE=0 (any value) upgraded every pin: only 1 or nothing is taken.
ifneq ($(filter-out 1,$(UPGRADE)),)
$(error UPGRADE=$(UPGRADE): give UPGRADE=1 to upgrade the pins, or nothing)
endif
LOCK_FLAGS := --universal --python-version 3.11 --generate-hashes --quiet \
	--custom-compile-command "make lock" $(if $(UPGRADE),--upgrade)
lock: $(SETUP_STAMP)
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev $(LOCK_FLAGS) -o requirements-dev.lock
	$(VENV)/bin/uv pip compile pyproject.toml -c requirements-dev.lock $(LOCK_FLAGS) \
		-o requirements.lock

clean:
	rm -rf $(SETUP_STAMP) .setup-done demo-out build *.egg-info .pytest_cache native/target
