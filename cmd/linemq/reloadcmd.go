package main

import (
	"fmt"
	"io"
	"strconv"
	"syscall"
)

// runReload is `linemq reload PID`: it asks the linemq process PID to read
// its password and ACL files and its listeners' certificates again
// (SIGHUP), as systemd's ExecReload= does with $MAINPID: the appliance's
// root file system has no kill(1) of its own to do it.
func runReload(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprintln(stderr, "Usage: linemq reload PID\n\nAsks the linemq process PID to read its password, ACL and certificate files again (SIGHUP);\nsystemctl reload linemq runs it. The process logs what it reloaded.")
		if len(args) == 1 {
			return 0
		}
		return 2
	}
	pid, err := strconv.Atoi(args[0])
	if err != nil || pid <= 0 {
		fmt.Fprintf(stderr, "linemq reload: %q is not a process id\n", args[0])
		return 2
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		fmt.Fprintf(stderr, "linemq reload: process %d: %v\n", pid, err)
		return 1
	}
	fmt.Fprintf(stdout, "linemq reload: asked process %d to reload\n", pid)
	return 0
}
