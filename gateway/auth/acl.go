package auth

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/linemq/linemq/broker/topic"
)

// access is what a rule grants: read (subscribe), write (publish), both,
// or, for a deny rule, neither.
type access byte

const (
	accessRead  access = 1 << iota // may subscribe
	accessWrite                    // may publish
	accessDeny                     // a deny rule: takes away read and write

	accessReadWrite = accessRead | accessWrite
)

// levelKind is what one level of a rule's filter is.
type levelKind byte

const (
	levelLiteral levelKind = iota // a literal level, possibly with %u or %c in it
	levelPlus                     // +
	levelHash                     // #, the last level
)

// level is one level of a rule's filter. For a pattern rule a literal
// level may hold %u and %c; parts is then the level cut around them.
type level struct {
	kind  levelKind
	text  string // as written
	parts []part // nil when the level has no substitution
}

// part is a piece of a level with substitutions: literal text, or the user
// name (%u) or client id (%c).
type part struct {
	lit string
	sub byte // 0 for lit, 'u' or 'c'
}

// rule is one topic or pattern line.
type rule struct {
	access access
	filter string // as written
	levels []level
	line   int
	// global is set on a pattern deny rule without substitutions: it takes
	// the topics away from every client, anonymous or not, for reading and
	// writing. See CanSubscribe for what that allows.
	global bool
}

// section is the rules of one user, or of anonymous clients.
type section struct {
	deny, allow []*rule
	// shares are the share name patterns (path.Match) this section may
	// join, from its "share" lines.
	shares []string
}

// acl is a parsed ACL file.
type acl struct {
	anon  section
	users map[string]*section
	// Pattern rules apply to every client, after its own section's.
	patDeny, patAllow []*rule
	// reserved are the share name patterns of every section: a share name
	// matching one of them may only be joined by the sections that list it.
	reserved []string
}

// maxACLLine bounds an ACL line.
const maxACLLine = 64 << 10

// loadACL reads and parses an ACL file.
func loadACL(file string) (*acl, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, &ParseError{File: file, Err: pathError(err)}
	}
	return parseACL(file, data)
}

// pathError is an *os.PathError's cause, the file name being reported by
// the caller.
func pathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// parseACL parses Mosquitto's ACL format:
//
//	# comment
//	topic [read|write|readwrite|deny] FILTER   (anonymous clients, before any user line)
//	user NAME
//	topic [read|write|readwrite|deny] FILTER   (that user)
//	share NAME                                 (linemq: that user may join share NAME)
//	pattern [read|write|readwrite|deny] FILTER (every client; %u user name, %c client id)
//
// Unlike Mosquitto, which skips a line it does not know, an unknown keyword
// is an error: a mistyped deny line must not silently open what it was
// meant to close.
func parseACL(file string, data []byte) (*acl, error) {
	a := &acl{users: make(map[string]*section)}
	cur := &a.anon
	var errs []*ParseError
	fail := func(line int, format string, args ...any) {
		errs = append(errs, &ParseError{File: file, Line: line, Err: fmt.Errorf(format, args...)})
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxACLLine)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		if !utf8.ValidString(text) {
			fail(line, "not UTF-8")
			continue
		}
		keyword, rest := cutSpace(text)
		switch keyword {
		case "user":
			if rest == "" {
				fail(line, "user with no name")
				continue
			}
			s := a.users[rest]
			if s == nil {
				// A user named twice gathers the rules of both sections,
				// as in Mosquitto.
				s = &section{}
				a.users[rest] = s
			}
			cur = s
		case "topic", "pattern":
			r, err := parseRule(keyword == "pattern", rest)
			if err != nil {
				fail(line, "%v", err)
				continue
			}
			r.line = line
			switch {
			case keyword == "topic" && r.access == accessDeny:
				cur.deny = append(cur.deny, r)
			case keyword == "topic":
				cur.allow = append(cur.allow, r)
			case r.access == accessDeny:
				a.patDeny = append(a.patDeny, r)
			default:
				a.patAllow = append(a.patAllow, r)
			}
		case "share":
			if err := checkShareName(rest); err != nil {
				fail(line, "%v", err)
				continue
			}
			cur.shares = append(cur.shares, rest)
			a.reserved = append(a.reserved, rest)
		default:
			fail(line, "unknown keyword %q (known: user, topic, pattern, share)", keyword)
		}
	}
	if err := sc.Err(); err != nil {
		fail(line+1, "%v", err)
	}
	if err := fileErrors(file, errs); err != nil {
		return nil, err
	}
	return a, nil
}

