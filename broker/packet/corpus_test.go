package packet_test

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/linemq/linemq/broker/packet"
)

// The golden corpus lives in testdata/corpus/*.txt. Each case is a block of
// "key: value" lines, blocks separated by blank lines, "#" starting a comment:
//
//	name:      unique, [a-z0-9-] (it names the generated fuzz seed files)
//	version:   3, 4 or 5: the protocol version the body is decoded as
//	bytes:     the whole packet, fixed header included; hex bytes, Go-quoted
//	           strings ("a/b") and repeats (61*123); may appear on several lines
//	maxsize:   optional maxSize for ReadFrame (default 0, no limit)
//	want:      the expected decode, as dumpPacket prints it, or
//	err:       the expected reason code and sentinel, e.g. "0x81 ErrBadQoS"
//	canonical: "no" when re-encoding the decode gives different bytes (a
//	           non-canonical but valid form); by default the encoder must
//	           reproduce bytes exactly
//
// The same cases seed the fuzz targets: TestFuzzSeeds checks that
// testdata/fuzz/<Target>/corpus-<name> match, and -update-seeds rewrites them.

var updateSeeds = flag.Bool("update-seeds", false, "rewrite testdata/fuzz/*/corpus-* from testdata/corpus")

type corpusCase struct {
	pos          string // file:line, for messages
	name         string
	version      packet.Version
	wire         []byte
	maxSize      int
	want         string
	errCode      packet.ReasonCode
	errName      string
	noncanonical bool
}

// sentinels names every decode error, so corpus files can refer to them.
var sentinels = map[string]error{
	"ErrVarintTooLong":         packet.ErrVarintTooLong,
	"ErrVarintNotMinimal":      packet.ErrVarintNotMinimal,
	"ErrShortBuffer":           packet.ErrShortBuffer,
	"ErrTrailingBytes":         packet.ErrTrailingBytes,
	"ErrInvalidUTF8":           packet.ErrInvalidUTF8,
	"ErrNullInString":          packet.ErrNullInString,
	"ErrReservedFlags":         packet.ErrReservedFlags,
	"ErrReservedType":          packet.ErrReservedType,
	"ErrBadQoS":                packet.ErrBadQoS,
	"ErrDupOnQoS0":             packet.ErrDupOnQoS0,
	"ErrZeroPacketID":          packet.ErrZeroPacketID,
	"ErrDuplicateProperty":     packet.ErrDuplicateProperty,
	"ErrPropertyNotAllowed":    packet.ErrPropertyNotAllowed,
	"ErrUnknownProperty":       packet.ErrUnknownProperty,
	"ErrBadPropertyValue":      packet.ErrBadPropertyValue,
	"ErrBadProtocolName":       packet.ErrBadProtocolName,
	"ErrUnsupportedVersion":    packet.ErrUnsupportedVersion,
	"ErrConnectReserved":       packet.ErrConnectReserved,
	"ErrBadWillFlags":          packet.ErrBadWillFlags,
	"ErrPasswordNoUsername":    packet.ErrPasswordNoUsername,
	"ErrNoSubscriptions":       packet.ErrNoSubscriptions,
	"ErrSubscribeReserved":     packet.ErrSubscribeReserved,
	"ErrBadRetainHandling":     packet.ErrBadRetainHandling,
	"ErrPacketTooLarge":        packet.ErrPacketTooLarge,
	"ErrBadReasonCode":         packet.ErrBadReasonCode,
	"ErrEmptyTopicNoAlias":     packet.ErrEmptyTopicNoAlias,
	"ErrZeroTopicAlias":        packet.ErrZeroTopicAlias,
	"ErrZeroSubscriptionID":    packet.ErrZeroSubscriptionID,
	"ErrConnackReserved":       packet.ErrConnackReserved,
	"ErrConnackSessionPresent": packet.ErrConnackSessionPresent,
	"ErrMissingAuthMethod":     packet.ErrMissingAuthMethod,
	"ErrBadSubscriptionQoS":    packet.ErrBadSubscriptionQoS,
	"ErrNoReasonCodes":         packet.ErrNoReasonCodes,
	"ErrWrongType":             packet.ErrWrongType,
}

