package auth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/topic"
)

// siteACL is the kind of file a plant runs Mosquitto with.
const siteACL = `# anonymous clients
topic read public/#
topic read $SYS/broker/uptime

user historian
topic read plant/#
topic deny plant/+/recipes/#
share historians

user line3-plc
topic write plant/line3/#
topic readwrite	cmd/line3/#
share hist-*

user maint
topic readwrite #
topic read $SYS/#

pattern readwrite devices/%c/#
pattern write users/%u/out
pattern read users/%u/in/+
pattern read mixed/dev-%c/x
pattern deny test/nosubscribe
`

func mustACL(t *testing.T, text string) *acl {
	t.Helper()
	a, err := parseACL("acl", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestACLPublish(t *testing.T) {
	a := mustACL(t, siteACL)
	for _, tc := range []struct {
		user, id, topic string
		want            bool
	}{
		{"", "x", "public/a", false}, // read only
		{"historian", "h1", "plant/line3/temp", false},
		{"line3-plc", "p1", "plant/line3/temp", true},
		{"line3-plc", "p1", "plant/line3", true}, // "a/#" matches "a"
		{"line3-plc", "p1", "plant/line4/temp", false},
		{"line3-plc", "p1", "cmd/line3/go", true},
		{"maint", "m", "anything/at/all", true},
		{"maint", "m", "$SYS/broker/x", false}, // read only, and # does not reach $SYS
		{"maint", "m", "test/nosubscribe", false},
		{"nobody", "dev7", "devices/dev7/status", true}, // pattern %c, a user without a section
		{"nobody", "dev7", "devices/dev8/status", false},
		{"", "dev7", "devices/dev7/status", true}, // anonymous clients get patterns too
		{"bob", "c", "users/bob/out", true},
		{"bob", "c", "users/alice/out", false},
		{"", "c", "users//out", false},       // no %u for anonymous clients
		{"a/b", "c", "users/a/b/out", false}, // a user name with / is not substituted
		{"+", "c", "users/+/out", false},     // nor one with a wildcard
		{"bob", "dev/1", "devices/dev/1/x", false},
	} {
		s := subject{user: tc.user, id: tc.id}
		if got := a.canPublish(&s, tc.topic); got != tc.want {
			t.Errorf("user %q id %q publish %q: %v, want %v", tc.user, tc.id, tc.topic, got, tc.want)
		}
	}
}

func TestACLSubscribe(t *testing.T) {
	a := mustACL(t, siteACL)
	for _, tc := range []struct {
		user, id, filter string
		want             bool
	}{
		{"", "x", "public/#", true},
		{"", "x", "public/a/+", true},
		{"", "x", "#", false},   // wider than public/#
		{"", "x", "+/a", false}, // reaches private/a
		{"", "x", "$SYS/broker/uptime", true},
		{"", "x", "$SYS/#", false},
		{"historian", "h", "plant/line3/temp", true},
		{"historian", "h", "plant/+/temp", true},
		{"historian", "h", "plant/#", false},               // overlaps the recipes deny (granted with filter)
		{"historian", "h", "plant/line3/#", false},         // so does this (granted with filter)
		{"historian", "h", "plant/line3/recipes/a", false}, // within it
		{"historian", "h", "plant/line3/status/#", true},
		{"line3-plc", "p", "plant/line3/temp", false}, // write only
		{"line3-plc", "p", "cmd/line3/+", true},
		{"maint", "m", "#", true},   // the global test/nosubscribe deny: nobody can publish there
		{"maint", "m", "+/+", true}, // same
		{"maint", "m", "test/nosubscribe", false},
		{"maint", "m", "test/#", true},
		{"maint", "m", "$SYS/#", true},
		{"", "dev7", "devices/dev7/#", true},
		{"", "dev7", "devices/+/#", false},
		{"bob", "c", "users/bob/in/+", true},
		{"bob", "c", "users/bob/in/#", false}, // wider than users/bob/in/+
		{"bob", "c", "users/+/in/a", false},
		{"", "c", "users/+/in/a", false},
		{"x", "7", "mixed/dev-7/x", true}, // a substitution inside a level
		{"x", "7", "mixed/dev-8/x", false},
		{"x", "a/b", "mixed/dev-a/b/x", false},
	} {
		s := subject{user: tc.user, id: tc.id}
		if got := a.canSubscribe(&s, tc.filter, false); got != tc.want {
			t.Errorf("user %q id %q subscribe %q: %v, want %v", tc.user, tc.id, tc.filter, got, tc.want)
		}
		// With acl_overlap: filter the same, but for what merely overlaps
		// a deny rule: granted, its denied topics kept out by canRead.
		want := tc.want
		if filterGrants[tc.filter] {
			want = true
		}
		if got := a.canSubscribe(&s, tc.filter, true); got != want {
			t.Errorf("acl_overlap filter: user %q id %q subscribe %q: %v, want %v", tc.user, tc.id, tc.filter, got, want)
		}
	}
}

// filterGrants are the filters of TestACLSubscribe that acl_overlap:
// filter grants and refuse does not.
var filterGrants = map[string]bool{"plant/#": true, "plant/line3/#": true}

// TestACLRead: what a client of acl_overlap: filter is sent.
func TestACLRead(t *testing.T) {
	a := mustACL(t, siteACL)
	for _, tc := range []struct {
		user, topic string
		want        bool
	}{
		{"historian", "plant/line3/temp", true},
		{"historian", "plant/line3/recipes/a", false}, // denied
		{"historian", "plant/line3/recipes", false},   // "recipes/#" matches its parent too
		{"historian", "cmd/x", false},                 // no read rule
		{"line3-plc", "plant/line3/temp", false},      // write only
		{"line3-plc", "$SYS/broker/x", false},         // # does not reach $SYS
	} {
		s := subject{user: tc.user, id: "c"}
		if got := a.canRead(&s, tc.topic); got != tc.want {
			t.Errorf("user %q read %q: %v, want %v", tc.user, tc.topic, got, tc.want)
		}
	}
}

// TestACLDenyWithUnusableSubstitution checks that a deny pattern whose
// substitution cannot be filled in denies as if it were a '+', rather than
// being skipped.
func TestACLDenyWithUnusableSubstitution(t *testing.T) {
	a := mustACL(t, "topic readwrite #\npattern deny private/%u/#\n")
	s := subject{id: "anon"}
	if a.canPublish(&s, "private/anyone/x") {
		t.Error("anonymous client published under a %u deny")
	}
	if a.canSubscribe(&s, "private/+/x", false) || a.canSubscribe(&s, "#", false) {
		t.Error("anonymous client subscribed over a %u deny")
	}
	if !a.canPublish(&s, "public/x") {
		t.Error("the allow rule stopped working")
	}
}

func TestACLShares(t *testing.T) {
	a := mustACL(t, siteACL)
	for _, tc := range []struct {
		user, name string
		want       bool
	}{
		{"historian", "historians", true},
		{"line3-plc", "historians", false},
		{"", "historians", false},
		{"line3-plc", "hist-line3", true}, // pattern
		{"historian", "hist-line3", false},
		{"", "workers", true}, // not reserved: open
		{"nobody", "workers", true},
	} {
		s := subject{user: tc.user}
		if got := a.canJoinShare(&s, tc.name); got != tc.want {
			t.Errorf("user %q join %q: %v, want %v", tc.user, tc.name, got, tc.want)
		}
	}
}

func TestACLParseErrors(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"topc read a", `acl:3: unknown keyword "topc"`},
		{"topic reed a/b", `acl:3: unknown access "reed"`},
		{"topic", `acl:3: no topic filter`},
		{"topic read a/#/b", `acl:3: "a/#/b": '#' must be alone in the last level`},
		{"pattern read a+", `acl:3: "a+": '+' must be alone in its level`},
		{"topic read $share/g/a", `acl:3: "$share/g/a": rules apply to the filter inside`},
		{"user", `acl:3: user with no name`},
		{"share a/b", `acl:3: share name "a/b"`},
		{"share [x", `acl:3: share name pattern "[x"`},
	} {
		_, err := parseACL("acl", []byte("# header\ntopic read x\n"+tc.line+"\n"))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to start with %q", tc.line, err, tc.want)
		}
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Line != 3 {
			t.Errorf("%q: not a *ParseError at line 3: %#v", tc.line, err)
		}
	}
	// Every bad line is reported, up to a bound.
	_, err := parseACL("acl", []byte(strings.Repeat("bad\n", 50)))
	if n := strings.Count(err.Error(), "\n") + 1; n != maxFileErrors+1 || !strings.Contains(err.Error(), "30 more problems") {
		t.Errorf("%d lines of errors:\n%v", n, err)
	}
}

