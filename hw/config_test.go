package hw

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// errorKeys returns "key: message" for every *Error in err.
func errorKeys(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var out []string
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var ke *Error
		if !errors.As(e, &ke) {
			t.Errorf("not an *Error: %v", e)
			continue
		}
		out = append(out, ke.Error())
	}
	return out
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // "key: message", in order
	}{
		{name: "zero value", cfg: Config{}},
		{name: "appliance", cfg: Config{
			LEDs: LEDs{
				Status:  LED{GPIO: "GPIO17"},
				Cluster: LED{GPIO: "GPIO27", ActiveLow: true},
				Traffic: LED{Sysfs: "ACT", FlickerEvery: 10},
			},
			Watchdog: Watchdog{Device: "/dev/watchdog", Timeout: 15 * time.Second, GPIO: "GPIO22", GPIOTimeout: 1600 * time.Millisecond},
		}},
		{name: "emulated board", cfg: Config{
			LEDs:     LEDs{Status: LED{GPIO: "gpiochip0/3"}, Cluster: LED{GPIO: "ID_SDA"}},
			Watchdog: Watchdog{Device: "/dev/watchdog0"},
		}},
		{name: "unknown pin", cfg: Config{LEDs: LEDs{Status: LED{GPIO: "GPIO99"}}},
			want: []string{`leds.status.gpio: unknown pin "GPIO99" (BCM numbering runs from GPIO0 to GPIO57)`}},
		{name: "bad names", cfg: Config{LEDs: LEDs{
			Status:  LED{GPIO: "gpiochip0/x"},
			Cluster: LED{GPIO: "GPIO 17"},
			Traffic: LED{Sysfs: "../ACT"},
		}}, want: []string{
			`leds.status.gpio: invalid pin "gpiochip0/x" (write a line without a name as <chip>/<line>, such as gpiochip0/3)`,
			`leds.cluster.gpio: invalid pin name "GPIO 17"`,
			`leds.traffic.sysfs: "../ACT" is not an LED name (a directory in /sys/class/leds, such as ACT)`,
		}},
		{name: "both", cfg: Config{LEDs: LEDs{Status: LED{GPIO: "GPIO17", Sysfs: "ACT"}}},
			want: []string{"leds.status: set gpio or sysfs, not both"}},
		{name: "active_low on sysfs", cfg: Config{LEDs: LEDs{Status: LED{Sysfs: "ACT", ActiveLow: true}}},
			want: []string{"leds.status.active_low: only applies to a gpio LED (a kernel LED's polarity is in its device tree)"}},
		{name: "flicker", cfg: Config{LEDs: LEDs{Traffic: LED{FlickerEvery: -1}}},
			want: []string{"leds.traffic.flicker_every: must not be negative (got -1)"}},
		{name: "pin twice", cfg: Config{
			LEDs:     LEDs{Status: LED{GPIO: "GPIO17"}, Traffic: LED{GPIO: "GPIO17"}},
			Watchdog: Watchdog{GPIO: "GPIO17", GPIOTimeout: time.Second},
		}, want: []string{
			"leds.traffic.gpio: GPIO17 is also leds.status.gpio",
			"watchdog.gpio: GPIO17 is also leds.status.gpio",
		}},
		{name: "device", cfg: Config{Watchdog: Watchdog{Device: "watchdog", Timeout: 1500 * time.Millisecond}},
			want: []string{
				`watchdog.device: "watchdog" is not an absolute path (normally /dev/watchdog)`,
				"watchdog.timeout: 1.5s is not a whole number of seconds (the kernel sets it in seconds)",
			}},
		{name: "timeout range", cfg: Config{Watchdog: Watchdog{Device: "/dev/watchdog", Timeout: -time.Second}},
			want: []string{"watchdog.timeout: -1s out of range (1s..18h12m15s)"}},
		{name: "ic without timeout", cfg: Config{Watchdog: Watchdog{GPIO: "GPIO22", GPIOPulse: time.Millisecond}},
			want: []string{"watchdog.gpio_timeout: required with watchdog.gpio: the IC's timeout, the minimum from its data sheet"}},
		{name: "ic pulse", cfg: Config{Watchdog: Watchdog{GPIO: "GPIO22", GPIOTimeout: time.Second, GPIOPulse: 600 * time.Millisecond}},
			want: []string{"watchdog.gpio_pulse: 600ms is not short beside gpio_timeout 1s"}},
		{name: "ic timeouts without ic", cfg: Config{Watchdog: Watchdog{GPIOTimeout: time.Second, GPIOPulse: time.Millisecond}},
			want: []string{"watchdog.gpio_timeout: set without watchdog.gpio", "watchdog.gpio_pulse: set without watchdog.gpio"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errorKeys(t, tt.cfg.Validate())
			if !slices.Equal(got, tt.want) {
				t.Errorf("Validate:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestYAML checks the keys and the duration syntax the docs use.
func TestYAML(t *testing.T) {
	const doc = `
leds:
  status: {gpio: GPIO17}
  cluster: {gpio: GPIO27, active_low: true}
  traffic: {sysfs: ACT, flicker_every: 5, optional: true}
watchdog:
  device: /dev/watchdog
  timeout: 10s
  gpio: GPIO22
  gpio_timeout: 1.6s
  gpio_pulse: 1ms
  optional: true
`
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	want := Config{
		LEDs: LEDs{
			Status:  LED{GPIO: "GPIO17"},
			Cluster: LED{GPIO: "GPIO27", ActiveLow: true},
			Traffic: LED{Sysfs: "ACT", FlickerEvery: 5, Optional: true},
		},
		Watchdog: Watchdog{
			Device: "/dev/watchdog", Timeout: 10 * time.Second, GPIO: "GPIO22",
			GPIOTimeout: 1600 * time.Millisecond, GPIOPulse: time.Millisecond, Optional: true,
		},
	}
	if c != want {
		t.Errorf("decoded\n%+v\nwant\n%+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}
