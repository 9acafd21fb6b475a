# The two commands a new user needs: `make demo` (set up + the main job) and `make test`.
PYTHON ?= python3
SETUP_STAMP := .setup-done

.PHONY: setup demo test lint bench clean

$(SETUP_STAMP): pyproject.toml scripts/setup.sh native/Cargo.toml native/src/*.rs
	bash scripts/setup.sh
	touch $(SETUP_STAMP)

setup: $(SETUP_STAMP)

demo: $(SETUP_STAMP)
	$(PYTHON) -m shrink.demo --out demo-out

test: $(SETUP_STAMP)
	$(PYTHON) -m ruff check .
	$(PYTHON) -m pytest -q

lint: $(SETUP_STAMP)
	$(PYTHON) -m ruff check .

bench: $(SETUP_STAMP)
	bash bench/run_all.sh

clean:
	rm -rf $(SETUP_STAMP) demo-out build *.egg-info .pytest_cache native/target
