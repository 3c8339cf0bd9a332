package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

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
func Parse(data []byte, name string) (*Config, error) {
	c := Default()
	c.src = &source{at: make(map[string]pos)}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		return nil, syntaxError(name, err)
	}
	// A second document would be ignored by a plain Unmarshal: most likely
	// two files pasted together, of which only the first would count.
	var next yaml.Node
	if err := dec.Decode(&next); err != io.EOF {
		if err != nil {
			return nil, syntaxError(name, err)
		}
		if len(next.Content) > 0 && !isNull(next.Content[0]) {
			return nil, &Error{File: name, Line: next.Content[0].Line, Err: errors.New(`a second document (after "---"): the configuration must be one document`)}
		}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return c, nil // an empty file: all defaults
	}
	root := doc.Content[0]
	if isNull(root) {
		return c, nil // a file holding only comments or "---"
	}
	d := decoder{src: c.src, file: name}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: name, Line: root.Line, Err: fmt.Errorf("expected a mapping of keys at the top level, got %s", kindName(root))}
	}
	d.value(root, reflect.ValueOf(c).Elem(), "", pos{name, root.Line})
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return c, nil
}

// yamlLine matches the line number in yaml.v3's syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns "yaml: line 3: problem" into "name:3: problem". The
// line is yaml.v3's, which leaves it out for problems on the first line and
// may place a problem at the line before the one that shows it.
func syntaxError(name string, err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: name, Line: line, Err: errors.New(m[2])}
	}
	return &Error{File: name, Err: errors.New(strings.TrimPrefix(msg, "yaml: "))}
}

// Override sets the value at key (a dotted path such as "mqtt.listen"; list
// items cannot be addressed) from its text form, as if a file had said
// `key: value` with value quoted, and records origin (for example
// "flag -mqtt-listen") as where it came from, so that errors about it name
// the flag rather than the line of the file it replaced.
func (c *Config) Override(key, value, origin string) error {
	v := reflect.ValueOf(c).Elem()
	for name := range strings.SplitSeq(key, ".") {
		f, ok := fieldByKey(v, name)
		if !ok {
			return &Error{File: origin, Key: key, Err: ErrUnknownKey}
		}
		v = f
	}
	if k := v.Kind(); k == reflect.Struct || k == reflect.Slice {
		return &Error{File: origin, Key: key, Err: errors.New("not a single value")}
	}
	if c.src == nil {
		c.src = &source{at: make(map[string]pos)}
	}
	p := pos{file: origin}
	d := decoder{src: c.src, file: origin}
	d.value(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}, v, key, p)
	if len(d.errs) > 0 {
		return errors.Join(d.errs...)
	}
	c.src.at[key] = p
	return nil
}

// decoder walks a YAML node tree against a Go value, field by field, so
// that every error can name its key path and line; yaml.v3's own decoder
// reports neither for unknown keys.
type decoder struct {
	src  *source
	file string
	errs []error
}

func (d *decoder) fail(p pos, key string, err error) {
	d.errs = append(d.errs, &Error{File: p.file, Line: p.line, Key: key, Err: err})
}

var durationType = reflect.TypeFor[time.Duration]()

// value decodes n into v. key is v's key path and p where its key was
// written. A null value (`key:` or `key: ~`) leaves v as it is, so a key
// with no value keeps its default.
func (d *decoder) value(n *yaml.Node, v reflect.Value, key string, p pos) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if isNull(n) {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		// A fresh pointer rather than writing through the old one: the old
		// one may be shared (WithDefaults copies share pointers).
		nv := reflect.New(v.Type().Elem())
		if !v.IsNil() {
			nv.Elem().Set(v.Elem())
		}
		before := len(d.errs)
		d.value(n, nv.Elem(), key, p)
		if len(d.errs) == before {
			v.Set(nv)
		}
	case reflect.Struct:
		d.mapping(n, v, key, p)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(p, key, fmt.Errorf("expected a list, got %s", kindName(n)))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			ik := fmt.Sprintf("%s[%d]", key, i)
			ip := pos{p.file, item.Line}
			d.src.at[ik] = ip
			d.value(item, s.Index(i), ik, ip)
		}
		v.Set(s)
	default:
		if n.Kind != yaml.ScalarNode {
			d.fail(p, key, fmt.Errorf("expected %s, got %s", typeName(v.Type()), kindName(n)))
			return
		}
		if err := setScalar(v, n.Value); err != nil {
			d.fail(p, key, err)
		}
	}
}

// mapping decodes the keys of n into the fields of the struct v.
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, key string, p pos) {
	if n.Kind != yaml.MappingNode {
		d.fail(p, key, fmt.Errorf("expected a mapping of keys, got %s", kindName(n)))
		return
	}
	seen := make(map[string]int) // key -> line, to catch repeats
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		kp := pos{p.file, kn.Line}
		name := kn.Value
		fk := name
		if key != "" {
			fk = key + "." + name
		}
		if kn.Kind != yaml.ScalarNode {
			d.fail(kp, key, fmt.Errorf("expected a key name, got %s", kindName(kn)))
			continue
		}
		if first, ok := seen[name]; ok {
			d.fail(kp, fk, fmt.Errorf("repeated key (first set at line %d)", first))
			continue
		}
		seen[name] = kn.Line
		f, ok := fieldByKey(v, name)
		if !ok {
			d.fail(kp, fk, ErrUnknownKey)
			continue
		}
		d.src.at[fk] = kp
		d.value(vn, f, fk, kp)
	}
}

// fieldByKey returns the field of struct v whose yaml tag is name.
func fieldByKey(v reflect.Value, name string) (reflect.Value, bool) {
	if v.Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// setScalar parses s into v, a string, bool, integer or duration.
func setScalar(v reflect.Value, s string) error {
	switch {
	case v.Type() == durationType:
		dur, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration (write it like \"10s\", \"500ms\" or \"1h30m\")", s)
		}
		v.SetInt(int64(dur))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Bool:
		switch strings.ToLower(s) {
		case "true", "yes", "on":
			v.SetBool(true)
		case "false", "no", "off":
			v.SetBool(false)
		default:
			return fmt.Errorf("%q is not true or false", s)
		}
	case v.CanInt():
		n, err := parseInt(s)
		if errors.Is(err, strconv.ErrRange) || (err == nil && v.OverflowInt(n)) {
			// The int is 32 bits on ARMv7: say so rather than wrap around.
			return fmt.Errorf("%s is too large", s)
		}
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		v.SetInt(n)
	default:
		panic("config: no decoder for " + v.Type().String())
	}
	return nil
}

// parseInt accepts decimal, and 0x/0o/0b prefixes and _ separators as YAML
// and Go do; a leading zero does not make a number octal.
func parseInt(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		if n2, err2 := strconv.ParseInt(s, 0, 64); err2 == nil || errors.Is(err2, strconv.ErrRange) {
			return n2, err2
		}
	}
	return n, err
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Bool:
		return "true or false"
	default:
		return "an integer"
	}
}