func TestACLLoneWordIsTopic(t *testing.T) {
	// As in Mosquitto: "topic read" grants readwrite on the topic "read".
	a := mustACL(t, "topic read\n")
	s := subject{}
	if !a.canPublish(&s, "read") || !a.canSubscribe(&s, "read", false) {
		t.Error(`"topic read" is not readwrite on "read"`)
	}
	_, err := parseACL("acl", []byte("topic a b c\n"))
	if err == nil {
		t.Error(`"topic a b c": an unknown access word was accepted`)
	}
}

// TestFilterRelations checks contains and overlaps against brute force:
// every topic of a universe large enough to tell the filters apart (a
// level value "z" that no filter names stands for all the others, and
// topics are longer than any filter).
func TestFilterRelations(t *testing.T) {
	lits := []string{"a", "b", ""}
	var filters []string
	var gen func(prefix []string, depth int)
	gen = func(prefix []string, depth int) {
		if f := strings.Join(prefix, "/"); f != "" {
			filters = append(filters, f)
		}
		if depth == 0 {
			return
		}
		if len(prefix) == 0 {
			filters = append(filters, "#", "$x", "$x/#")
			for _, rest := range []string{"a", "+"} {
				filters = append(filters, "$x/"+rest)
			}
		} else {
			filters = append(filters, strings.Join(append(prefix, "#"), "/"))
		}
		for _, l := range append(lits, "+") {
			gen(append(append([]string(nil), prefix...), l), depth-1)
		}
	}
	gen(nil, 3)
	var topics []string
	var genT func(prefix []string, depth int)
	genT = func(prefix []string, depth int) {
		if len(prefix) > 0 {
			topics = append(topics, strings.Join(prefix, "/"))
		}
		if depth == 0 {
			return
		}
		ls := []string{"a", "b", "", "z"}
		if len(prefix) == 0 {
			ls = append(ls, "$x", "$z")
		}
		for _, l := range ls {
			genT(append(append([]string(nil), prefix...), l), depth-1)
		}
	}
	genT(nil, 5)
	for _, f := range filters {
		if err := topic.ValidateFilter([]byte(f)); err != nil {
			t.Fatalf("generated invalid filter %q", f)
		}
	}
	t.Logf("%d filters, %d topics", len(filters), len(topics))
	matches := make(map[string][]bool, len(filters))
	for _, f := range filters {
		m := make([]bool, len(topics))
		for i, tp := range topics {
			m[i] = topic.Match(f, tp)
		}
		matches[f] = m
	}
	for _, outer := range filters {
		mo, ol := matches[outer], splitFilter(outer)
		for _, inner := range filters {
			mi, il := matches[inner], splitFilter(inner)
			within, shared := true, false
			for i := range topics {
				if mi[i] && !mo[i] {
					within = false
				}
				if mi[i] && mo[i] {
					shared = true
				}
			}
			if got := contains(ol, il); got != within {
				t.Errorf("contains(%q, %q) = %v, brute force %v", outer, inner, got, within)
			}
			if got := overlaps(ol, il); got != shared {
				t.Errorf("overlaps(%q, %q) = %v, brute force %v", outer, inner, got, shared)
			}
		}
	}
}

