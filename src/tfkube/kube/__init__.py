"""The Kubernetes room: what the operator, the Kubernetes backend and rendering all stand
on, in the style of kopf's and lightkube's clients. Five small public modules, from the
bottom up; import the one you need:

    names      the names, labels and annotations contract (pure constants and strings)
    resources  every kind tfkube talks to, declared once: group, version, plural,
               scope, subresources; `Resource.url` builds every path (pure)
    errors     every refusal as one typed `ApiError` (NotFound, AlreadyExists, Forbidden,
               Invalid, Gone, ...), mapped from the answer once (pure)
    observe    pods and Jobs -> replica states, exit codes, restarts and messages (pure;
               its rules live in the private `_observe`)
    rest       `Kube`: requests to declared resources, answers as JSON or typed errors;
               kubeconfig and service-account login; `Endpoint` for another HTTP client

This package's `__init__` re-exports nothing, on purpose: `render` imports `names` only
(import-linter keeps it so), and importing `tfkube.kube.names` must not pull in the
planner, the REST module or the `kubernetes` client.
"""
