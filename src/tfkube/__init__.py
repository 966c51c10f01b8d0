"""tfkube: distributed TensorFlow training as one command.

Data flows one way: a job file is parsed into a typed `TFJob` (`tfkube.api`), the cluster
math turns counts into addresses and the per-replica contract (`tfkube.cluster`), the
planner decides what the job should do next from what was observed (`tfkube.planner`),
and a backend (`tfkube.backends`) is the only place that acts: it starts the launcher
(`tfkube.launcher`) once per replica, as a process locally or as a pod in a cluster.
"""

__version__ = "0.1.0"