// parseRule parses what follows "topic" or "pattern": an optional access
// word and the filter, which may contain spaces. A lone word is the filter
// with readwrite access, as in Mosquitto ("topic read" is the topic "read").
func parseRule(pattern bool, s string) (*rule, error) {
	if s == "" {
		return nil, errors.New("no topic filter")
	}
	acc := accessReadWrite
	if word, filter := cutSpace(s); filter != "" {
		switch word {
		case "read":
			acc = accessRead
		case "write":
			acc = accessWrite
		case "readwrite":
			acc = accessReadWrite
		case "deny":
			acc = accessDeny
		default:
			return nil, fmt.Errorf("unknown access %q (read, write, readwrite or deny)", word)
		}
		s = filter
	}
	if strings.HasPrefix(s, topic.SharePrefix) {
		return nil, fmt.Errorf("%q: rules apply to the filter inside $share/<name>/; write the filter without the prefix, and reserve the name with a share line", s)
	}
	if err := topic.ValidateFilter([]byte(s)); err != nil {
		return nil, fmt.Errorf("%q: %s", s, strings.TrimPrefix(err.Error(), "topic: "))
	}
	r := &rule{access: acc, filter: s}
	subs := false
	for lv := range strings.SplitSeq(s, "/") {
		l := level{text: lv}
		switch {
		case lv == "+":
			l.kind = levelPlus
		case lv == "#":
			l.kind = levelHash
		case pattern:
			l.parts = splitSubs(lv)
			subs = subs || l.parts != nil
		}
		r.levels = append(r.levels, l)
	}
	r.global = pattern && acc == accessDeny && !subs
	return r, nil
}

// splitSubs cuts a level around %u and %c, or returns nil when it has
// neither. Any other '%' is literal, as in Mosquitto.
func splitSubs(lv string) []part {
	if !strings.Contains(lv, "%u") && !strings.Contains(lv, "%c") {
		return nil
	}
	var parts []part
	start := 0
	for i := 0; i+1 < len(lv); i++ {
		if lv[i] == '%' && (lv[i+1] == 'u' || lv[i+1] == 'c') {
			if i > start {
				parts = append(parts, part{lit: lv[start:i]})
			}
			parts = append(parts, part{sub: lv[i+1]})
			i++
			start = i + 1
		}
	}
	if start < len(lv) {
		parts = append(parts, part{lit: lv[start:]})
	}
	return parts
}

// cutSpace cuts s at its first space or tab, and trims what follows.
func cutSpace(s string) (word, rest string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i+1:])
}

// checkShareName checks the pattern of a share line: a share name, or a
// path.Match pattern of them.
func checkShareName(name string) error {
	switch {
	case name == "":
		return errors.New("share with no name")
	case strings.ContainsAny(name, "/+# \t\x00"):
		return fmt.Errorf("share name %q: share names cannot contain '/', '+', '#' or spaces", name)
	}
	if _, err := path.Match(name, ""); err != nil {
		return fmt.Errorf("share name pattern %q: %v", name, err)
	}
	return nil
}

// subject is the client a rule is resolved for: the user name the ACL
// sees (empty for an anonymous client) and the client id.
type subject struct {
	user, id string
}

// value returns what %u or %c stands for, and false when it cannot be used:
// an anonymous client has no user name, and a value with '/', '+' or '#'
// would change the shape of the filter (user "a/b" would reach user "a"'s
// topics through "dev/%u/#"), as Mosquitto also refuses.
func (s *subject) value(sub byte) (string, bool) {
	v := s.id
	if sub == 'u' {
		v = s.user
	}
	if v == "" || strings.ContainsAny(v, "/+#\x00") {
		return "", false
	}
	return v, true
}

