// Command tfkube-pause is the first process of every pod sandbox on the test cluster's real
// node: it holds the pod's namespaces open, reaps the children it inherits as the pod's
// init (with a shared process namespace), and exits when the container runtime stops the
// sandbox (SIGTERM or SIGINT). A registry's pause image does the same; none can be pulled here.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
