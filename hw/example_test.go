package hw_test

import (
	"fmt"
	"log"

	"github.com/linemq/linemq/hw"
	"github.com/linemq/linemq/hw/board"
	"github.com/linemq/linemq/hw/led"
	"github.com/linemq/linemq/hw/watchdog"
)

// The gateway's side of the wiring: open the hardware with the health
// registry as the gate, show health on the LEDs, count traffic, say ready
// once the listeners accept, close on the way out.
func ExampleOpen() {
	// gateway/health.Registry implements watchdog.Gate; a func stands in.
	gate := watchdog.GateFunc(func() (bool, string) { return true, "" })

	h, err := hw.Open(hw.Config{}, hw.Options{
		Gate: gate,
		// Left nil, Board and Getenv are the real machine and environment.
		Board:  board.Simulated(""),
		Getenv: func(string) string { return "" },
	})
	if err != nil {
		log.Fatal(err) // every error names its key under hw.
	}
	defer h.Close()

	h.Status.Set(led.Heartbeat) // on every health change: Heartbeat, SlowBlink or FastBlink
	h.Cluster.Set(led.Off)      // standalone
	h.Traffic.Count(12)         // messages since the last call
	if err := h.Watchdog.Ready(); err != nil {
		log.Print(err)
	}
	fmt.Println(h.Board, "/", h.Watchdog.State().Reason)
	// Output: no GPIO / no watchdog configured
}
