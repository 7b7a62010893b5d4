# jobgate entry points. `serve` runs the server from its own small environment, .venv-serve
# (the package and its run-time dependencies only); every other target uses .venv, the
# development environment (editable install with the test and pipeline extras). Each target
# creates its environment when it is missing. docs/operations.md, "Install".
VENV ?= .venv
PY := $(VENV)/bin/python
SERVE_VENV ?= .venv-serve
SERVE_PY := $(SERVE_VENV)/bin/python
PYTHON ?= python3
# what the serve environment is built from: it is rebuilt when any of them changes
SERVE_SOURCES := pyproject.toml README.md LICENSE $(wildcard core/*.py gateway/*.py protocols/*.py \
	protocols/*/*.py protocols/http/ui/*.py protocols/http/ui/templates/* protocols/http/ui/static/* migrations/*.py migrations/versions/*.py migrations/alembic.ini \
	migrations/script.py.mako pipeline/*.py conformance/*.py)

.PHONY: serve serve-env test deps bench conformance clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,pipeline]'
	touch $@

# `pip install .` as an operator would (not editable); pip and setuptools are removed
# afterwards (23 MB: the server never installs anything) and brought back by ensurepip for
# the next rebuild; the native extensions' debug information is stripped.
$(SERVE_VENV)/.installed: $(SERVE_SOURCES)
	test -x $(SERVE_PY) || $(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_PY) -m pip --version >/dev/null 2>&1 || $(SERVE_PY) -m ensurepip >/dev/null
	rm -rf build   # setuptools would reinstall what build/lib kept of deleted modules
	$(SERVE_PY) -m pip install -q --no-warn-script-location .
	$(SERVE_PY) -m pip uninstall -q -y pip setuptools
	# the wheels' native extensions carry debug information (31 MiB of the 78): strip it, as a
	# distribution package does; the code is unchanged (docs/operations.md, "Install")
	if command -v strip >/dev/null 2>&1; then \
	  find $(SERVE_VENV) -name '*.so' -type f -exec strip --strip-debug {} + ; fi
	touch $@

## serve-env: build .venv-serve only (jobgate and its run-time dependencies)
serve-env: $(SERVE_VENV)/.installed

## serve: run jobgate on 127.0.0.1:11300 with SQLite in ./jobgate.db (durability: commit),
## from .venv-serve
serve: $(SERVE_VENV)/.installed
	$(SERVE_VENV)/bin/jobgate serve

## deps: what the test suite needs outside pip: Debian's beanstalkd and the JDBC drivers of the
## pipeline (when root), and the real bunqueue client and server from npm (Bun 1.4.5 + bunqueue
## 2.9.5, pinned in tests/bunqueue_client)
deps:
	@if command -v npm >/dev/null 2>&1; then \
	  test -x tests/bunqueue_client/node_modules/.bin/bun || \
	  (cd tests/bunqueue_client && npm install --no-audit --no-fund --loglevel=error); \
	else echo "note: npm not found; the real bunqueue client tests will skip"; fi
	@{ command -v beanstalkd >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1 && \
	  command -v redis-server >/dev/null 2>&1 && test -x /usr/bin/chromium && \
	  test -f /usr/share/java/sqlite-jdbc.jar && \
	  test -f /usr/share/java/postgresql.jar; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq beanstalkd \
	      libxerial-sqlite-jdbc-java libpostgresql-jdbc-java openssl redis-server chromium >/dev/null; \
	  else echo "note: install beanstalkd, openssl, redis-server, chromium, libxerial-sqlite-jdbc-java and libpostgresql-jdbc-java (Debian) for the differential, TLS, glide-mq conformance, dashboard and pipeline tests"; fi; }

## test: the whole test suite (PostgreSQL variants run when JOBGATE_TEST_PG_URL is set): on
## TEST_WORKERS parallel pytest-xdist workers (a module's tests on one worker; by default one
## per core, at most 4: each shared-mode test holds up to a dozen PostgreSQL sessions, and
## the server allows 100 by default), then the tests marked `serial` alone; both parts run,
## and either failing fails it
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)
test: $(VENV)/.installed deps
	@status=0; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not serial" || status=$$?; \
	$(PY) -m pytest -q -m serial || status=$$?; \
	exit $$status

## bench: load benchmark against jobgate and beanstalkd (never part of the tests)
bench: $(VENV)/.installed
	$(PY) benchmarks/beanstalk_load.py

## conformance: differential run of the beanstalk scenarios against beanstalkd and jobgate
conformance: $(VENV)/.installed deps
	$(PY) -m conformance.differential

clean:
	rm -rf $(VENV) $(SERVE_VENV) build *.egg-info .pytest_cache .hypothesis
