# tfkube: the two set-up commands are `make demo` and `make test`; both install what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tfkube-installed
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install demo test test-stress lint unit bench clean web chromium sandbox s3-bins hdfs-bins modelserver

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[tf,kubernetes,server,serving,notebook,s3,dev]'
	# The client a TensorFlow Serving user writes (tests, benchmarks/serving). Without its
	# dependencies: it requires `tensorflow`, which would install TensorFlow a second time
	# beside tensorflow-cpu; what it imports (grpcio, protobuf, TensorFlow's protos) is here.
	$(BIN)/python -m pip install -q --no-deps 'tensorflow-serving-api==2.21.0'
	touch $@

## web: the dashboard's front-end libraries from the npm registry (tools/web/build.sh).
WEB := src/tfkube/server/web
WEB_STAMP := $(WEB)/static/vendor/.stamp
$(WEB_STAMP): $(WEB)/package.json $(WEB)/package-lock.json tools/web/build.sh
	bash tools/web/build.sh

web: $(WEB_STAMP)

## chromium: Debian's Chromium for the browser tests (installed only when missing).
chromium:
	bash tools/web/ensure-chromium.sh

## sandbox: Debian's bubblewrap, with which a server run as root confines each team's jobs
## (installed only when missing and only as root; tools/sandbox/ensure-bwrap.sh).
sandbox:
	@bash tools/sandbox/ensure-bwrap.sh

## s3-bins: SeaweedFS's `weed`, the S3-compatible store the data-source tests start
## (tools/s3/build.sh: from the Go module proxy into ~/.cache/tfkube, once per version).
s3-bins:
	bash tools/s3/build.sh

## hdfs-bins: Apache Hadoop's MiniDFSCluster, the HDFS the data-source tests start
## (tools/hdfs/build.sh: from Maven Central through mvn into ~/.cache/tfkube, once).
hdfs-bins:
	bash tools/hdfs/build.sh

## modelserver: tfkube's native model server (native/modelserver, Go over the TensorFlow
## wheel's C API) into ~/.cache/tfkube and the venv's bin (tools/modelserver/build.sh; a
## second run is a no-op).
modelserver: $(STAMP)
	VENV=$(VENV) bash tools/modelserver/build.sh

install: $(STAMP) $(WEB_STAMP) sandbox modelserver

## demo: a real distributed training run on this machine (1 PS + 2 workers, between-graph).
demo: $(STAMP) modelserver
	$(BIN)/tfkube run examples/mnist-between-graph/job.yaml --replace --summary

## lint: ruff, mypy on the package, import layering.
lint: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks tools
	$(BIN)/ruff format --check src tests examples benchmarks tools
	$(BIN)/mypy
	$(BIN)/lint-imports

## test: everything: lint, unit tests, real TensorFlow tests, tests against a real control plane
## and real TensorFlow pods on its real kubelet node, the dashboard in Chromium, data sources
## staged from a real S3-compatible store (SeaweedFS).
## The venv, the browser and lint first; then the rest of the tests at once, while the heavy
## builds (kube-bins, kube-node, s3-bins, hdfs-bins: no-ops when cached) run beside them,
## niced; the real-node tests start when the control plane and the real node are built, the
## KWOK-only tests when the control plane and the gang scheduler are, each beside the rest
## (tools/test/suite.sh, tools/test/builds.sh; SUITE_SERIAL=1: the builds first, then one session).
test: install chromium
	$(MAKE) lint
	BIN=$(BIN) bash tools/test/suite.sh

## test-stress: the local and TensorFlow tests while 2 CPU burners compete for the cores,
## then the Ctrl-C / kill tests 10 times under the same load (docs/testing.md).
test-stress: $(STAMP)
	$(BIN)/python tools/stress/run.py

unit: $(STAMP)
	$(BIN)/pytest tests/unit

bench: $(STAMP)
	$(BIN)/python benchmarks/local_overhead/run.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build src/*.egg-info

include tools/kube/kube.mk
