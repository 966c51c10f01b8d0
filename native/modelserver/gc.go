package main

// The collector's pace. A model server's Go heap is small and short-lived: the model's
// weights live in TensorFlow's memory, and each request allocates its body's tensor, the
// answer's text and a few maps that die with it. Go's default (GOGC=100: collect when the
// heap doubles over what was live, at least 4 MiB) then collects tens of times a second
// under batch-64 load (tens of KB a request, thousands of requests a second), each cycle
// taking a quarter of the cores and stopping the world twice; at GOGC=400 the native
// server answered 1.2-1.4x the requests per second over gRPC at batch 64
// (benchmarks/serving, docs/benchmarks.md "The collector's pace"). The heap may then grow
// to five times what is live, so where the process has a memory limit (a pod's, through
// its cgroup) the collector is also told to keep the Go heap under half of it
// (debug.SetMemoryLimit: it collects more often as the heap nears that, whatever GOGC
// says), leaving the other half to TensorFlow. GOGC or GOMEMLIMIT in the environment win.

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// gcPercent is GOGC's default here.
const gcPercent = 400

// cgroupFiles are where a memory limit is read: cgroup v2, then v1.
var cgroupFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// memoryLimit is the bytes a cgroup file's text allows, 0 for no limit ("max", v1's
// "unlimited" sentinel near 2^63, empty or unreadable text).
func memoryLimit(text string) int64 {
	text = strings.TrimSpace(text)
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0
	}
	return n
}

// gcSettings is the GOGC and Go memory limit (0: none) to set, given the environment's
// GOGC and GOMEMLIMIT and the process's memory limit; ok false leaves the runtime's own.
func gcSettings(gogc, gomemlimit string, limit int64) (percent int, memLimit int64, ok bool) {
	if gogc != "" || gomemlimit != "" {
		return 0, 0, false
	}
	if limit > 0 {
		memLimit = limit / 2
	}
	return gcPercent, memLimit, true
}

// tuneGC sets the collector's pace (see above) and says what it set ("" when nothing).
func tuneGC() string {
	var limit int64
	for _, path := range cgroupFiles {
		if text, err := os.ReadFile(path); err == nil {
			if limit = memoryLimit(string(text)); limit > 0 {
				break
			}
		}
	}
	percent, memLimit, ok := gcSettings(os.Getenv("GOGC"), os.Getenv("GOMEMLIMIT"), limit)
	if !ok {
		return ""
	}
	debug.SetGCPercent(percent)
	text := "GOGC=" + strconv.Itoa(percent)
	if memLimit > 0 {
		debug.SetMemoryLimit(memLimit)
		text += " GOMEMLIMIT=" + strconv.FormatInt(memLimit>>20, 10) + "MiB"
	}
	return text
}
