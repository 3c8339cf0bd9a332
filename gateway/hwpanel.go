package gateway

import (
	"time"

	"github.com/linemq/linemq/hw"
	"github.com/linemq/linemq/hw/watchdog"
)

// hwJSON is the hardware panel as /api/v1/hw and the status page show it.
// Its names and units follow docs/api.md (snake_case, durations in
// seconds, RFC 3339 times in UTC, null for a time that has not happened),
// which the hw packages' own types, made for Go callers, do not.
type hwJSON struct {
	Board    string       `json:"board"`
	LEDs     []ledJSON    `json:"leds"`
	Watchdog watchdogJSON `json:"watchdog"`
}

type ledJSON struct {
	Name    string `json:"name"`
	Device  string `json:"device"` // "GPIO17", a sysfs LED, "simulated"
	Pattern string `json:"pattern"`
	Lit     bool   `json:"lit"`
}

type watchdogJSON struct {
	Feeding       bool       `json:"feeding"`
	Reason        string     `json:"reason"`
	Since         *time.Time `json:"since"`
	LastFeed      *time.Time `json:"last_feed"`
	LastCheck     *time.Time `json:"last_check"`
	PeriodSeconds float64    `json:"period_seconds"`
	Ready         bool       `json:"ready"`
	Feeders       []string   `json:"feeders"`
	Errors        []string   `json:"errors"`
}

// hwJSONOf reads h's state now.
func hwJSONOf(h *hw.Hardware) hwJSON {
	out := hwJSON{Board: h.Board.String(), LEDs: []ledJSON{}}
	for _, l := range h.LEDs.LEDs() {
		out.LEDs = append(out.LEDs, ledJSON{Name: l.Name(), Device: l.Device(), Pattern: l.Pattern().String(), Lit: l.Lit()})
	}
	out.Watchdog = watchdogJSONOf(h.Watchdog.State())
	return out
}

func watchdogJSONOf(s watchdog.State) watchdogJSON {
	out := watchdogJSON{
		Feeding: s.Feeding, Reason: s.Reason,
		Since: utcOrNull(s.Since), LastFeed: utcOrNull(s.LastFeed), LastCheck: utcOrNull(s.LastCheck),
		PeriodSeconds: s.Period.Seconds(), Ready: s.Ready,
		// [] rather than null: a list that is empty is still a list.
		Feeders: append([]string{}, s.Feeders...), Errors: append([]string{}, s.Errors...),
	}
	return out
}

// utcOrNull is t in UTC, or nil (JSON null) when t is the zero time.
func utcOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
