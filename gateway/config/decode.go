package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/linemq/linemq/gateway/confval"
)

// ErrUnknownKey is the Err of an [Error] about a key the schema does not
// have, most often a typo that would otherwise silently leave a default.
var ErrUnknownKey = errors.New("unknown key")

// Error is one problem with a configuration, located as precisely as is
// known. Load, Parse, Override and Validate return an *Error, or several
// joined with errors.Join (one per line when printed).
type Error struct {
	// File is the file name given to Parse or Load, or the origin given to
	// Override ("flag -mqtt-listen"); empty for a value set in code.
	File string
	// Line is the 1-based line in File, or 0 when there is none.
	Line int
	// Key is the key path, such as "shared_subscriptions.groups[0].strategy";
	// empty for a problem with the file as a whole.
	Key string
	// Err is what is wrong.
	Err error
	// Hint, for an unknown key, is the key it most likely means.
	Hint string
}

// Error formats e as "file:line: key: problem", leaving out what is not
// known; an unknown key reads `file:line: unknown key "key"`.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":")
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	switch {
	case e.Err == ErrUnknownKey:
		fmt.Fprintf(&b, "unknown key %q", e.Key)
		if e.Hint != "" {
			b.WriteString("; ")
			b.WriteString(e.Hint)
		}
	case e.Key != "":
		b.WriteString(e.Key)
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	default:
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns e.Err.
func (e *Error) Unwrap() error { return e.Err }

// pos is where a value came from.
type pos struct {
	file string // file name, or an origin such as "flag -data-dir"
	line int    // 0 when not from a file
}

// source records, by key path, where the values of a Config came from.
type source struct {
	at map[string]pos
}

// lookup returns where key, or failing that its nearest recorded ancestor
// (a list item whose field was left out), came from.
func (s *source) lookup(key string) (pos, bool) {
	if s == nil {
		return pos{}, false
	}
	for key != "" {
		if p, ok := s.at[key]; ok {
			return p, true
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return pos{}, false
}

// has reports whether key itself was set by a file or an override.
func (s *source) has(key string) bool {
	if s == nil {
		return false
	}
	_, ok := s.at[key]
	return ok
}

// Load reads the file at path with Parse, naming it path in errors.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		// The *PathError already names the file.
		return nil, err
	}
	return Parse(data, path)
}

// Parse reads a YAML configuration on top of [Default]. name is the file
// name its errors carry. It checks syntax, keys and the type of each value;
// ranges and cross-field rules are left to [Config.Validate]. Every problem
// found is reported, joined.
//
// yaml.v3 parses the file into a node tree, which records the line of
// every key; this package's walker (walk.go) then decodes the tree onto
// the defaults, field by field, so that each problem is reported with the
// key path and line it belongs to. A key given no value keeps its default.
func Parse(data []byte, name string) (*Config, error) {
	c := Default()
	c.src = &source{at: make(map[string]pos)}
	root, err := document(data, name)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return c, nil // an empty file: all defaults
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: name, Line: root.Line, Err: fmt.Errorf("expected a mapping of keys at the top level, got %s", confval.KindName(root))}
	}
	w := walker{file: name, src: c.src}
	w.decode(root, reflect.ValueOf(c).Elem(), "", root.Line)
	if len(w.errs) > 0 {
		return nil, w.problems()
	}
	if len(c.Listeners) > 0 && !c.src.has("mqtt.listen") {
		// A file that lists its listeners means those: the default plain
		// listener on :1883 is not opened beside them (as Mosquitto's
		// listener lines replace its default port), unless mqtt.listen or
		// -mqtt-listen asks for it too.
		c.MQTT.Listen = new("")
	}
	return c, nil
}

