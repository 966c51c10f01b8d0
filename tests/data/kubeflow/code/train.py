"""A stand-in trainer: reads the cluster from TF_CONFIG like a real one, prints its task,
and writes one marker per replica into the shared log folder."""

import json
import os
import sys
import time

config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
print(f"{task['type']}-{task['index']} of {sorted(config['cluster'])}; args {sys.argv[1:]}")
log_dir = os.environ["TFKUBE_LOG_DIR"]
with open(os.path.join(log_dir, f"{task['type']}-{task['index']}.done"), "w") as out:
    out.write(" ".join(sys.argv[1:]))
if task["type"] == "ps":
    while True:  # a parameter server serves until tfkube ends it
        time.sleep(1)
