package update

import (
	"debug/buildinfo"
	"fmt"
	"runtime"
	"runtime/debug"
)

// archName is a bundle's architecture for a Go target: GOARCH, except
// 32-bit ARM, which carries its GOARM level (armv6 and armv7 builds are
// different downloads for different boards).
func archName(goarch, goarm string) string {
	if goarch == "arm" {
		if goarm == "" {
			goarm = "7" // the go command's default
		}
		return "armv" + goarm[:1] // "7,softfloat" and the like: the level
	}
	return goarch
}

// Arch is the architecture of the running linemq, as bundles name it.
func Arch() string {
	var goarm string
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "GOARM" {
				goarm = s.Value
			}
		}
	}
	return archName(runtime.GOARCH, goarm)
}

// BinaryArch is the architecture of the Go program in file, read from the
// build information the go command puts into every binary.
func BinaryArch(file string) (string, error) {
	bi, err := buildinfo.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: not a Go program with build information: %w", file, err)
	}
	var goarch, goarm string
	for _, s := range bi.Settings {
		switch s.Key {
		case "GOARCH":
			goarch = s.Value
		case "GOARM":
			goarm = s.Value
		}
	}
	if goarch == "" {
		return "", fmt.Errorf("%s: its build information names no GOARCH", file)
	}
	return archName(goarch, goarm), nil
}
