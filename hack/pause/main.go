// Command pause is the process of the real node's pod sandboxes (the role of registry.k8s.io/pause, which
// no registry serves here): it holds the pod's namespaces, reaps the zombies it inherits as PID 1 of a
// shared PID namespace, and exits 0 on SIGINT or SIGTERM. Built by hack/node-bins.sh into a FROM-scratch
// image (hack/cluster_realnode.py), imported into the node's containerd as its sandbox_image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
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
