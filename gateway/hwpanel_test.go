package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"periph.io/x/conn/v3/gpio/gpiotest"

	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/hw"
	"github.com/linemq/linemq/hw/board"
)

// getBody fetches url and returns its status and body.
func getBody(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestHWPanelNotConfigured: a gateway on a machine without GPIO, with no
// watchdog and not under systemd, has no hardware, and /api/v1/hw says so
// instead of showing simulated LEDs and an idle watchdog as configured.
func TestHWPanelNotConfigured(t *testing.T) {
	cfg := testConfig(t)
	cfg.HTTP.Listen = new("127.0.0.1:0")
	g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t), Version: "test",
		HW: hw.Options{Board: board.Simulated(""), Getenv: func(string) string { return "" }}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	base := "http://" + g.HTTPAddr().String()

	_, body := getBody(t, base+"/api/v1/hw")
	want := `{"configured":false,"reason":"no hardware configured (status LEDs, watchdog)"}`
	if got := strings.TrimSpace(string(body)); got != want {
		t.Errorf("/api/v1/hw = %s, want %s", got, want)
	}
	var st struct {
		HW map[string]any `json:"hw"`
	}
	_, body = getBody(t, base+"/api/v1/status")
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.HW["configured"] != false {
		t.Errorf("/api/v1/status hw = %v, want not configured", st.HW)
	}
}

// snakeCase is the API's rule for field names.
var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// checkNames fails for every object key under v that is not snake_case.
func checkNames(t *testing.T, path string, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if !snakeCase.MatchString(k) {
				t.Errorf("%s.%s: not a snake_case name", path, k)
			}
			checkNames(t, path+"."+k, e)
		}
	case []any:
		for _, e := range v {
			checkNames(t, path+"[]", e)
		}
	}
}

// TestHWPanelJSON: with a status LED on a GPIO pin and systemd's watchdog,
// /api/v1/hw is configured and follows docs/api.md: snake_case names, the
// watchdog's period in seconds, its times RFC 3339 in UTC.
func TestHWPanelJSON(t *testing.T) {
	sock, path := newNotifySocket(t)
	cfg := testConfig(t)
	cfg.HTTP.Listen = new("127.0.0.1:0")
	cfg.HW.LEDs.Status.GPIO = "GPIO17"
	env := map[string]string{"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"} // fed every 0.2 s
	g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t), Version: "test",
		HW: hw.Options{Board: board.Simulated("Raspberry Pi 4 Model B Rev 1.4", &gpiotest.Pin{N: "GPIO17"}),
			Getenv: func(k string) string { return env[k] }}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	select {
	case <-g.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("not ready")
	}
	sock.await(t, "WATCHDOG=1", 5*time.Second) // so that last_feed is set

	_, body := getBody(t, "http://"+g.HTTPAddr().String()+"/api/v1/hw")
	if strings.Contains(string(body), "0001-01-01") {
		t.Errorf("a zero time in %s", body)
	}
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	checkNames(t, "hw", raw)

	var p struct {
		Configured bool   `json:"configured"`
		Board      string `json:"board"`
		LEDs       []struct {
			Name, Device, Pattern string
			Lit                   *bool
		} `json:"leds"`
		Watchdog struct {
			Feeding       *bool    `json:"feeding"`
			Since         *string  `json:"since"`
			LastFeed      *string  `json:"last_feed"`
			LastCheck     *string  `json:"last_check"`
			PeriodSeconds float64  `json:"period_seconds"`
			Feeders       []string `json:"feeders"`
			Errors        []string `json:"errors"`
		} `json:"watchdog"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	if !p.Configured || p.Board == "" {
		t.Errorf("configured %v, board %q: %s", p.Configured, p.Board, body)
	}
	if len(p.LEDs) != 3 || p.LEDs[0].Name != "status" || p.LEDs[0].Device != "GPIO17" ||
		p.LEDs[1].Device != "simulated" || p.LEDs[0].Pattern == "" || p.LEDs[0].Lit == nil {
		t.Errorf("leds: %s", body)
	}
	w := p.Watchdog
	if w.Feeding == nil || w.PeriodSeconds != 0.2 || len(w.Feeders) != 1 || w.Errors == nil {
		t.Errorf("watchdog: %s", body)
	}
	for name, s := range map[string]*string{"since": w.Since, "last_feed": w.LastFeed, "last_check": w.LastCheck} {
		if s == nil {
			t.Errorf("watchdog.%s is null after a feed: %s", name, body)
			continue
		}
		if ts, err := time.Parse(time.RFC3339Nano, *s); err != nil || ts.Location() != time.UTC {
			t.Errorf("watchdog.%s = %q: not an RFC 3339 time in UTC (%v)", name, *s, err)
		}
	}
}
