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
// The file is read twice: once into a yaml.Node tree, which records the
// line of every key, and once by yaml.v3's decoder with KnownFields, which
// decodes the values and reports unknown keys, repeated keys and bad values
// by line only; the tree turns those lines back into key paths.
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
		return nil, &Error{File: name, Line: root.Line, Err: fmt.Errorf("expected a mapping of keys at the top level, got %s", kindName(root))}
	}
	ix := index{file: name, src: c.src, keys: make(map[int][]*entry), values: make(map[int][]*entry)}
	ix.walk(root, "")
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		return nil, ix.errors(err)
	}
	// A key given no value (`listen:`) set its pointer to nil: point it at
	// the default again, so that readers of a parsed Config find a value.
	fill(reflect.ValueOf(c).Elem(), reflect.ValueOf(Default()).Elem(), false)
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
	// The value goes through the same decoder as a file's, as a one-key
	// document, so that a flag accepts exactly what the file does.
	for _, name := range slices.Backward(strings.Split(key, ".")) {
		v = &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: name}, v}}
	}
	data, err := yaml.Marshal(v)
	if err != nil {
		return &Error{File: origin, Key: key, Err: err}
	}
	// Decoded onto a copy with pointers of its own: yaml.v3 writes through
	// pointers, which c may share with another Config or its caller.
	o := *c
	fill(reflect.ValueOf(&o).Elem(), reflect.Value{}, false)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&o); err != nil {
		return overrideError(origin, key, value, err)
	}
	if o.src == nil {
		o.src = &source{at: make(map[string]pos)}
	}
	o.src.at[key] = pos{file: origin}
	*c = o
	return nil
}

// overrideError is Override's error: everything is about the one key.
func overrideError(origin, key, value string, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return &Error{File: origin, Key: key, Err: err}
	}
	var errs []error
	for _, s := range te.Errors {
		_, _, msg := splitPosition(s)
		switch m := yamlMessage(msg); {
		case m.unknown != "":
			errs = append(errs, &Error{File: origin, Key: key, Err: ErrUnknownKey})
		case m.into == "a mapping of keys" || m.into == "a list":
			errs = append(errs, &Error{File: origin, Key: key, Err: errors.New("not a single value")})
		case m.into != "":
			errs = append(errs, &Error{File: origin, Key: key, Err: fmt.Errorf("expected %s, got %q", m.into, value)})
		default:
			errs = append(errs, &Error{File: origin, Key: key, Err: errors.New(msg)})
		}
	}
	return errors.Join(errs...)
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// index records every key of a document with the nodes of the key and its
// value, to turn the lines of yaml.v3's errors into key paths.
type index struct {
	file   string
	src    *source          // where each path is recorded
	keys   map[int][]*entry // by the line of the key, in document order
	values map[int][]*entry // by the line of the value, in document order
}

// entry is one key of the document, or one item of a list.
type entry struct {
	path  string     // "mqtt.listen", "shared_subscriptions.groups[1]"
	key   *yaml.Node // the key, or the item itself
	value *yaml.Node
}

// walk records the keys under n, whose path is path. It does not follow
// aliases: their content is recorded where the anchor defines it, which is
// also where yaml.v3 reports its errors.
func (ix *index) walk(n *yaml.Node, path string) {
	add := func(p string, k, v *yaml.Node) {
		en := &entry{p, k, v}
		ix.keys[k.Line] = append(ix.keys[k.Line], en)
		ix.values[v.Line] = append(ix.values[v.Line], en)
		if _, ok := ix.src.at[p]; !ok { // a repeated key keeps its first line
			ix.src.at[p] = pos{ix.file, k.Line}
		}
		ix.walk(v, p)
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			add(p, k, n.Content[i+1])
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			add(fmt.Sprintf("%s[%d]", path, i), item, item)
		}
	}
}

// errors turns the error of yaml.v3's Decode into *Errors naming the key
// path and the line of the key.
func (ix *index) errors(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		// Not about one value (such as "document contains excessive
		// aliasing").
		return &Error{File: ix.file, Err: errors.New(strings.TrimPrefix(err.Error(), "yaml: "))}
	}
	errs := make([]error, 0, len(te.Errors))
	for _, s := range te.Errors {
		errs = append(errs, ix.locate(s))
	}
	return errors.Join(errs...)
}

