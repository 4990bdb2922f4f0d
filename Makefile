# The two commands a new user needs: `make demo` and `make test`. Both build .venv first.
VENV ?= .venv
# Bytecode is cached even where the environment says not to (PYTHONDONTWRITEBYTECODE, set on
# some CI machines): the workflow sandbox imports the workflow modules again for every workflow
# run it starts, and every fleetctl process the tests start imports the project; without a
# cached .pyc each of those imports compiled the source again (6 % of a lifecycle file's CPU).
# So the venv installs without compiling (pip's CPU 22 to 15 s): what is imported is compiled
# once, the first time, and the rest never.
unexport PYTHONDONTWRITEBYTECODE
PY := $(VENV)/bin/python
PYTHON ?= python3
# Debian packages the integration tests run for real: PostgreSQL, OpenSSH's sshd, a Slurm
# cluster (slurm-wlm + munge), a headless browser for the HTML report, nginx as the mTLS
# gRPC proxy in front of Temporal, systemd's systemd-analyze for the deploy/ units, and
# Prometheus and Alertmanager for the agent's, the exporter's and the intake's tests.
# Debian's kubernetes-client (kubectl) too, unless the machine has a kubectl of another vendor
# (that one owns /usr/bin/kubectl and the two packages cannot both be installed).
APT_PACKAGES := postgresql openssh-server openssh-client slurm-wlm munge chromium nginx systemd prometheus prometheus-alertmanager tmux

.PHONY: demo test bench system-deps lint clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -e '.[test]'
	touch $@

# Installs what is missing when run as root (CI, a fresh machine); otherwise says what is
# missing, and the tests that need it skip with that reason on a developer's machine and fail
# under .ci/run (FLEETCTL_TEST_REQUIRE_SERVICES=1: CI never passes on fewer tests).
system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v kubectl >/dev/null 2>&1 || missing="$$missing kubernetes-client"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "not root: missing Debian packages$$missing; their tests will skip (fail with FLEETCTL_TEST_REQUIRE_SERVICES=1)"; fi; \
	fi

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mkdocs build --strict --site-dir site

# tests/packaging builds the wheel (python -m build), installs it into a clean venv without
# the test extras and runs the installed fleetctl from outside the checkout.
# Four processes (Slurm tests all in one of them) on 2 cores: most tests wait on what they test
# (a retry's backoff, a scrape window, a dead worker's timeouts): with three the machine still
# sat idle 36-42 % of the run. Each process runs its own Temporal dev server, PostgreSQL and Slurm
# cluster. Two clean clones at once (8 test processes) pass too: bench/results/test_suite.md.
test: $(VENV)/.installed system-deps lint
	$(VENV)/bin/pytest -n 4 --dist loadgroup --durations=30

demo: $(VENV)/.installed
	$(VENV)/bin/fleetctl demo

bench: $(VENV)/.installed system-deps
	$(PY) -m bench.run

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
