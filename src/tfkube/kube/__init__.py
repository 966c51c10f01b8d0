"""The Kubernetes room: what the operator, the Kubernetes backend and rendering all stand
on. Three public modules, from the bottom up; import the one you need:

    names     the names, labels and annotations contract (pure constants and strings)
    observe   pods and Jobs -> replica states, exit codes, restarts and messages (pure)
    rest      REST access with one error type, `ApiError`; kubeconfig login

`render` imports `names` only (import-linter keeps it so), which is why this package's
face re-exports nothing: importing `tfkube.kube.names` must not pull in the planner or
the `kubernetes` client.
"""
