package hw

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpiotest"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/hw/board"
	"github.com/linemq/linemq/hw/led"
	"github.com/linemq/linemq/hw/watchdog"
)

// logBuf is a slog destination a test can read while the hardware logs.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuf) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

func noEnv(string) string { return "" }

var healthy = watchdog.GateFunc(func() (bool, string) { return true, "" })

func TestOpenWithoutGPIO(t *testing.T) {
	var log logBuf
	cfg := Config{LEDs: LEDs{Status: LED{GPIO: "GPIO17"}, Cluster: LED{GPIO: "GPIO27", ActiveLow: true}}}
	h, err := Open(cfg, Options{Board: board.Simulated(""), Logger: log.logger(), Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if n := strings.Count(log.String(), "no GPIO: simulated LEDs"); n != 1 {
		t.Errorf("said %d times that the LEDs are simulated, want once:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "status=simulated cluster=simulated traffic=simulated") {
		t.Errorf("log does not list the LEDs:\n%s", log.String())
	}
	// Simulated LEDs still follow their patterns, for the status page.
	h.Status.Set(led.On)
	brokertest.Eventually(t, 5*time.Second, "simulated status LED lit", h.Status.Lit)
	if st := h.Watchdog.State(); st.Feeding || st.Reason != "no watchdog configured" {
		t.Errorf("watchdog state %+v", st)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestOpenGPIO(t *testing.T) {
	pins := map[string]*gpiotest.Pin{}
	var list []gpio.PinIO
	for _, n := range []string{"GPIO17", "GPIO27", "gpiochip0/3", "GPIO22"} {
		p := &gpiotest.Pin{N: n}
		pins[n] = p
		list = append(list, p)
	}
	var log logBuf
	cfg := Config{
		LEDs: LEDs{
			Status:  LED{GPIO: "GPIO17"},
			Cluster: LED{GPIO: "GPIO27", ActiveLow: true},
			Traffic: LED{GPIO: "gpiochip0/3"},
		},
		Watchdog: Watchdog{GPIO: "GPIO22", GPIOTimeout: 200 * time.Millisecond},
	}
	h, err := Open(cfg, Options{
		Board: board.Simulated("Raspberry Pi 4 Model B Rev 1.4", list...), Gate: healthy,
		Logger: log.logger(), Getenv: noEnv,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if !strings.Contains(log.String(), "Raspberry Pi 4 Model B Rev 1.4 (4 GPIO lines)") || strings.Contains(log.String(), "simulated") {
		t.Errorf("log:\n%s", log.String())
	}
	if pins["GPIO27"].Read() != gpio.High {
		t.Error("the active-low cluster LED is not dark after Open")
	}
	h.Status.Set(led.On)
	h.Cluster.Set(led.On)
	brokertest.Eventually(t, 5*time.Second, "status and cluster lit", func() bool {
		return pins["GPIO17"].Read() == gpio.High && pins["GPIO27"].Read() == gpio.Low
	})
	// The watchdog IC's pin toggles while healthy.
	seen := map[gpio.Level]bool{}
	brokertest.Eventually(t, 5*time.Second, "watchdog pin toggles", func() bool {
		seen[pins["GPIO22"].Read()] = true
		return seen[gpio.High] && seen[gpio.Low]
	})
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if pins["GPIO17"].Read() != gpio.Low || pins["GPIO27"].Read() != gpio.High {
		t.Error("Close left an LED lit")
	}
}

func TestOpenErrors(t *testing.T) {
	pi := func() *board.Board {
		return board.Simulated("Raspberry Pi 4 Model B Rev 1.4", &gpiotest.Pin{N: "GPIO17"})
	}
	missing := filepath.Join(t.TempDir(), "watchdog")
	tests := []struct {
		name  string
		cfg   Config
		board *board.Board
		want  []string // substrings of each error, in order
	}{
		{
			name:  "every part",
			board: pi(),
			cfg: Config{
				LEDs: LEDs{
					Status:  LED{GPIO: "GPIO40"},
					Cluster: LED{Sysfs: "ACT"},
					Traffic: LED{GPIO: "GPIO17"},
				},
				Watchdog: Watchdog{Device: missing, GPIO: "GPIO5", GPIOTimeout: time.Second},
			},
			want: []string{
				`leds.status.gpio: unknown pin "GPIO40" on Raspberry Pi 4 Model B Rev 1.4 (1 GPIO line)`,
				`leds.cluster.sysfs: cannot drive LED "ACT": open `,
				"watchdog.device: open " + missing + ": no such file or directory (no watchdog driver loaded",
				`watchdog.gpio: unknown pin "GPIO5" on Raspberry Pi 4`,
			},
		},
		{
			// LEDs fall back to simulation; a watchdog IC must not.
			name:  "watchdog IC without GPIO",
			board: board.Simulated(""),
			cfg: Config{
				LEDs:     LEDs{Status: LED{GPIO: "GPIO17"}},
				Watchdog: Watchdog{GPIO: "GPIO22", GPIOTimeout: time.Second},
			},
			want: []string{`watchdog.gpio: pin "GPIO22": this machine has no GPIO`},
		},
		{
			name:  "invalid",
			board: pi(),
			cfg:   Config{LEDs: LEDs{Status: LED{GPIO: "GPIO99"}}},
			want:  []string{`leds.status.gpio: unknown pin "GPIO99"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(tt.cfg, Options{Board: tt.board, Gate: healthy, SysfsRoot: t.TempDir(), Getenv: noEnv})
			got := errorKeys(t, err)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("error %d:\n got %s\nwant %s...", i, got[i], tt.want[i])
				}
			}
		})
	}
	t.Run("missing device is a not-exist error", func(t *testing.T) {
		_, err := Open(Config{Watchdog: Watchdog{Device: missing}}, Options{Board: pi(), Gate: healthy, Getenv: noEnv})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("errors.Is(%v, fs.ErrNotExist) = false", err)
		}
	})
}

func TestOpenOptional(t *testing.T) {
	var log logBuf
	cfg := Config{
		LEDs: LEDs{Status: LED{GPIO: "GPIO40", Optional: true}, Cluster: LED{Sysfs: "ACT", Optional: true}},
		Watchdog: Watchdog{
			Device: filepath.Join(t.TempDir(), "watchdog"), GPIO: "GPIO5", GPIOTimeout: time.Second,
			Optional: true,
		},
	}
	h, err := Open(cfg, Options{
		Board: board.Simulated("Raspberry Pi 4 Model B Rev 1.4", &gpiotest.Pin{N: "GPIO17"}),
		Gate:  healthy, SysfsRoot: t.TempDir(), Logger: log.logger(), Getenv: noEnv,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	out := log.String()
	for _, want := range []string{
		"optional LED simulated\" led=status", "optional LED simulated\" led=cluster",
		"optional watchdog not used\" key=watchdog.device", "optional watchdog not used\" key=watchdog.gpio",
		"status=simulated cluster=simulated traffic=simulated",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if len(h.Watchdog.State().Feeders) != 0 {
		t.Errorf("feeders %v", h.Watchdog.State().Feeders)
	}
}

func TestOpenNeedsGate(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "watchdog")
	os.WriteFile(dev, nil, 0o600)
	_, err := Open(Config{Watchdog: Watchdog{Device: dev}}, Options{Board: board.Simulated(""), Getenv: noEnv, standIn: true})
	if err == nil || !strings.Contains(err.Error(), "Options.Gate is required") {
		t.Fatalf("Open without a Gate = %v", err)
	}
	// The device was opened to check it, and disarmed again.
	if b, _ := os.ReadFile(dev); string(b) != "V" {
		t.Errorf("device got %q, want the magic close", b)
	}
}

// TestOpenWatchdogs runs the kernel device (a stand-in file) and systemd
// (a datagram socket) together, gated, through Ready and Close.
func TestOpenWatchdogs(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "watchdog")
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "hw")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mu sync.Mutex
	var msgs []string
	go func() {
		buf := make([]byte, 512)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			mu.Lock()
			msgs = append(msgs, string(buf[:n]))
			mu.Unlock()
		}
	}()
	got := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(msgs, "|")
	}

	var ok sync.Mutex // held: unhealthy
	gate := watchdog.GateFunc(func() (bool, string) {
		if !ok.TryLock() {
			return false, "test: unhealthy"
		}
		ok.Unlock()
		return true, ""
	})
	env := map[string]string{"NOTIFY_SOCKET": sock, "WATCHDOG_USEC": "200000"}
	h, err := Open(Config{Watchdog: Watchdog{Device: dev, Timeout: 10 * time.Second}}, Options{
		Board: board.Simulated(""), Gate: gate, Getenv: func(k string) string { return env[k] }, standIn: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	st := h.Watchdog.State()
	if len(st.Feeders) != 2 || st.Period != 100*time.Millisecond {
		t.Errorf("feeders %q, period %v; want the device and systemd, fed every 100ms", st.Feeders, st.Period)
	}
	brokertest.Eventually(t, 5*time.Second, "both watchdogs fed", func() bool {
		b, _ := os.ReadFile(dev)
		return strings.Contains(string(b), "k") && strings.Contains(got(), "WATCHDOG=1")
	})
	if strings.Contains(got(), "READY=1") {
		t.Fatal("READY=1 before Ready")
	}
	if err := h.Watchdog.Ready(); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 5*time.Second, "READY=1", func() bool { return strings.Contains(got(), "READY=1") })

	ok.Lock()
	brokertest.Eventually(t, 5*time.Second, "feeding stops", func() bool { return !h.Watchdog.State().Feeding })
	brokertest.Eventually(t, 5*time.Second, "status sent", func() bool {
		return strings.Contains(got(), "STATUS=Not feeding the watchdog: test: unhealthy")
	})

	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(dev)
	if !strings.HasSuffix(string(b), "kV") {
		t.Errorf("device got %q, want keepalives, then the magic close", b)
	}
	brokertest.Eventually(t, 5*time.Second, "STOPPING=1", func() bool { return strings.HasSuffix(got(), "STOPPING=1") })
}
