# kappa-ingest: `make demo` and `make test` set up everything on a fresh machine
# (Python 3.11, Java 17, Maven): the venv, the package, the Kafka jars, Spark's packages.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat setup.py | cksum | cut -d' ' -f1)
export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(BIN)/python)

DEMO_ROWS ?= 200000

.PHONY: setup browser compiler netlab demo test faults unit integration lint format bench links sweep profile scaling soak soak-watch clean

setup: $(STAMP) $(VENV)/.jars

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-*; touch $@

# The broker's jars (Maven Central, via mvn) and Spark's packages (Kafka sink, Delta),
# resolved once into ~/.cache/kappa-ingest and ~/.ivy2.5.2; later runs download nothing.
# Also the C record loops and the driver JVM's class archive (a training session, ~40 s).
$(VENV)/.jars: $(STAMP) conf/kafka-broker-pom.xml
	$(BIN)/python -m kappa_ingest.setup_jars
	touch $@

demo: setup data/demo-$(DEMO_ROWS).csv
	$(BIN)/kappa-ingest ingest --input data/demo-$(DEMO_ROWS).csv --topic demo --master 'local[2]' --partitions 2

data/demo-$(DEMO_ROWS).csv: | $(STAMP)
	$(BIN)/kappa-ingest gen-data --layout wide30 --rows $(DEMO_ROWS) --out $@

# The suite as two pytest processes side by side (one alone leaves a core idle ~40% of the
# time), each sharing its brokers, Spark session, packed venv and labs between its tests: the
# tests that fault nothing with the single-broker faults, and the other fault and lab tests
# (real processes killed, paused, cut off and taken over).
test: setup browser compiler netlab lint
	$(BIN)/python tests/side_by_side.py

faults: setup browser compiler netlab
	$(BIN)/pytest tests -m faults

unit: setup
	$(BIN)/pytest tests/unit

integration: setup browser compiler
	$(BIN)/pytest tests/integration -m "not faults"

# Debian's Chromium, for the tests that read the report page in a real browser, and a C
# compiler, for the record loops the suite tests: installed with apt-get where missing; where
# that fails, the set-up fails, saying how to install them (no test skips for want of either).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo -n)
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends
# $(call apt_where_missing,COMMAND,PACKAGES): PACKAGES installed where COMMAND is missing
# (apt-get's lists refreshed only if the first try fails); a failure is the next line's to report.
apt_where_missing = command -v $(1) >/dev/null || $(SUDO) sh -c '$(APT_INSTALL) $(2) >/dev/null 2>&1 || { apt-get update -q >/dev/null && $(APT_INSTALL) $(2) >/dev/null; }' || true
browser:
	@$(call apt_where_missing,chromium,chromium)
	@command -v chromium >/dev/null || { echo "make: the suite needs Debian's chromium and apt-get could not install it: run 'sudo apt-get install chromium'" >&2; exit 1; }

compiler:
	@$(call apt_where_missing,cc,gcc libc6-dev)
	@command -v cc >/dev/null || { echo "make: the suite needs a C compiler (cc) for the record loops it tests and apt-get could not install one: run 'sudo apt-get install gcc'" >&2; exit 1; }

# iproute2's ip and tc, for the lab of hosts (network namespaces; the suite runs as root).
APT_IPROUTE := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends iproute2 >/dev/null
netlab:
	@command -v ip >/dev/null && command -v tc >/dev/null || $(SUDO) sh -c '$(APT_IPROUTE) 2>&1 || { apt-get update -q >/dev/null && $(APT_IPROUTE); }'

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf build dist metrics data bench-results .pytest_cache .ruff_cache spark-warehouse

# Benchmarks: not part of `make test` (they take minutes and need a quiet machine).
BENCH_ARGS ?=
# The contestants on the local broker, then over delayed, shaped and cut links (root: the lab).
bench: setup netlab
	@command -v kcat >/dev/null || echo "note: kcat not installed (apt-get install kcat); its row is skipped"
	$(BIN)/python jobs/benchmark.py $(BENCH_ARGS)
	$(BIN)/kappa-ingest bench --listing --repeats 3
	-$(BIN)/kappa-ingest bench --watch  # a target missed: exit 1, the other measurements still run
	$(BIN)/kappa-ingest bench --watch-start
	@if [ "$$(id -u)" = 0 ]; then $(BIN)/kappa-ingest bench --links $(LINKS_ARGS); $(BIN)/kappa-ingest bench --watch-lab; \
	else echo "note: make links needs root (network namespaces): the links were not measured"; fi

LINKS_ARGS ?= --repeats 3
links: setup netlab
	-$(BIN)/kappa-ingest bench --links $(LINKS_ARGS)
	$(BIN)/kappa-ingest bench --watch-lab

# 10M rows through each sink, read back and checked row by row; ~20 minutes on 2 cores.
SOAK_ARGS ?=
soak: setup
	$(BIN)/python jobs/soak.py $(SOAK_ARGS)

# A watch over a landing directory for 30 minutes: files landing at random, a broker
# restarted and an executor killed on the way; every row once, memory and latency flat.
SOAK_WATCH_ARGS ?=
soak-watch: setup
	$(BIN)/python jobs/soak_watch.py $(SOAK_WATCH_ARGS)

sweep: setup
	$(BIN)/kappa-ingest bench --sweep $(BENCH_ARGS)

# Profiles of a run's sending window (root): the busiest Python worker by py-spy (from pip,
# into the venv), the executor JVM by perf (Debian's linux-perf, installed where missing)
# and jcmd. PROFILE_ARGS: e.g. --layout debs2012 --ingest-args '--key-column mf01'.
PROFILE_ARGS ?= --layout wide30
profile: setup
	$(BIN)/pip install -q py-spy
	@$(call apt_where_missing,perf,linux-perf)
	$(BIN)/kappa-ingest bench --profile $(PROFILE_ARGS)

scaling: setup
	$(BIN)/kappa-ingest bench --scaling $(BENCH_ARGS)
