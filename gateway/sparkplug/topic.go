package sparkplug

import "strings"

// Namespace is the first level of every Sparkplug B topic.
const Namespace = "spBv1.0"

// CertificatesPrefix is where an Aware server republishes births
// (Sparkplug 3.0 section 10.1.4); clients may not publish under it.
const CertificatesPrefix = "$sparkplug/certificates/"

// ReservedPrefix is the topic space only the server publishes to.
const ReservedPrefix = "$sparkplug/"

// Kind is a Sparkplug message type, the third level of its topic.
type Kind uint8

// The message types.
const (
	NotSparkplug Kind = iota
	NBIRTH
	NDEATH
	DBIRTH
	DDEATH
	NDATA
	DDATA
	NCMD
	DCMD
	STATE
)

var kindNames = [...]string{"", "NBIRTH", "NDEATH", "DBIRTH", "DDEATH", "NDATA", "DDATA", "NCMD", "DCMD", "STATE"}

// String returns the type as written in topics.
func (k Kind) String() string { return kindNames[k] }

// device reports whether messages of this type name a device.
func (k Kind) device() bool { return k == DBIRTH || k == DDEATH || k == DDATA || k == DCMD }

// fromEdge reports whether messages of this type are published by the edge
// node itself (as opposed to commands from host applications).
func (k Kind) fromEdge() bool { return k != NCMD && k != DCMD && k != STATE && k != NotSparkplug }

func kindOf(s string) Kind {
	for k := NBIRTH; k <= DCMD; k++ {
		if kindNames[k] == s {
			return k
		}
	}
	return NotSparkplug
}

// Topic is a parsed Sparkplug topic. Its strings alias the topic parsed.
type Topic struct {
	Kind   Kind
	Group  string
	Edge   string
	Device string // device messages only
	Host   string // STATE only
}

// ParseTopic parses spBv1.0/{group}/{type}/{edge}[/{device}] and
// spBv1.0/STATE/{host} (and Sparkplug 2.2's STATE/{host}); ok is false for
// any other topic, including a Sparkplug type with the wrong number of
// levels. It does not allocate.
func ParseTopic(topic string) (t Topic, ok bool) {
	rest, found := strings.CutPrefix(topic, Namespace+"/")
	if !found {
		if host, legacy := strings.CutPrefix(topic, "STATE/"); legacy && host != "" && !strings.Contains(host, "/") {
			return Topic{Kind: STATE, Host: host}, true
		}
		return Topic{}, false
	}
	group, rest, found := strings.Cut(rest, "/")
	if !found || group == "" {
		return Topic{}, false
	}
	if group == "STATE" && rest != "" && !strings.Contains(rest, "/") {
		return Topic{Kind: STATE, Host: rest}, true
	}
	kind, rest, found := strings.Cut(rest, "/")
	if !found {
		return Topic{}, false
	}
	t.Kind = kindOf(kind)
	if t.Kind == NotSparkplug {
		return Topic{}, false
	}
	t.Group = group
	if t.Kind.device() {
		edge, device, found := strings.Cut(rest, "/")
		if !found || edge == "" || device == "" || strings.Contains(device, "/") {
			return Topic{}, false
		}
		t.Edge, t.Device = edge, device
		return t, true
	}
	if rest == "" || strings.Contains(rest, "/") {
		return Topic{}, false
	}
	t.Edge = rest
	return t, true
}

// certificateTopic is where an Aware server republishes a birth.
func certificateTopic(t Topic) string {
	if t.Kind == DBIRTH {
		return CertificatesPrefix + Namespace + "/" + t.Group + "/DBIRTH/" + t.Edge + "/" + t.Device
	}
	return CertificatesPrefix + Namespace + "/" + t.Group + "/NBIRTH/" + t.Edge
}