// resolve returns the text of literal level l for s, and false when a
// substitution in it cannot be used. It allocates only for a level that
// mixes text and a substitution ("dev-%c").
func (l *level) resolve(s *subject) (string, bool) {
	if l.parts == nil {
		return l.text, true
	}
	if len(l.parts) == 1 {
		return s.value(l.parts[0].sub)
	}
	var b strings.Builder
	for _, p := range l.parts {
		if p.sub == 0 {
			b.WriteString(p.lit)
			continue
		}
		v, ok := s.value(p.sub)
		if !ok {
			return "", false
		}
		b.WriteString(v)
	}
	return b.String(), true
}

// matchTopic reports whether r, resolved for s, matches the topic name t.
// A level whose substitution cannot be used matches nothing in an allow
// rule and anything in a deny rule: unknown is never more permissive.
func (r *rule) matchTopic(s *subject, t string) bool {
	if t != "" && t[0] == '$' && r.levels[0].kind != levelLiteral {
		return false // [MQTT-4.7.2-1]: wildcards do not reach $SYS and the like
	}
	ti := 0
	for i := range r.levels {
		l := &r.levels[i]
		if l.kind == levelHash {
			return true // the rest, even nothing: "a/#" matches "a" [MQTT-4.7.1-2]
		}
		if ti > len(t) {
			return false
		}
		tj := ti + strings.IndexByte(t[ti:], '/')
		if tj < ti {
			tj = len(t)
		}
		if l.kind == levelLiteral {
			v, ok := l.resolve(s)
			switch {
			case !ok && r.access != accessDeny:
				return false
			case ok && v != t[ti:tj]:
				return false
			}
		}
		ti = tj + 1
	}
	return ti > len(t)
}

// flevel is one level of a filter being compared with another.
type flevel struct {
	kind levelKind
	text string
}

// splitFilter cuts a subscription filter into levels.
func splitFilter(f string) []flevel {
	var out []flevel
	for lv := range strings.SplitSeq(f, "/") {
		switch lv {
		case "+":
			out = append(out, flevel{kind: levelPlus})
		case "#":
			out = append(out, flevel{kind: levelHash})
		default:
			out = append(out, flevel{text: lv})
		}
	}
	return out
}

// resolveLevels returns r's filter resolved for s; ok is false when the
// rule does not apply to s (an allow rule with an unusable substitution).
// In a deny rule such a level becomes '+', the widest it could be.
func (r *rule) resolveLevels(s *subject) (out []flevel, ok bool) {
	out = make([]flevel, len(r.levels))
	for i := range r.levels {
		l := &r.levels[i]
		out[i].kind = l.kind
		if l.kind != levelLiteral {
			continue
		}
		v, usable := l.resolve(s)
		switch {
		case usable:
			out[i].text = v
		case r.access == accessDeny:
			out[i].kind = levelPlus
		default:
			return nil, false
		}
	}
	return out, true
}

// dollarLevel reports whether l is a literal first level starting with '$',
// which no wildcard first level matches [MQTT-4.7.2-1].
func dollarLevel(l flevel) bool { return l.kind == levelLiteral && strings.HasPrefix(l.text, "$") }

// contains reports whether every topic that inner matches, outer matches
// too: whether a subscription to inner stays within a rule for outer.
func contains(outer, inner []flevel) bool {
	for i := 0; ; i++ {
		if i == len(outer) {
			return i == len(inner)
		}
		o := outer[i]
		if o.kind == levelHash {
			// "a/#" takes in "a" and everything below it; a '#' first
			// level does not take in "$SYS/..." [MQTT-4.7.2-1].
			return i > 0 || len(inner) == 0 || !dollarLevel(inner[0])
		}
		if i == len(inner) {
			return false // outer needs more levels than inner's topics have
		}
		n := inner[i]
		switch o.kind {
		case levelPlus:
			if n.kind == levelHash {
				// A first-level "#" matches every topic of one level or
				// more, as "+/#" does; further down, "a/#" also matches
				// "a", which "a/+/#" does not.
				return i == 0 && len(outer) == 2 && outer[1].kind == levelHash
			}
			if i == 0 && dollarLevel(n) {
				return false
			}
		case levelLiteral:
			if n.kind != levelLiteral || n.text != o.text {
				return false
			}
		}
	}
}

