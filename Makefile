# jobgate developer entry points. Each target creates .venv when it is missing.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: serve test deps bench conformance clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,pipeline]'
	touch $@

## serve: run jobgate on 127.0.0.1:11300 with SQLite in ./jobgate.db (durability: commit)
serve: $(VENV)/.installed
	$(VENV)/bin/jobgate serve

## deps: what the test suite needs outside pip: Debian's beanstalkd and the JDBC drivers of the
## pipeline (when root), and the real bunqueue client and server from npm (Bun 1.4.5 + bunqueue
## 2.9.5, pinned in tests/bunqueue_client)
deps:
	@if command -v npm >/dev/null 2>&1; then \
	  test -x tests/bunqueue_client/node_modules/.bin/bun || \
	  (cd tests/bunqueue_client && npm install --no-audit --no-fund --loglevel=error); \
	else echo "note: npm not found; the real bunqueue client tests will skip"; fi
	@{ command -v beanstalkd >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1 && \
	  command -v redis-server >/dev/null 2>&1 && \
	  test -f /usr/share/java/sqlite-jdbc.jar && \
	  test -f /usr/share/java/postgresql.jar; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq beanstalkd \
	      libxerial-sqlite-jdbc-java libpostgresql-jdbc-java openssl redis-server >/dev/null; \
	  else echo "note: install beanstalkd, openssl, redis-server, libxerial-sqlite-jdbc-java and libpostgresql-jdbc-java (Debian) for the differential, TLS, glide-mq conformance and pipeline tests"; fi; }

## test: the whole test suite (PostgreSQL variants run when JOBGATE_TEST_PG_URL is set)
test: $(VENV)/.installed deps
	$(PY) -m pytest -q

## bench: load benchmark against jobgate and beanstalkd (never part of the tests)
bench: $(VENV)/.installed
	$(PY) benchmarks/beanstalk_load.py

## conformance: differential run of the beanstalk scenarios against beanstalkd and jobgate
conformance: $(VENV)/.installed deps
	$(PY) -m conformance.differential

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
