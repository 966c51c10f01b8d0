# Real Kubernetes control plane for tests (issue 3) and its real node (issue 10); included by
# the top-level Makefile.
#   make kube-bins   build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
#                    and kwok from Go modules into ~/.cache/tfkube/kube-<version>/bin (reused);
#                    and the gang scheduler (scheduler-plugins, tools/gang/build.sh)
#   make kube-node   what the real node needs (root): Debian's containerd, runc, CNI plugins and
#                    mmdebstrap when missing; kubelet, kube-proxy, CoreDNS and pause built like the
#                    rest; the pause, TensorFlow and tfkube images built into ~/.cache/tfkube/images
#                    (reused; tfkube's own layer again when its source changed: seconds)
#   make kube-up     start it on 127.0.0.1 in a temp dir; prints the kubeconfig path
#                    (REAL_NODE=1: plus one real kubelet node beside the fake ones, with kube-proxy;
#                    the API server then listens on the node's bridge address 198.19.N.1)
#   make kube-down   stop exactly the processes kube-up started; remove its temp dir (and all the
#                    real node made: containers, mounts, cgroups, the bridge)
#   make kube-status show whether one runs
# Needs go, bash, openssl and python3 (stdlib); the real node also root. See docs/testing.md.
KUBE_DIR := tools/kube
KUBE_PYTHON ?= $(or $(PYTHON),python3)
REAL_NODE ?=

.PHONY: kube-bins kube-node kube-up kube-down kube-status

kube-bins:
	@bash $(KUBE_DIR)/build.sh
	@bash tools/gang/build.sh

kube-node:
	@if [ "$$(id -u)" -ne 0 ]; then \
	  echo "kube-node: not root: the real node cannot run here (its tests are skipped)" >&2; \
	else \
	  bash $(KUBE_DIR)/node-deps.sh && bash $(KUBE_DIR)/build.sh --with-node && \
	  $(KUBE_PYTHON) $(KUBE_DIR)/images.py build >/dev/null; \
	fi

kube-up: kube-bins $(if $(REAL_NODE),kube-node)
	@$(KUBE_PYTHON) $(KUBE_DIR)/cluster.py up $(if $(REAL_NODE),--real-node)

kube-down:
	@$(KUBE_PYTHON) $(KUBE_DIR)/cluster.py down

kube-status:
	@$(KUBE_PYTHON) $(KUBE_DIR)/cluster.py status
