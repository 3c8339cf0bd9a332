package share

import (
	"errors"
	"fmt"
	"strconv"
)

// Strategy selects how [Group.Pick] orders the candidates for a message.
// The zero value is [RoundRobin].
type Strategy uint8

// The strategies. Their configuration names are the String values
// ("round_robin", "random", ...); doc.go compares them.
const (
	// RoundRobin starts each message one position further along the
	// candidate list, using a cursor kept on this node only.
	RoundRobin Strategy = iota
	// Random starts each message at a uniformly random candidate.
	Random
	// Sticky keeps delivering to one member until it leaves or cannot take
	// a message.
	Sticky
	// HashClientID sends every message of one publisher to the same member
	// while the membership is unchanged (rendezvous hashing on
	// [Key.ClientID]).
	HashClientID
	// HashTopic sends every message on one topic name to the same member
	// while the membership is unchanged (rendezvous hashing on [Key.Topic]).
	HashTopic
	// PreferLocal rotates over the members on this node and turns to the
	// members on other nodes only when no local member can take the message.
	PreferLocal

	numStrategies // keep last: the count, used for validation
)

// strategyNames is indexed by Strategy; it is also the list of valid
// configuration values, in the order error messages print them.
var strategyNames = [numStrategies]string{
	RoundRobin:   "round_robin",
	Random:       "random",
	Sticky:       "sticky",
	HashClientID: "hash_clientid",
	HashTopic:    "hash_topic",
	PreferLocal:  "prefer_local",
}

// ErrUnknownStrategy is wrapped by the errors [ParseStrategy] and
// [Options.Validate] return for a name or value that is not a strategy.
var ErrUnknownStrategy = errors.New("share: unknown strategy")

// validNames is the list printed in errors, built once.
var validNames = func() string {
	s := ""
	for i, n := range strategyNames {
		if i > 0 {
			s += ", "
		}
		s += n
	}
	return s
}()

// ParseStrategy returns the strategy with configuration name s. Names are
// matched exactly (lower case, underscores). An unknown name yields an error
// that wraps [ErrUnknownStrategy] and lists the valid names, so a
// configuration error message tells the operator what to write instead.
func ParseStrategy(s string) (Strategy, error) {
	for i, n := range strategyNames {
		if s == n {
			return Strategy(i), nil
		}
	}
	return 0, fmt.Errorf("%w %q (valid: %s)", ErrUnknownStrategy, s, validNames)
}

// String returns the configuration name of s, or "Strategy(N)" for a value
// outside the defined range.
func (s Strategy) String() string {
	if s < numStrategies {
		return strategyNames[s]
	}
	return "Strategy(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText implements encoding.TextMarshaler with the configuration name,
// so a Strategy round-trips through JSON and YAML configuration as a string.
func (s Strategy) MarshalText() ([]byte, error) {
	if s >= numStrategies {
		return nil, fmt.Errorf("%w %d", ErrUnknownStrategy, uint8(s))
	}
	return []byte(strategyNames[s]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with [ParseStrategy].
func (s *Strategy) UnmarshalText(text []byte) error {
	v, err := ParseStrategy(string(text))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Verdict is the answer of the caller's accept function about one candidate
// member during [Group.Pick].
type Verdict uint8

// The verdicts. A value above Skip is treated as Skip, so a mistake in the
// caller fails towards "try the next member" rather than towards delivering
// to a member that cannot take the message.
const (
	// Take: the member can take the message now.
	Take Verdict = iota
	// Full: the member could take the message, but its send window is full
	// (flow control), so the message would wait in its queue. With
	// Options.SkipFull, Pick prefers any member that answers Take and falls
	// back to the first Full member only when nobody does.
	Full
	// Skip: the member cannot take the message at all, for example its
	// session is gone, its node is unreachable, or it is offline with a full
	// queue. Pick never chooses it.
	Skip
)

// String returns "take", "full", "skip" or "Verdict(N)".
func (v Verdict) String() string {
	switch v {
	case Take:
		return "take"
	case Full:
		return "full"
	case Skip:
		return "skip"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// Options configure one [Group]. The zero value is round robin with strict
// rotation (SkipFull false); the broker's own default sets SkipFull.
type Options struct {
	// Strategy orders the candidates for each message. A value outside the
	// defined range behaves as RoundRobin; Validate reports it.
	Strategy Strategy

	// SkipFull passes over members whose send window is full (verdict Full)
	// as long as another member answers Take. When false, Full counts as
	// Take: the rotation is strict and a slow member's share queues up
	// behind its window instead of moving to a faster member.
	SkipFull bool

	// Rand is the random source of the Random strategy, called once per
	// Pick. When nil, the group uses its own PCG generator seeded from the
	// group name and filter, so runs are reproducible; a broker that wants
	// different sequences on different nodes supplies a source seeded with
	// its node identity. Pick calls it under the caller's lock, so it need
	// not be safe for concurrent use unless it is shared between groups.
	Rand func() uint64
}

// Validate reports an Options value that Pick would not honour as written:
// currently only an unknown Strategy.
func (o Options) Validate() error {
	if o.Strategy >= numStrategies {
		return fmt.Errorf("%w %d (valid: %s)", ErrUnknownStrategy, uint8(o.Strategy), validNames)
	}
	return nil
}
