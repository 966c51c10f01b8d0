#!/usr/bin/env bash
# What users did before tfkube: plan ports by hand, write the flags and TF_CONFIG for each
# process, start them, wait for the workers, then kill the PS (it never exits by itself).
# usage: baseline.sh CODE_DIR OUT_DIR PS_PORT WORKER0_PORT WORKER1_PORT [extra worker args]
set -euo pipefail
code=$1 out=$2 ps_port=$3 w0_port=$4 w1_port=$5
shift 5
export TFKUBE_DATA_DIR="$out/data" TFKUBE_LOG_DIR="$out/output" PYTHONUNBUFFERED=1
mkdir -p "$TFKUBE_DATA_DIR" "$TFKUBE_LOG_DIR"
ps_hosts="127.0.0.1:$ps_port"
worker_hosts="127.0.0.1:$w0_port,127.0.0.1:$w1_port"
cluster="{\"ps\": [\"$ps_hosts\"], \"worker\": [\"127.0.0.1:$w0_port\", \"127.0.0.1:$w1_port\"]}"
flags=(--ps_hosts="$ps_hosts" --worker_hosts="$worker_hosts")

TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"ps\", \"index\": 0}}" \
  bash "$code/run.sh" "${flags[@]}" --job_name=ps --task_index=0 >"$out/ps-0.log" 2>&1 &
ps_pid=$!
pids=()
for i in 0 1; do
  TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
  TFKUBE_SHARD_INDEX=$i TFKUBE_NUM_SHARDS=2 \
    bash "$code/run.sh" "${flags[@]}" --job_name=worker --task_index=$i "$@" \
    >"$out/worker-$i.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
kill "$ps_pid" 2>/dev/null || true
wait "$ps_pid" 2>/dev/null || true
exit $status
