package provision

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"path"
	"strings"

	"golang.org/x/crypto/ssh"
)

// checkSystemFile checks a file for the system (name relative to
// SystemDir) as the program that reads it would, so that a typo is
// refused here rather than leaving a gateway without a network.
func checkSystemFile(name string, data []byte) []Problem {
	switch {
	case name == "hostname":
		return checkHostname(data)
	case name == "ntp.txt":
		return checkNTP(data)
	case name == "authorized_keys":
		return checkAuthorizedKeys(data)
	case path.Dir(name) == "network":
		return checkNetwork(data)
	}
	return nil
}

// lines calls f with each line that is not blank or a comment (# or ;),
// trimmed, and its number.
func lines(data []byte, f func(n int, line string)) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		f(n, l)
	}
}

// checkHostname wants one host name: labels of letters, digits and
// hyphens, neither starting nor ending with a hyphen, at most 63
// characters each and 253 in all (RFC 1123).
func checkHostname(data []byte) []Problem {
	var names []string
	lines(data, func(_ int, l string) { names = append(names, l) })
	if len(names) != 1 {
		return []Problem{{Msg: fmt.Sprintf("must hold one host name, found %d", len(names))}}
	}
	if !validHostname(names[0]) {
		return []Problem{{Line: 1, Msg: fmt.Sprintf("%q is not a host name (letters, digits and hyphens; dots between labels)", names[0])}}
	}
	return nil
}

func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// checkNTP wants one or more servers, host names or addresses, one per
// line (or several separated by spaces).
func checkNTP(data []byte) []Problem {
	var problems []Problem
	n := 0
	lines(data, func(ln int, l string) {
		for _, s := range strings.Fields(l) {
			n++
			if _, err := netip.ParseAddr(s); err != nil && !validHostname(s) {
				problems = append(problems, Problem{Line: ln, Msg: fmt.Sprintf("%q is neither an address nor a host name", s)})
			}
		}
	})
	if n == 0 && problems == nil {
		problems = append(problems, Problem{Msg: "names no server (one per line)"})
	}
	return problems
}

// checkAuthorizedKeys parses each line as OpenSSH's authorized_keys does.
func checkAuthorizedKeys(data []byte) []Problem {
	var problems []Problem
	n := 0
	lines(data, func(ln int, l string) {
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(l)); err != nil {
			problems = append(problems, Problem{Line: ln, Msg: "not an SSH public key (ssh-ed25519 AAAA... comment): " + err.Error()})
		}
		n++
	})
	if n == 0 && problems == nil {
		problems = append(problems, Problem{Msg: "holds no key; leave the file out to keep SSH off"})
	}
	return problems
}

// networkKeys are the sections of a .network file and the keys checked in
// them; other keys of systemd.network(5) pass through unchecked.
var networkSections = map[string]bool{
	"Match": true, "Link": true, "SR-IOV": true, "Network": true, "Address": true, "Neighbor": true,
	"IPv6AddressLabel": true, "RoutingPolicyRule": true, "NextHop": true, "Route": true, "DHCPv4": true,
	"DHCPv6": true, "DHCPPrefixDelegation": true, "IPv6AcceptRA": true, "DHCPServer": true,
	"DHCPServerStaticLease": true, "IPv6SendRA": true, "IPv6Prefix": true, "IPv6RoutePrefix": true,
	"LLDP": true, "CAN": true, "IPoIB": true, "QDisc": true, "NetworkEmulator": true, "BridgeVLAN": true,
}

// checkNetwork checks a systemd-networkd .network file: sections it
// knows, key=value lines, and the addresses where a typo would cut the
// gateway off (Address=, Gateway=, DNS=, DHCP=).
func checkNetwork(data []byte) []Problem {
	var problems []Problem
	section := ""
	bad := func(ln int, format string, args ...any) {
		problems = append(problems, Problem{Line: ln, Msg: fmt.Sprintf(format, args...)})
	}
	lines(data, func(ln int, l string) {
		if strings.HasPrefix(l, "[") {
			if !strings.HasSuffix(l, "]") {
				bad(ln, "%q: a section is written [Name]", l)
				return
			}
			section = l[1 : len(l)-1]
			if !networkSections[section] {
				bad(ln, "unknown section [%s] (systemd.network(5))", section)
			}
			return
		}
		k, v, ok := strings.Cut(l, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok || k == "":
			bad(ln, "%q is not Key=value", l)
			return
		case section == "":
			bad(ln, "%s= before any section", k)
			return
		}
		switch section + "." + k {
		case "Network.Address", "Address.Address":
			for _, a := range strings.Fields(v) {
				if _, err := netip.ParsePrefix(a); err != nil {
					bad(ln, "Address=%s: an address with its prefix length, such as 10.0.0.11/24", a)
				}
			}
		case "Network.Gateway", "Route.Gateway", "Network.DNS", "Network.NTP":
			for _, a := range strings.Fields(v) {
				if _, err := netip.ParseAddr(a); err != nil && !(k == "Gateway" && (a == "_dhcp4" || a == "_ipv6ra")) && !(k == "NTP" && validHostname(a)) {
					bad(ln, "%s=%s: not an address", k, a)
				}
			}
		case "Network.DHCP":
			switch strings.ToLower(v) {
			case "yes", "no", "true", "false", "ipv4", "ipv6", "1", "0", "on", "off":
			default:
				bad(ln, "DHCP=%s: yes, no, ipv4 or ipv6", v)
			}
		}
	})
	return problems
}