// parseBytes turns a corpus "bytes:" value into wire bytes.
func parseBytes(s string) ([]byte, error) {
	var out []byte
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if s[0] == '"' {
			end := 1
			for ; end < len(s) && s[end] != '"'; end++ {
				if s[end] == '\\' {
					end++
				}
			}
			if end >= len(s) {
				return nil, fmt.Errorf("unterminated string in %q", s)
			}
			str, err := strconv.Unquote(s[:end+1])
			if err != nil {
				return nil, err
			}
			out = append(out, str...)
			s = s[end+1:]
			continue
		}
		tok, rest, _ := strings.Cut(s, " ")
		s = rest
		count := 1
		if hex, n, ok := strings.Cut(tok, "*"); ok {
			c, err := strconv.Atoi(n)
			if err != nil {
				return nil, fmt.Errorf("bad repeat %q", tok)
			}
			tok, count = hex, c
		}
		b, err := strconv.ParseUint(tok, 16, 8)
		if err != nil || len(tok) != 2 {
			return nil, fmt.Errorf("bad byte %q", tok)
		}
		for range count {
			out = append(out, byte(b))
		}
	}
	return out, nil
}

func loadCorpus(t testing.TB) []corpusCase {
	t.Helper()
	files, err := filepath.Glob("testdata/corpus/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	var cases []corpusCase
	names := map[string]string{}
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		var c *corpusCase
		flush := func() {
			if c == nil {
				return
			}
			switch {
			case c.name == "":
				t.Fatalf("%s: case without name", c.pos)
			case c.wire == nil:
				t.Fatalf("%s: case without bytes", c.pos)
			case (c.want == "") == (c.errName == ""):
				t.Fatalf("%s: case needs exactly one of want and err", c.pos)
			case c.version == 0:
				t.Fatalf("%s: case without version", c.pos)
			}
			if prev, dup := names[c.name]; dup {
				t.Fatalf("%s: name %s already used at %s", c.pos, c.name, prev)
			}
			names[c.name] = c.pos
			cases = append(cases, *c)
			c = nil
		}
		sc := bufio.NewScanner(f)
		for line := 1; sc.Scan(); line++ {
			text := strings.TrimSpace(sc.Text())
			if text == "" {
				flush()
				continue
			}
			if strings.HasPrefix(text, "#") {
				continue
			}
			if c == nil {
				c = &corpusCase{pos: fmt.Sprintf("%s:%d", file, line)}
			}
			key, val, ok := strings.Cut(text, ":")
			if !ok {
				t.Fatalf("%s:%d: want key: value", file, line)
			}
			val = strings.TrimSpace(val)
			switch key {
			case "name":
				c.name = val
			case "version":
				v, err := strconv.Atoi(val)
				if err != nil {
					t.Fatalf("%s:%d: %v", file, line, err)
				}
				c.version = packet.Version(v)
			case "bytes":
				b, err := parseBytes(val)
				if err != nil {
					t.Fatalf("%s:%d: %v", file, line, err)
				}
				c.wire = append(c.wire, b...)
			case "maxsize":
				if c.maxSize, err = strconv.Atoi(val); err != nil {
					t.Fatalf("%s:%d: %v", file, line, err)
				}
			case "want":
				c.want = val
			case "err":
				code, name, _ := strings.Cut(val, " ")
				n, err := strconv.ParseUint(code, 0, 8)
				if err != nil {
					t.Fatalf("%s:%d: bad reason code %q", file, line, code)
				}
				if _, ok := sentinels[name]; !ok {
					t.Fatalf("%s:%d: unknown error %q", file, line, name)
				}
				c.errCode, c.errName = packet.ReasonCode(n), name
			case "canonical":
				c.noncanonical = val == "no"
			default:
				t.Fatalf("%s:%d: unknown key %q", file, line, key)
			}
		}
		flush()
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return cases
}

func checkErr(t *testing.T, c corpusCase, err error) {
	t.Helper()
	if c.errName == "" {
		t.Fatalf("%s: unexpected error %v", c.pos, err)
	}
	if !errors.Is(err, sentinels[c.errName]) {
		t.Fatalf("%s: got error %v, want %s", c.pos, err, c.errName)
	}
	if got := packet.CodeOf(err); got != c.errCode {
		t.Fatalf("%s: %s carries code %#x, corpus says %#x", c.pos, c.errName, byte(got), byte(c.errCode))
	}
}

// TestCorpus decodes every golden case, compares the result, decodes it again
// into a struct left dirty by an earlier case, and re-encodes it.
func TestCorpus(t *testing.T) {
	cases := loadCorpus(t)
	dirty := map[reflect.Type]any{} // last successful decode of each type
	var props uint64                // union of properties seen in valid cases
	seenErr := map[string]bool{}
	type typeVersion struct {
		t packet.Type
		v packet.Version
	}
	seenValid := map[typeVersion]bool{}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, n, err := packet.ReadFrame(c.wire, c.maxSize)
			if err != nil {
				checkErr(t, c, err)
				seenErr[c.errName] = true
				return
			}
			if n == 0 || n+h.Remaining != len(c.wire) {
				t.Fatalf("%s: frame header %d + remaining %d, but the case has %d bytes", c.pos, n, h.Remaining, len(c.wire))
			}
			body := c.wire[n:]
			p, err := decodePacket(c.version, h, body)
			if d, ok := dirty[reflect.TypeOf(p)]; ok {
				derr := decodeInto(d, c.version, h, body)
				if !errors.Is(derr, err) && derr != err {
					t.Errorf("%s: reused struct: error %v, fresh struct: %v", c.pos, derr, err)
				} else if err == nil && dumpPacket(d) != dumpPacket(p) {
					t.Errorf("%s: reused struct decodes to\n\t%s\nfresh struct to\n\t%s", c.pos, dumpPacket(d), dumpPacket(p))
				}
			}
			if c.errName != "" {
				if err == nil {
					t.Fatalf("%s: decoded to %s, want error %s", c.pos, dumpPacket(p), c.errName)
				}
				checkErr(t, c, err)
				seenErr[c.errName] = true
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", c.pos, err)
			}
			if got := dumpPacket(p); got != c.want {
				t.Fatalf("%s:\n got: %s\nwant: %s", c.pos, got, c.want)
			}
			dirty[reflect.TypeOf(p)] = p
			seenValid[typeVersion{h.Type, c.version}] = true
			props |= propsOf(p)

			enc := encodePacket(nil, c.version, p)
			if !c.noncanonical && !bytes.Equal(enc, c.wire) {
				t.Errorf("%s: re-encoded\n got: % x\nwant: % x", c.pos, enc, c.wire)
			}
			if c.noncanonical && bytes.Equal(enc, c.wire) {
				t.Errorf("%s: marked canonical: no, but re-encodes to the same bytes", c.pos)
			}
			p2, err := roundTrip(c.version, enc)
			if err != nil {
				t.Fatalf("%s: re-encoded packet does not decode: %v", c.pos, err)
			}
			if !equalPackets(p, p2) {
				t.Fatalf("%s: re-decoded\n got: %s\nwant: %s", c.pos, dumpPacket(p2), dumpPacket(p))
			}
			if pub, ok := p.(*packet.Publish); ok {
				if pub.Size(c.version) != len(enc) {
					t.Errorf("%s: Size %d, encoded %d bytes", c.pos, pub.Size(c.version), len(enc))
				}
				hdr := pub.AppendHeader(nil, c.version)
				if !bytes.Equal(append(hdr, pub.Payload...), enc) {
					t.Errorf("%s: AppendHeader + payload != Append", c.pos)
				}
			}
		})
	}
	if t.Failed() {
		return
	}

	// The corpus must cover every property, every decode error and every
	// packet type in both versions.
	for id, name := range propNames {
		if props&(1<<id) == 0 {
			t.Errorf("no valid corpus case carries property %s (%#x)", name, byte(id))
		}
	}
	for name := range sentinels {
		if !seenErr[name] && name != "ErrWrongType" { // a caller bug, tested in TestAckWrongType
			t.Errorf("no corpus case expects %s", name)
		}
	}
	for typ := packet.CONNECT; typ <= packet.AUTH; typ++ {
		for _, v := range []packet.Version{packet.V311, packet.V5} {
			if typ == packet.AUTH && v != packet.V5 {
				continue
			}
			if !seenValid[typeVersion{typ, v}] {
				t.Errorf("no valid corpus case for %v in version %d", typ, v)
			}
		}
	}
}

