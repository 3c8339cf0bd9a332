package gateway

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/linemq/linemq/hw/watchdog"
)

// TestWatchdogJSONBeforeFirstFeed: times that have not happened yet are
// null, not Go's zero time, and the lists are [] rather than null.
func TestWatchdogJSONBeforeFirstFeed(t *testing.T) {
	b, err := json.Marshal(watchdogJSONOf(watchdog.State{Reason: "starting", Period: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"feeding":false,"reason":"starting","since":null,"last_feed":null,"last_check":null,` +
		`"period_seconds":5,"ready":false,"feeders":[],"errors":[]}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}