// locate turns one of yaml.v3's messages into an *Error.
func (ix *index) locate(s string) *Error {
	line, col, msg := splitPosition(s)
	e := &Error{File: ix.file, Line: line, Err: errors.New(msg)}
	m := yamlMessage(msg)
	switch {
	case m.unknown != "":
		if en := find(ix.keys[line], func(en *entry) bool { return en.key.Value == m.unknown }); en != nil {
			e.Key, e.Err, e.Hint = en.path, ErrUnknownKey, suggest(en.path)
		}
	case m.repeated != "":
		if en := find(ix.keys[line], func(en *entry) bool { return en.key.Value == m.repeated }); en != nil {
			e.Key = en.path
			e.Err = fmt.Errorf("repeated key (first set at line %d)", ix.src.at[en.path].line)
		}
	case col > 0:
		// From one of this package's types, which give the column.
		if en := find(ix.values[line], func(en *entry) bool { return en.value.Column == col }); en != nil {
			e.Line, e.Key = en.key.Line, en.path
		}
	case m.into != "":
		// yaml.v3 gives the line of the value only, and its text cut
		// short: pick the first value on that line of the kind it names.
		e.Err = fmt.Errorf("expected %s, got %s", m.into, m.got())
		if en := find(ix.values[line], func(en *entry) bool { return m.matches(en.value) }); en != nil {
			e.Line, e.Key = en.key.Line, en.path
			e.Err = fmt.Errorf("expected %s, got %s", m.into, kindName(en.value))
		}
	}
	return e
}

// find returns the first of entries for which ok holds, or nil.
func find(entries []*entry, ok func(*entry) bool) *entry {
	for _, en := range entries {
		if ok(en) {
			return en
		}
	}
	return nil
}

// position matches the start of yaml.v3's messages, and the column this
// package's types add (typeError).
var position = regexp.MustCompile(`^line (\d+): (?:column (\d+): )?`)

// splitPosition splits "line L: [column C: ]problem".
func splitPosition(s string) (line, col int, msg string) {
	m := position.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, s
	}
	line, _ = strconv.Atoi(m[1])
	col, _ = strconv.Atoi(m[2])
	return line, col, s[len(m[0]):]
}

// The messages of yaml.v3's decoder this package rewrites.
var (
	notFound   = regexp.MustCompile("^field (.*) not found in type [^ ]+$")
	alreadySet = regexp.MustCompile("^field (.*) already set in type [^ ]+$")
	defined    = regexp.MustCompile(`^mapping key (".*") already defined at line \d+$`)
	cannot     = regexp.MustCompile("^cannot unmarshal !!([a-z]+)(?: `(.*)`)? into ([^ ]+)$")
)

// message is what one of yaml.v3's messages says.
type message struct {
	unknown  string // key name, for "field X not found"
	repeated string // key name, for "field X already set" and "mapping key X already defined"
	into     string // the expected value, for "cannot unmarshal"
	tag      string // the value's tag, for "cannot unmarshal"
	text     string // the value's text, possibly cut short with "..."
}

func yamlMessage(msg string) message {
	if m := notFound.FindStringSubmatch(msg); m != nil {
		return message{unknown: m[1]}
	}
	if m := alreadySet.FindStringSubmatch(msg); m != nil {
		return message{repeated: m[1]}
	}
	if m := defined.FindStringSubmatch(msg); m != nil {
		if name, err := strconv.Unquote(m[1]); err == nil {
			return message{repeated: name}
		}
	}
	if m := cannot.FindStringSubmatch(msg); m != nil {
		return message{into: describeType(m[3]), tag: m[1], text: m[2]}
	}
	return message{}
}

// got describes the value a "cannot unmarshal" message is about, as far as
// the message tells.
func (m message) got() string {
	switch m.tag {
	case "map":
		return "a mapping"
	case "seq":
		return "a list"
	}
	return strconv.Quote(m.text)
}

// matches reports whether n is the value a "cannot unmarshal" message is
// about.
func (m message) matches(n *yaml.Node) bool {
	switch m.tag {
	case "map":
		return n.Kind == yaml.MappingNode
	case "seq":
		return n.Kind == yaml.SequenceNode
	}
	return n.Kind == yaml.ScalarNode && strings.HasPrefix(n.Value, strings.TrimSuffix(m.text, "..."))
}

// describeType names, for a reader of the file, the Go type a value could
// not be decoded into: only the types yaml.v3 decodes itself reach here.
func describeType(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "config."):
		return "a mapping of keys"
	}
	return t
}