// propsOf returns the properties a decoded packet carries, will properties
// included.
func propsOf(p any) uint64 {
	v := reflect.ValueOf(p).Elem()
	if v.Kind() != reflect.Struct {
		return 0
	}
	var m uint64
	for _, f := range []string{"Props", "WillProps"} {
		if fv := v.FieldByName(f); fv.IsValid() {
			m |= fv.Addr().Interface().(*packet.Properties).Present
		}
	}
	return m
}

// fuzzSeeds builds the seed corpus files from the golden corpus: every case
// seeds FuzzReadFrame with its whole packet, and each case whose fixed header
// parses also seeds the fuzz target of its packet type with its body.
func fuzzSeeds(t testing.TB) map[string]string {
	files := map[string]string{}
	add := func(target, name string, args ...any) {
		var b strings.Builder
		b.WriteString("go test fuzz v1\n")
		for _, a := range args {
			switch a := a.(type) {
			case []byte:
				fmt.Fprintf(&b, "[]byte(%q)\n", a)
			case byte:
				fmt.Fprintf(&b, "byte(%q)\n", a)
			case int:
				fmt.Fprintf(&b, "int(%d)\n", a)
			}
		}
		files[filepath.Join("testdata", "fuzz", target, "corpus-"+name)] = b.String()
	}
	for _, c := range loadCorpus(t) {
		add("FuzzReadFrame", c.name, c.wire, c.maxSize)
		h, n, err := packet.ReadFrame(c.wire, 0)
		if err != nil || n == 0 || n+h.Remaining != len(c.wire) {
			continue
		}
		body, v := c.wire[n:], byte(c.version)
		switch h.Type {
		case packet.CONNECT:
			add("FuzzConnect", c.name, body)
		case packet.CONNACK:
			add("FuzzConnack", c.name, v, body)
		case packet.PUBLISH:
			add("FuzzPublish", c.name, v, h.Flags, body)
		case packet.PUBACK, packet.PUBREC, packet.PUBREL, packet.PUBCOMP:
			add("FuzzAck", c.name, v, byte(h.Type), body)
		case packet.SUBSCRIBE:
			add("FuzzSubscribe", c.name, v, body)
		case packet.SUBACK:
			add("FuzzSuback", c.name, v, body)
		case packet.UNSUBSCRIBE:
			add("FuzzUnsubscribe", c.name, v, body)
		case packet.UNSUBACK:
			add("FuzzUnsuback", c.name, v, body)
		default: // DISCONNECT, AUTH, PINGREQ, PINGRESP
			add("FuzzDisconnectAuth", c.name, v, byte(h.Type), body)
		}
	}
	return files
}

// TestFuzzSeeds keeps the fuzz seed corpus in step with the golden corpus.
// Run "go test -run TestFuzzSeeds -update-seeds ./broker/packet/" after
// editing testdata/corpus. Seeds not named corpus-* (crashers the fuzzer
// found) are left alone.
func TestFuzzSeeds(t *testing.T) {
	want := fuzzSeeds(t)
	existing, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "*", "corpus-*"))
	if *updateSeeds {
		for _, f := range existing {
			if _, ok := want[f]; !ok {
				os.Remove(f)
			}
		}
		for f, content := range want {
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	for _, f := range existing {
		if _, ok := want[f]; !ok {
			t.Errorf("%s: no corpus case generates it any more (run with -update-seeds)", f)
		}
	}
	paths := make([]string, 0, len(want))
	for f := range want {
		paths = append(paths, f)
	}
	slices.Sort(paths)
	for _, f := range paths {
		got, err := os.ReadFile(f)
		if err != nil || string(got) != want[f] {
			t.Errorf("%s: out of date (run with -update-seeds)", f)
		}
	}
}
