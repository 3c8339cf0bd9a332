package main

import (
	"fmt"
	"io"

	"github.com/linemq/linemq/gateway/mosquitto"
)

// runImportMosquitto is `linemq import-mosquitto FILE`: it prints the
// linemq.yaml equivalent to a Mosquitto configuration on standard output,
// and every directive it could not carry over, and why, on standard error.
func runImportMosquitto(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprintln(stderr, "Usage: linemq import-mosquitto mosquitto.conf > linemq.yaml\n\n"+
			"Prints the linemq configuration equivalent to a Mosquitto one (its include_dir files too);\n"+
			"each directive it could not carry over is listed on standard error with the reason.\n"+
			"The password and ACL files keep Mosquitto's format: copy them where the output names them.")
		if len(args) == 1 && args[0] != "" && args[0][0] == '-' {
			return 0
		}
		return 2
	}
	res, err := mosquitto.Import(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "linemq import-mosquitto: %v\n", err)
		return 1
	}
	if _, err := stdout.Write(res.YAML); err != nil {
		fmt.Fprintf(stderr, "linemq import-mosquitto: %v\n", err)
		return 1
	}
	for _, n := range res.Notes {
		fmt.Fprintf(stderr, "not carried over: %s\n", n)
	}
	if len(res.Notes) > 0 {
		fmt.Fprintf(stderr, "%d directive(s) not carried over (above); the rest is in the output\n", len(res.Notes))
	}
	return 0
}