// document parses data into a node tree and returns its root value, or nil
// for a file that holds nothing (empty, only comments, or only "---").
func document(data []byte, name string) (*yaml.Node, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err == io.EOF {
		return nil, nil
	} else if err != nil {
		return nil, syntaxError(name, data, err)
	}
	// A second document would be ignored by the decoder: most likely two
	// files pasted together, of which only the first would count.
	var next yaml.Node
	if err := dec.Decode(&next); err != io.EOF {
		if err != nil {
			return nil, syntaxError(name, data, err)
		}
		if len(next.Content) > 0 && !isNull(next.Content[0]) {
			return nil, &Error{File: name, Line: next.Content[0].Line, Err: errors.New(`a second document (after "---"): the configuration must be one document`)}
		}
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, nil
	}
	return doc.Content[0], nil
}

// yamlLine matches the line number in yaml.v3's syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns "yaml: line 3: problem" into "name:3: problem", saying
// so when a tab indents the line (data is the file). The line is yaml.v3's,
// which leaves it out for problems on the first line and may place a
// problem at the line before the one that shows it.
func syntaxError(name string, data []byte, err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		if tabIndented(data, line) {
			// yaml.v3 says "found character that cannot start any token".
			return &Error{File: name, Line: line, Err: fmt.Errorf("%s: a tab indents this line or the next; YAML indents with spaces only", m[2])}
		}
		return &Error{File: name, Line: line, Err: errors.New(m[2])}
	}
	return &Error{File: name, Err: errors.New(strings.TrimPrefix(msg, "yaml: "))}
}

// Override sets the value at key (a dotted path such as "mqtt.listen"; list
// items cannot be addressed) from its text form, as if a file had said
// `key: value`, and records origin (for example "flag -mqtt-listen") as
// where it came from, so that errors about it name the flag rather than the
// line of the file it replaced. An empty value is the empty string (which
// disables a listener), not "no value". On error c is unchanged.
func (c *Config) Override(key, value, origin string) error {
	return c.override(key, scalar(value), value, origin)
}

// OverrideList sets the list at key (dotted, as Override's) to values, as
// if a file had said `key: [v1, v2, ...]`: a flag such as -etcd-endpoints
// that takes a comma-separated list.
func (c *Config) OverrideList(key string, values []string, origin string) error {
	seq := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, v := range values {
		seq.Content = append(seq.Content, scalar(v))
	}
	return c.override(key, seq, strings.Join(values, ","), origin)
}

// scalar is value as a YAML string scalar.
func scalar(value string) *yaml.Node {
	v := &yaml.Node{Kind: yaml.ScalarNode, Value: value}
	switch value {
	case "", "~", "null", "Null", "NULL":
		// Plain, these would be YAML's null, which keeps the default.
		v.Style = yaml.DoubleQuotedStyle
	}
	return v
}

func (c *Config) override(key string, v *yaml.Node, value, origin string) error {
	// The value goes through the same walker as a file's, as a one-key
	// document, so that a flag accepts exactly what the file does. The
	// walker sets every pointer it decodes to a new one, so the copy
	// shares nothing it changes with c.
	for _, name := range slices.Backward(strings.Split(key, ".")) {
		v = &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: name}, v}}
	}
	o := *c
	w := walker{file: origin, src: &source{at: make(map[string]pos)}}
	w.decode(v, reflect.ValueOf(&o).Elem(), "", 0)
	if len(w.errs) > 0 {
		return overrideError(origin, key, value, w.errs)
	}
	if o.src == nil {
		o.src = &source{at: make(map[string]pos)}
	}
	o.src.at[key] = pos{file: origin}
	*c = o
	return nil
}

// overrideError is Override's error: everything is about the one key.
func overrideError(origin, key, value string, errs []error) error {
	out := make([]error, 0, len(errs))
	for _, err := range errs {
		e := &Error{File: origin, Key: key, Err: err}
		var we *Error
		if errors.As(err, &we) {
			e.Err = we.Err
		}
		var mm *confval.Mismatch
		switch {
		case errors.Is(e.Err, ErrUnknownKey):
			e.Err = ErrUnknownKey
		case errors.As(e.Err, &mm) && (mm.Want == wantMapping || mm.Want == wantList):
			e.Err = errors.New("not a single value")
		case errors.As(e.Err, &mm):
			e.Err = fmt.Errorf("expected %s, got %q", mm.Want, value)
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}