// TestMatchTopicAgreesWithTopicMatch checks the ACL's own matcher (which
// substitutes without allocating) against the broker's topic.Match.
func TestMatchTopicAgreesWithTopicMatch(t *testing.T) {
	filters := []string{"#", "+", "a", "a/#", "a/+", "+/b", "a/+/#", "$SYS/#", "$SYS/+", "/#", "/+", "a/", "+/+", "+/#"}
	topics := []string{"a", "b", "a/b", "a/b/c", "/", "/a", "a/", "$SYS", "$SYS/x", "$SYS/x/y", "//", "x/b"}
	s := subject{}
	for _, f := range filters {
		r, err := parseRule(false, "read "+f)
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range topics {
			if got, want := r.matchTopic(&s, tp), topic.Match(f, tp); got != want {
				t.Errorf("rule %q topic %q: %v, topic.Match %v", f, tp, got, want)
			}
		}
	}
}

func BenchmarkCanPublish(b *testing.B) {
	a, err := parseACL("acl", []byte(siteACL))
	if err != nil {
		b.Fatal(err)
	}
	s := subject{user: "line3-plc", id: "plc-7"}
	b.ReportAllocs()
	for b.Loop() {
		if !a.canPublish(&s, "devices/plc-7/telemetry/temp") {
			b.Fatal("denied")
		}
	}
}

// TestMosquittoLoadsSiteACL checks that the ACL the tests use is
// Mosquitto's syntax, by having Mosquitto load it (less the share lines,
// which are linemq's own and which Mosquitto 2 refuses).
func TestMosquittoLoadsSiteACL(t *testing.T) {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		t.Skip("mosquitto not installed (apt-get install mosquitto); CI installs it")
	}
	dir := t.TempDir()
	var lines []string
	for l := range strings.SplitSeq(siteACL, "\n") {
		if !strings.HasPrefix(l, "share ") {
			lines = append(lines, l)
		}
	}
	acl := writeFile(t, dir, "acl", strings.Join(lines, "\n"))
	if _, err := loadACL(acl); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\nacl_file %s\n", port, acl)
	if os.Geteuid() == 0 {
		conf += "user root\n"
	}
	confFile := writeFile(t, dir, "mosquitto.conf", conf)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out syncBuffer
	m := exec.CommandContext(ctx, bin, "-c", confFile)
	m.Stdout, m.Stderr = &out, &out
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- m.Wait() }()
	defer func() {
		m.Process.Kill()
		<-exited
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "running") {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("mosquitto refused the ACL (%v):\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("mosquitto did not start:\n%s", out.String())
		}
	}
	if strings.Contains(out.String(), "Error") {
		t.Errorf("mosquitto:\n%s", out.String())
	}
}
