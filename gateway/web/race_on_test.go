//go:build race

package web

// raceEnabled says the race detector is on, so timings are not a normal
// build's.
const raceEnabled = true