// overlaps reports whether some topic matches both a and b.
func overlaps(a, b []flevel) bool {
	for i := 0; ; i++ {
		switch {
		case i == len(a) && i == len(b):
			return true
		case i == len(a):
			return b[i].kind == levelHash // "a" and "a/#" share "a"
		case i == len(b):
			return a[i].kind == levelHash
		}
		x, y := a[i], b[i]
		if i == 0 && (x.kind != levelLiteral && dollarLevel(y) || y.kind != levelLiteral && dollarLevel(x)) {
			return false // [MQTT-4.7.2-1]
		}
		if x.kind == levelHash || y.kind == levelHash {
			return true
		}
		if x.kind == levelLiteral && y.kind == levelLiteral && x.text != y.text {
			return false
		}
	}
}

// section returns the rules of the client whose ACL user name is user:
// the anonymous section for "", nil for a user without a section.
func (a *acl) section(user string) *section {
	if user == "" {
		return &a.anon
	}
	return a.users[user]
}

// canPublish applies the rules to a publish on topic t: a deny rule that
// matches wins, then any allow rule with write access grants it.
func (a *acl) canPublish(s *subject, t string) bool { return a.canAccess(s, t, accessWrite) }

// canRead applies the rules to a message on topic t sent to the client: a
// deny rule that matches wins, then any allow rule with read access grants
// it.
func (a *acl) canRead(s *subject, t string) bool { return a.canAccess(s, t, accessRead) }

func (a *acl) canAccess(s *subject, t string, want access) bool {
	sec := a.section(s.user)
	if sec != nil {
		for _, r := range sec.deny {
			if r.matchTopic(s, t) {
				return false
			}
		}
	}
	for _, r := range a.patDeny {
		if r.matchTopic(s, t) {
			return false
		}
	}
	if sec != nil {
		for _, r := range sec.allow {
			if r.access&want != 0 && r.matchTopic(s, t) {
				return true
			}
		}
	}
	for _, r := range a.patAllow {
		if r.access&want != 0 && r.matchTopic(s, t) {
			return true
		}
	}
	return false
}

// canSubscribe applies the rules to a subscription to filter f (without
// its $share prefix): f must lie entirely within one allow rule with read
// access, and must not reach a topic a deny rule takes away.
//
// A deny rule refuses any filter that overlaps it, since the client could
// otherwise receive what it may not read through a wider wildcard: with
// "topic deny secret/#", "#" and "+/x" are refused too. The one exception
// is a global deny (a pattern deny without %u or %c): nobody may publish
// to its topics, so a wider filter receives nothing from them, and only a
// filter within the deny is refused. That is what lets "#" be granted
// beside "pattern deny test/nosubscribe".
//
// With filter (auth.acl_overlap: filter) only a filter within a deny rule
// is refused, since nothing could ever be sent on it; one that merely
// overlaps a deny rule is granted, and what the client may not read is
// kept from it message by message (canRead, on the delivery path).
func (a *acl) canSubscribe(s *subject, f string, filter bool) bool {
	fl := splitFilter(f)
	sec := a.section(s.user)
	var denies []*rule
	if sec != nil {
		denies = sec.deny
	}
	for _, list := range [][]*rule{denies, a.patDeny} {
		for _, r := range list {
			rl, _ := r.resolveLevels(s)
			if (r.global || filter) && contains(rl, fl) || !r.global && !filter && overlaps(rl, fl) {
				return false
			}
		}
	}
	var allows []*rule
	if sec != nil {
		allows = sec.allow
	}
	for _, list := range [][]*rule{allows, a.patAllow} {
		for _, r := range list {
			if r.access&accessRead == 0 {
				continue
			}
			if rl, ok := r.resolveLevels(s); ok && contains(rl, fl) {
				return true
			}
		}
	}
	return false
}

// canJoinShare reports whether the client may join share group name: any
// client may join a name no share line reserves; a reserved one only the
// clients whose section lists it.
func (a *acl) canJoinShare(s *subject, name string) bool {
	if !matchAny(a.reserved, name) {
		return true
	}
	sec := a.section(s.user)
	return sec != nil && matchAny(sec.shares, name)
}

// matchAny reports whether name matches one of the path.Match patterns.
func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}
