package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/linemq/linemq/gateway/confval"
)

// walker decodes a yaml.Node tree onto a Go value by its fields' yaml
// tags. It knows at every step the key path and the line of the key, so
// each problem is reported where it is, and it goes on after one, so that
// a file's problems are all reported at once. Values the file leaves out,
// or gives no value (`listen:`), keep what the target held: the defaults.
//
// It writes nothing through a pointer it found: a pointer field it sets
// is pointed at a new value, so that a Config copied by value (Override)
// shares nothing it changes with the original.
type walker struct {
	file string
	src  *source // where each key path was set
	errs []error
	// steps bounds the nodes visited, aliases followed included: a small
	// file of nested aliases can otherwise stand for billions of values.
	steps int
}

// maxSteps is far more values than any real configuration has (a line
// of five gateways with a thousand share groups needs a few thousand).
const maxSteps = 100_000

// The values a mismatch may want that are not a single value.
const (
	wantMapping = "a mapping of keys"
	wantList    = "a list"
)

// fail records a problem with the value at path, whose key is on line.
func (w *walker) fail(line int, path string, err error) {
	w.errs = append(w.errs, &Error{File: w.file, Line: line, Key: path, Err: err})
}

// problems returns the problems found, joined, the first maxProblems of
// them: a file that is not a configuration at all must not flood the log.
func (w *walker) problems() error {
	if len(w.errs) > maxProblems {
		more := len(w.errs) - maxProblems
		w.errs = append(w.errs[:maxProblems:maxProblems], &Error{File: w.file, Err: fmt.Errorf("%d more problems", more)})
	}
	return errors.Join(w.errs...)
}

// maxProblems bounds the problems reported for one file.
const maxProblems = 50

// decode sets v (addressable) from n. path is n's key path, line the line
// of its key (of the item itself, in a list).
func (w *walker) decode(n *yaml.Node, v reflect.Value, path string, line int) {
	if w.steps++; w.steps > maxSteps {
		if w.steps == maxSteps+1 {
			w.errs = append(w.errs, &Error{File: w.file, Err: errors.New("the document expands to too many values (nested aliases?)")})
		}
		return
	}
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if isNull(n) {
		return // the key keeps its default
	}
	if v.Kind() == reflect.Pointer {
		p := reflect.New(v.Type().Elem())
		if !v.IsNil() {
			p.Elem().Set(v.Elem())
		}
		errs := len(w.errs)
		w.decode(n, p.Elem(), path, line)
		if len(w.errs) == errs {
			v.Set(p)
		}
		return
	}
	if u, ok := v.Addr().Interface().(yaml.Unmarshaler); ok {
		// The configuration's own types say what is wrong; the walker
		// says where.
		if err := u.UnmarshalYAML(n); err != nil {
			w.fail(line, path, err)
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		w.mapping(n, v, path, line)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.fail(line, path, &confval.Mismatch{Want: wantList, Got: confval.KindName(n)})
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			w.record(p, item.Line)
			w.decode(item, s.Index(i), p, item.Line)
		}
		v.Set(s)
	default:
		want := describe(v.Type())
		if n.Kind != yaml.ScalarNode {
			w.fail(line, path, &confval.Mismatch{Want: want, Got: confval.KindName(n)})
			return
		}
		// yaml.v3 converts a scalar to a Go value as it always has
		// (yes/no into a bool, a number into a string, ...).
		if err := n.Decode(v.Addr().Interface()); err != nil {
			w.fail(line, path, &confval.Mismatch{Want: want, Got: confval.KindName(n)})
		}
	}
}

// mapping decodes the keys of n onto the fields of the struct v.
func (w *walker) mapping(n *yaml.Node, v reflect.Value, path string, line int) {
	if n.Kind != yaml.MappingNode {
		w.fail(line, path, &confval.Mismatch{Want: wantMapping, Got: confval.KindName(n)})
		return
	}
	fields := fieldsOf(v.Type())
	first := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			w.errs = append(w.errs, &Error{File: w.file, Line: k.Line, Err: &confval.Mismatch{Want: "a string", Got: confval.KindName(k)}})
			continue
		}
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		if at, ok := first[k.Value]; ok {
			w.fail(k.Line, p, fmt.Errorf("repeated key (first set at line %d)", at))
			continue
		}
		first[k.Value] = k.Line
		w.record(p, k.Line)
		f, ok := fields[k.Value]
		if !ok {
			w.errs = append(w.errs, &Error{File: w.file, Line: k.Line, Key: p, Err: ErrUnknownKey, Hint: suggest(p)})
			continue
		}
		w.decode(val, v.Field(f), p, k.Line)
	}
}

// record notes where path was set (a repeated key keeps its first line).
func (w *walker) record(path string, line int) {
	if _, ok := w.src.at[path]; !ok {
		w.src.at[path] = pos{w.file, line}
	}
}

// fieldsOf maps the yaml names of the struct type t's exported fields to
// their indexes: the tag's name, or the field's name in lower case.
func fieldsOf(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name)
		}
		m[name] = i
	}
	return m
}

// describe names, for a reader of the file, what a value of type t is.
func describe(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return describe(t.Elem())
	case reflect.Slice:
		return wantList
	case reflect.Struct:
		return wantMapping
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}
