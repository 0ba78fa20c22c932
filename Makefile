# The README's quick start: `make demo` and `make test`, each from a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.mxhet-installed
FMNIST := /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test install data browser clean

demo: install data
	$(VENV)/bin/mxhet-bench demo --out runs/demo

# Three pytest workers, each test file on one (its module fixtures run once): the integration
# tests mostly wait on real processes, pinned iteration times and heartbeat timeouts (with two
# workers the 2 cores were busy 1.55 of 2 on average, 999 s of pytest), so a third file at a
# time fills the idle core time.
test: install data browser
	$(PY) -m pytest -q -n 3 --dist loadfile --durations=20

install: $(STAMP)

$(STAMP): setup.py
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip<25"
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

# Fashion-MNIST from Debian's package, unless MXHET_DATA_DIR points elsewhere;
# OpenSSH server and rsync for the real multi-host launch test (tests/integration/test_ssh_launch.py).
data:
	@if [ -z "$$MXHET_DATA_DIR" ] && [ ! -f $(FMNIST) ]; then \
		echo "installing Debian's dataset-fashion-mnist"; \
		$(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q dataset-fashion-mnist; \
	fi
	@if [ ! -x /usr/sbin/sshd ] || ! command -v rsync >/dev/null; then \
		echo "installing Debian's openssh-server and rsync"; \
		$(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q openssh-server openssh-client rsync; \
	fi

# Debian's chromium: the dashboard's tests drive it headless (tests/integration/test_dashboard.py).
browser:
	@if ! command -v chromium >/dev/null 2>&1; then \
		echo "installing Debian's chromium"; \
		$(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends chromium fonts-liberation; \
	fi

clean:
	rm -rf $(VENV) runs *.egg-info
