package registry

import (
	"net/url"
	"strings"
)

// The key layout, below the prefix. Every variable segment is escaped with
// url.PathEscape, which escapes "/" (filters and client ids contain it) and
// "%" itself, so a key splits back into its segments on "/" unambiguously.
const (
	dirNodes    = "nodes/"    // nodes/<node>
	dirRoutes   = "routes/"   // routes/<node>/<filter>
	dirMembers  = "members/"  // members/<node>/<group>/<filter>/<client>
	dirSessions = "sessions/" // sessions/<client>
	dirWills    = "wills/"    // wills/<client>: bound to no lease, it outlives its node
)

// keyKind says which of the four families a key belongs to.
type keyKind uint8

const (
	kindNode keyKind = iota + 1
	kindRoute
	kindMember
	kindSession
)

// keyspace builds and parses the keys under one cluster's prefix.
type keyspace struct {
	prefix string // ends in "/"
}

// DefaultPrefix returns the prefix a cluster's keys live under when
// Options.Prefix is empty: "/linemq/<cluster>/", the name escaped.
func DefaultPrefix(cluster string) string {
	return "/linemq/" + url.PathEscape(cluster) + "/"
}

func esc(s string) string { return url.PathEscape(s) }

func (k keyspace) node(node string) string { return k.prefix + dirNodes + esc(node) }

func (k keyspace) route(node, filter string) string {
	return k.prefix + dirRoutes + esc(node) + "/" + esc(filter)
}

func (k keyspace) member(node, group, filter, client string) string {
	return k.prefix + dirMembers + esc(node) + "/" + esc(group) + "/" + esc(filter) + "/" + esc(client)
}

func (k keyspace) session(client string) string { return k.prefix + dirSessions + esc(client) }

func (k keyspace) will(client string) string { return k.prefix + dirWills + esc(client) }

// willClient returns the client of a key under dirWills.
func (k keyspace) willClient(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, k.prefix+dirWills)
	if !ok {
		return "", false
	}
	c, err := url.PathUnescape(rest)
	return c, err == nil
}

// routesOf and membersOf are the ranges (as prefixes) one node writes.
func (k keyspace) routesOf(node string) string  { return k.prefix + dirRoutes + esc(node) + "/" }
func (k keyspace) membersOf(node string) string { return k.prefix + dirMembers + esc(node) + "/" }

// keyInfo is a parsed key.
type keyInfo struct {
	kind   keyKind
	node   string // nodes, routes, members
	group  string // members
	filter string // routes, members
	client string // members, sessions
}

// parse splits a key under the prefix into its segments. It reports false
// for a key it does not understand (another version's, or a malformed
// one), which the mirror then ignores.
func (k keyspace) parse(key string) (keyInfo, bool) {
	rest, ok := strings.CutPrefix(key, k.prefix)
	if !ok {
		return keyInfo{}, false
	}
	dir, rest, ok := strings.Cut(rest, "/")
	if !ok {
		return keyInfo{}, false
	}
	segs := strings.Split(rest, "/")
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil {
			return keyInfo{}, false
		}
		segs[i] = u
	}
	switch {
	case dir+"/" == dirNodes && len(segs) == 1 && segs[0] != "":
		return keyInfo{kind: kindNode, node: segs[0]}, true
	case dir+"/" == dirRoutes && len(segs) == 2 && segs[0] != "":
		return keyInfo{kind: kindRoute, node: segs[0], filter: segs[1]}, true
	case dir+"/" == dirMembers && len(segs) == 4 && segs[0] != "":
		return keyInfo{kind: kindMember, node: segs[0], group: segs[1], filter: segs[2], client: segs[3]}, true
	case dir+"/" == dirSessions && len(segs) == 1:
		return keyInfo{kind: kindSession, client: segs[0]}, true
	}
	return keyInfo{}, false
}
