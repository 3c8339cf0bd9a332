// Package health keeps the gateway's health in one place, so that the
// status page, /readyz, the LEDs, the hardware watchdog and a cluster's
// degraded mode all read the same answer instead of each working it out.
//
// # Model
//
// A [Registry] holds named checks, one per component ("broker",
// "storage", "mqtt-listener", ...). Each check is in one [State], OK,
// Degraded or Failed, with a reason and the time it entered that state. The
// overall state is the worst of all checks; a registry with no checks is
// OK.
//
// A check is either pushed or polled:
//
//   - pushed: the component calls [Registry.Set] when its state changes
//     (a store that sees a commit fail, a listener that stops accepting);
//   - polled: the registry calls a func(ctx) error every interval
//     ([Registry.Poll]) and gives it a timeout. A check that has not
//     answered when its timeout runs out is Failed, and stays so until it
//     answers: this is how a wedged component (a broker whose router is
//     stuck) is detected rather than assumed alive. A polled check is
//     Degraded until its first answer.
//
// [Registry.Subscribe] delivers every change on a channel without ever
// blocking the registry: a subscriber that falls behind loses the oldest
// pending changes, never the newest, so it always ends up seeing the
// current state.
//
// [Registry.Healthy] is the one-call gate for a hardware watchdog: it is
// true unless some check is Failed.
//
// # Time
//
// Time comes from a [broker.Clock], so tests drive intervals and timeouts
// with brokertest.FakeClock rather than by sleeping. With a fake clock a
// polled check's timeout fires only when the test advances the clock.
//
// # Locking
//
// One mutex guards the registry. Check functions run on their own
// goroutines without it, and subscribers are sent to without blocking while
// it is held, so that changes reach every subscriber in the order they
// happened.
package health
