# Placeholder: the real control-plane targets (kube-bins, kube-up, kube-down) land here (issue 3).
.PHONY: kube-bins kube-up kube-down
kube-bins:
	@echo "kube-bins: not built yet"
