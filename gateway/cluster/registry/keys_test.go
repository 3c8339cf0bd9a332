package registry

import (
	"strings"
	"testing"
)

func TestKeysRoundTrip(t *testing.T) {
	ks := keyspace{prefix: DefaultPrefix("line/3")}
	if ks.prefix != "/linemq/line%2F3/" {
		t.Fatalf("prefix %q: the cluster name must be escaped", ks.prefix)
	}
	odd := []string{"a/b", "sensors/+/temp", "#", "%2F", "50%", "ü/ß", "a b", "..", "$share/g/f"}
	for _, s := range odd {
		for _, c := range []struct {
			key  string
			want keyInfo
		}{
			{ks.node(s), keyInfo{kind: kindNode, node: s}},
			{ks.route(s, s), keyInfo{kind: kindRoute, node: s, filter: s}},
			{ks.member(s, s, s, s), keyInfo{kind: kindMember, node: s, group: s, filter: s, client: s}},
			{ks.session(s), keyInfo{kind: kindSession, client: s}},
		} {
			if strings.Contains(strings.TrimPrefix(c.key, ks.prefix), "//") {
				t.Errorf("key %q has an empty segment", c.key)
			}
			got, ok := ks.parse(c.key)
			if !ok || got != c.want {
				t.Errorf("parse(%q) = %+v, %v; want %+v", c.key, got, ok, c.want)
			}
		}
	}
	// A node's ranges never contain another node's keys, even when one
	// name is a prefix of the other.
	if strings.HasPrefix(ks.member("ab", "g", "f", "c"), ks.membersOf("a")) {
		t.Error("node a's member range contains node ab's keys")
	}
	if strings.HasPrefix(ks.route("a%2F", "f"), ks.routesOf("a")) {
		t.Error("node a's route range contains another node's keys")
	}
}

func TestKeysUnknownIgnored(t *testing.T) {
	ks := keyspace{prefix: "/p/"}
	for _, k := range []string{"/p/nodes", "/p/nodes/", "/p/other/x", "/p/routes/n", "/p/members/n/g/f", "/q/nodes/n", "/p/nodes/%zz", "/p/nodes/a/b"} {
		if info, ok := ks.parse(k); ok {
			t.Errorf("parse(%q) = %+v; want it ignored", k, info)
		}
	}
}
