# Two commands do all the set-up on a fresh machine:
#   make demo   install edgetune in .venv and tune the demo CNN on this machine
#   make test   install what the tests need (Debian packages too, as root) and run them
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_MODEL ?= demo:tiny-cnn
DEMO_TRIALS ?= 64
PYTEST_ARGS ?=
# test files run on this many processes at once (pytest-xdist, a file's tests stay together); 0: one process
PYTEST_WORKERS ?= 2

.PHONY: demo test install install-test system-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .

install-test: $(BIN)/python system-deps
	$(BIN)/python -m pip install --quiet -e ".[test,postgres,torch,meta,opencl,runtime-build,tflite]"

# Debian packages the tests use: a host C++ compiler (links candidates), the
# aarch64 and armhf cross toolchains (cross-compiled artifacts are checked; the
# armhf one also builds the emulated armv7 board's runtime), the
# PostgreSQL server (the history tests start their own throwaway cluster), and
# for the provisioning tests: an OpenSSH server and client (test boards), ip
# (network namespaces), debootstrap + qemu-user-static + binfmt-support (the
# emulated arm64 and armv7 boards), chromium (a headless browser opens the run report), and pocl (an
# OpenCL device on the CPU that runs the kernels built for the Mali and Adreno profiles).
system-deps:
	@missing=""; \
	command -v gcc >/dev/null || missing="$$missing gcc"; \
	command -v g++ >/dev/null || missing="$$missing g++"; \
	command -v aarch64-linux-gnu-g++ >/dev/null || missing="$$missing g++-aarch64-linux-gnu"; \
	command -v arm-linux-gnueabihf-g++ >/dev/null || missing="$$missing g++-arm-linux-gnueabihf"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	test -x /usr/sbin/sshd || missing="$$missing openssh-server"; \
	command -v ssh >/dev/null || missing="$$missing openssh-client"; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	command -v debootstrap >/dev/null || missing="$$missing debootstrap"; \
	command -v qemu-aarch64-static >/dev/null || missing="$$missing qemu-user-static"; \
	command -v update-binfmts >/dev/null || missing="$$missing binfmt-support"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	ls /etc/OpenCL/vendors/pocl.icd >/dev/null 2>&1 || missing="$$missing pocl-opencl-icd"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing Debian packages:$$missing (run as root or: sudo apt-get install$$missing)"; \
	  fi; \
	fi

demo: install
	$(BIN)/edgetune tune --profile host --model $(DEMO_MODEL) --trials $(DEMO_TRIALS)

# --max-worker-restart=0: a worker that dies (SIGILL, segfault) fails the run at once, naming the test it ran;
# replaced, it leaves pytest-xdist 3.8's loadfile scheduler waiting forever (pytest-dev/pytest-xdist#784, #1313)
test: install-test
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --max-worker-restart=0 $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) edgetune-out .pytest_cache
