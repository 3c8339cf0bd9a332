package config

import (
	"bytes"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// knownKeys returns every key path the file format has, list items written
// "[]" (listeners[].address), in a stable order. It is read off the Config
// type, so it never lags behind the schema.
var knownKeys = sync.OnceValue(func() []string {
	var keys []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t == reflect.TypeOf(time.Time{}) {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			key := prefix + name
			keys = append(keys, key)
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch ft.Kind() {
			case reflect.Struct:
				walk(ft, key+".")
			case reflect.Slice:
				walk(ft.Elem(), key+"[].")
			}
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	slices.Sort(keys)
	return keys
})

// listIndex matches the index of a list item in a key path.
var listIndex = regexp.MustCompile(`\[\d+\]`)

// tabIndented reports whether line (1-based) of data, or the line after it
// (yaml.v3 may name the line before the one at fault), is indented with a
// tab, which YAML does not allow.
func tabIndented(data []byte, line int) bool {
	lines := bytes.Split(data, []byte("\n"))
	for _, n := range []int{line, line + 1} {
		if n >= 1 && n <= len(lines) {
			l := lines[n-1]
			indent := l[:len(l)-len(bytes.TrimLeft(l, " \t"))]
			if bytes.IndexByte(indent, '\t') >= 0 {
				return true
			}
		}
	}
	return false
}

// suggest returns a hint for an unknown key path (list indexes as in
// "listeners[0].adress"): the known key of the same section it most likely
// misspells, or the section a known key of that name belongs to.
func suggest(path string) string {
	norm := listIndex.ReplaceAllString(path, "[]")
	parent, leaf := "", norm
	if i := strings.LastIndex(norm, "."); i >= 0 {
		parent, leaf = norm[:i+1], norm[i+1:]
	}
	best, bestDist := "", 0
	var elsewhere []string
	for _, k := range knownKeys() {
		kp, kl := "", k
		if i := strings.LastIndex(k, "."); i >= 0 {
			kp, kl = k[:i+1], k[i+1:]
		}
		if kp == parent {
			if d := editDistance(leaf, kl); d <= max(1, len(leaf)/4) && (best == "" || d < bestDist) {
				best, bestDist = kl, d
			}
		} else if kl == leaf {
			elsewhere = append(elsewhere, k)
		}
	}
	switch {
	case best != "":
		return `did you mean "` + path[:len(path)-len(leaf)] + best + `"?`
	case len(elsewhere) == 1:
		return `it is a key of "` + strings.TrimSuffix(elsewhere[0][:len(elsewhere[0])-len(leaf)], ".") + `" (` + elsewhere[0] + `): check its indentation`
	case len(elsewhere) > 1:
		return "it is a key of " + strings.Join(elsewhere, ", ") + ": check its indentation"
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
