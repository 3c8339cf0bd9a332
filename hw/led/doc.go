// Package led shows a gateway's state on a few LEDs: named lamps, each
// showing a [Pattern] (off, on, slow blink, fast blink, heartbeat) with
// flickers for traffic laid over it, all driven by one goroutine.
//
// # Model
//
// A [Light] is one lamp that can be lit or darkened, nothing more: a GPIO
// pin through periph.io ([GPIO], active-high or active-low), a Linux LED
// class device such as the Raspberry Pi's ACT LED ([Sysfs]), or a
// simulated lamp that only records its state ([Sim]), which is what a
// machine without GPIO and the tests use.
//
// A [Group] owns the lights and one ticker. Every [Step] its goroutine works
// out, for each [LED], whether the LED's pattern lights it at this moment,
// and calls Light.Set only when that changes, so a steady LED costs no I/O
// and a blinking one costs one write per edge. Patterns are phase-locked to
// the moment they were set: changing the pattern starts the new one at its
// beginning, so a status LED switched to [FastBlink] lights within one Step.
//
// What each pattern means is the caller's decision; the gateway's is
// written in docs/hardware.md (status: heartbeat healthy, slow blink
// degraded, fast blink failed; cluster: on in quorum, slow blink degraded,
// off standalone; traffic: a flicker per message).
//
// A flicker inverts an LED's pattern for one Step, then leaves at least one
// Step of the pattern before the next, so steady traffic shows as a 10 Hz
// flutter. [LED.Count] adds messages; the LED flickers once per
// [LED.SetFlickerEvery] messages. Flickers are not queued: a burst of ten
// thousand messages shows as flutter while it lasts, not as minutes of
// blinking after it ended.
//
// # Caveats
//
// [Sysfs] sets the LED's kernel trigger to "none" while it drives the LED
// and writes the old trigger back on Close. A trigger's own settings (the
// delays of "timer", for one) are not saved and come back as the kernel's
// defaults. A process that is killed leaves the trigger at "none".
//
// Timing is only as good as the ticker: the pattern lengths are counted in
// Steps, so a loaded system stretches blinks rather than skipping them.
//
// # Locking
//
// [LED] methods are safe from any goroutine and never block: they store a
// pattern or add to a counter atomically, and the Group's goroutine picks
// the change up at its next Step. Group.mu guards the list of LEDs and the
// fields of each LED that only the Step touches; Light implementations are
// called only with it held, so they need no locking of their own.
package led
