# Real Kubernetes control plane for tests (issue 3); included by the top-level Makefile.
#   make kube-bins   build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
#                    and kwok from Go modules into ~/.cache/tfkube/kube-<version>/bin (reused)
#   make kube-up     start it on 127.0.0.1 in a temp dir; prints the kubeconfig path
#   make kube-down   stop exactly the processes kube-up started; remove its temp dir
#   make kube-status show whether one runs
# Needs only go, bash, openssl and python3 (stdlib); see docs/testing.md.
KUBE_DIR := tools/kube
KUBE_PYTHON ?= $(or $(PYTHON),python3)

.PHONY: kube-bins kube-up kube-down kube-status

kube-bins:
	@bash $(KUBE_DIR)/build.sh

kube-up: kube-bins
	@$(KUBE_PYTHON) $(KUBE_DIR)/cluster.py up

kube-down:
	@$(KUBE_PYTHON) $(KUBE_DIR)/cluster.py down

kube-status:
	@$(KUBE_PYTHON) $(KUBE_DIR)/cluster.py status
