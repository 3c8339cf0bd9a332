// Package confval holds the value types of linemq.yaml that more than one
// section uses (limits, sizes, durations, each of which may be
// "unlimited"), so that each part of the gateway can own its section's
// schema without importing the configuration package: gateway/config
// imports the parts (their sections), never the other way round.
//
// A type's UnmarshalYAML says what is wrong with a value; the
// configuration's decoder, which walks the file's nodes, says where.
package confval

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Mismatch is a value of the wrong kind for its key.
type Mismatch struct {
	Want string // "an integer", "a mapping of keys", ...
	Got  string // KindName of what the file has
}

func (m *Mismatch) Error() string { return "expected " + m.Want + ", got " + m.Got }

// Unlimited is the value of a [Limit], [Size] or [Duration] written
// "unlimited" in a file: the limit is switched off. In code any negative
// value means the same, as in [broker.Options]. Only some keys accept it;
// Validate refuses it for the others.
const Unlimited = -1

// unlimitedWord is how Unlimited is written.
const unlimitedWord = "unlimited"

// Limit is a limit on a count (messages, topic levels, members): a whole
// number, or Unlimited. The zero value stands for the key's default; writing
// 0 in a file is refused by Validate where a zero limit would make no sense.
type Limit int

// UnmarshalYAML reads a decimal whole number or "unlimited".
func (l *Limit) UnmarshalYAML(n *yaml.Node) error {
	return Scalar(n, "a whole number", func(s string) error {
		if s == unlimitedWord {
			*l = Unlimited
			return nil
		}
		v, err := ParseCount(s, s, "a whole number")
		if err == nil {
			*l = Limit(v)
		}
		return err
	})
}

// String returns the number, or "unlimited" for a negative value.
func (l Limit) String() string {
	if l < 0 {
		return unlimitedWord
	}
	return strconv.Itoa(int(l))
}

// Size is a limit in bytes: a whole number of bytes, optionally with a
// binary unit (64KiB, 1MiB, 2GiB), or Unlimited. The zero value stands for
// the key's default. It is an int, as the broker's sizes are: under 2 GiB
// on 32-bit ARM.
type Size int

// Binary units of a Size.
const (
	KiB Size = 1 << (10 * (iota + 1))
	MiB
	GiB
)

// sizeUnits are the units a Size may be written with, largest first.
var sizeUnits = []struct {
	name string
	n    Size
}{{"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}}

// UnmarshalYAML reads a number of bytes, with or without a unit, or
// "unlimited".
func (z *Size) UnmarshalYAML(n *yaml.Node) error {
	return Scalar(n, "a size", func(s string) error {
		v, err := parseSize(s)
		if err == nil {
			*z = v
		}
		return err
	})
}

func parseSize(s string) (Size, error) {
	if s == unlimitedWord {
		return Unlimited, nil
	}
	num, mult := s, Size(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(s, u.name); ok {
			num, mult = rest, u.n
			break
		}
	}
	v, err := ParseCount(num, s, `a size (write a number of bytes, or one with KiB, MiB or GiB: "64KiB")`)
	if err != nil {
		return 0, err
	}
	if v > math.MaxInt/int(mult) {
		return 0, fmt.Errorf("%s is too large", s)
	}
	return Size(v) * mult, nil
}

// String returns the size with the largest unit that divides it exactly,
// or "unlimited" for a negative value.
func (z Size) String() string {
	if z < 0 {
		return unlimitedWord
	}
	for _, u := range sizeUnits {
		if z >= u.n && z%u.n == 0 {
			return strconv.Itoa(int(z/u.n)) + u.name
		}
	}
	return strconv.Itoa(int(z))
}

// Duration is a time limit: a Go duration string ("500ms", "10s", "1h30m"),
// or Unlimited. The zero value stands for the key's default.
type Duration time.Duration

// UnmarshalYAML reads a duration string or "unlimited".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	return Scalar(n, "a duration", func(s string) error {
		if s == unlimitedWord {
			*d = Unlimited
			return nil
		}
		v, err := time.ParseDuration(s)
		switch {
		case err != nil:
			return fmt.Errorf(`%q is not a duration (write it like "10s", "500ms" or "1h30m")`, s)
		case v < 0:
			return fmt.Errorf("must not be negative (got %v)", v)
		}
		*d = Duration(v)
		return nil
	})
}

// String formats d as time.Duration does, or "unlimited" for a negative
// value.
func (d Duration) String() string {
	if d < 0 {
		return unlimitedWord
	}
	return time.Duration(d).String()
}

// ParseCount parses a non-negative decimal whole number that fits an int
// (32 bits on ARMv7: a larger value is refused, not wrapped). text is the
// value as written, unit included, and what names the expected value, for
// the error.
func ParseCount(num, text, what string) (int, error) {
	v, err := strconv.ParseInt(num, 10, strconv.IntSize)
	switch {
	case err == nil && v >= 0:
		return int(v), nil
	case strings.HasPrefix(num, "-") && (err == nil || errors.Is(err, strconv.ErrRange)):
		return 0, fmt.Errorf("must not be negative (got %s)", text)
	case errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("%s is too large", text)
	}
	return 0, fmt.Errorf("%q is not %s", text, what)
}

// Scalar runs parse on the text of the scalar n, and refuses any other
// kind of node as not what, a description of the value ("a size").
func Scalar(n *yaml.Node, what string, parse func(string) error) error {
	if n.Kind != yaml.ScalarNode {
		return &Mismatch{Want: what, Got: KindName(n)}
	}
	return parse(n.Value)
}

// KindName describes a node in an error message: "a mapping", "a list",
// or a scalar's text, quoted.
func KindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}
