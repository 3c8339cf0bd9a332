package chaos

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
)

// Topology is where the three nodes listen and how one of them is cut
// off from the others.
type Topology interface {
	// Args are the listen flags of node i (0-based): MQTT, HTTP (the
	// harness reads the cluster's figures there), cluster and the
	// embedded etcd member's URLs.
	Args(i int) []string
	// Command wraps the linemq command line for node i (a namespace's
	// "ip netns exec").
	Command(i int, path string, args []string) *exec.Cmd
	// EtcdClientURL is node i's etcd client URL, reachable from the
	// harness (to find the leader).
	EtcdClientURL(i int) string
	// Cut takes node i's link to the other nodes down; Heal brings it
	// back. ErrNoPartition if the topology cannot.
	Cut(i int) error
	Heal(i int) error
	// Close removes whatever the topology made.
	Close() error
	// String says what it is, for the report.
	String() string
}

// ErrNoPartition: the topology has no link to take down (loopback).
var ErrNoPartition = errors.New("partition needs network namespaces (ip netns, root)")

// loopback runs every node on 127.0.0.1.
type loopback struct {
	peer, client [3]string // etcd URLs, on ports picked just before
}

// NewLoopback picks the etcd ports (they must be known before the members
// start; the OS hands out free ones) for three nodes on 127.0.0.1.
func NewLoopback() (Topology, error) {
	var t loopback
	for i := range 3 {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		c, err := freePort()
		if err != nil {
			return nil, err
		}
		t.peer[i], t.client[i] = "http://"+p, "http://"+c
	}
	return &t, nil
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func initialCluster(peers [3]string) string {
	parts := make([]string, 3)
	for i, p := range peers {
		parts[i] = fmt.Sprintf("n%d=%s", i+1, p)
	}
	return strings.Join(parts, ",")
}

func (t *loopback) Args(i int) []string {
	return []string{"-mqtt-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0", "-cluster-listen", "127.0.0.1:0",
		"-etcd-peer-listen", t.peer[i], "-etcd-client-listen", t.client[i], "-etcd-initial-cluster", initialCluster(t.peer)}
}

func (t *loopback) Command(i int, path string, args []string) *exec.Cmd {
	return exec.Command(path, args...)
}

func (t *loopback) EtcdClientURL(i int) string { return t.client[i] }
func (t *loopback) Cut(int) error              { return ErrNoPartition }
func (t *loopback) Heal(int) error             { return ErrNoPartition }
func (t *loopback) Close() error               { return nil }
func (t *loopback) String() string             { return "loopback" }

// netns puts each node in a network namespace of its own:
//
//	switch namespace "<p>sw": a bridge br0, the line between the nodes
//	node namespace "<p>n<i>": veth "line" into br0, 10.231.X.(i+1)/25:
//	  the cluster transport and etcd's peer traffic
//	                          veth "cli" to the harness, a /30 of its own
//	                          (10.231.X.(130+4i)): MQTT and etcd's client
//	                          URL, which the harness uses for Status
//
// A partition takes the node's port on the bridge down: its peers lose it
// (and it them) as with a pulled cable, while its own clients still reach
// it, as the PLCs wired to a gateway would. Each node's client link is a
// separate point-to-point /30 and no namespace has a default route, so no
// node can reach another by the client links, even where the host
// forwards.
type netns struct {
	prefix string // namespace and interface prefix, "lmqc<X>"
	net    string // "10.231.<X>."
}

// NetnsUsable reports why network namespaces cannot be used here, or nil.
func NetnsUsable() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("no ip command (iproute2)")
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns list: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// NewNetns makes the namespaces. It takes the first free slot X from
// first on (a slot is free when "lmqc<X>sw" does not exist: creating it
// claims it, so two runs on one host never share addresses), and removes
// everything it made if any step fails.
func NewNetns(first int) (Topology, error) {
	if err := NetnsUsable(); err != nil {
		return nil, err
	}
	var t *netns
	for k := range 200 {
		x := (first + k) % 200
		p := fmt.Sprintf("lmqc%d", x)
		if exec.Command("ip", "netns", "add", p+"sw").Run() == nil {
			t = &netns{prefix: p, net: fmt.Sprintf("10.231.%d.", x)}
			break
		}
	}
	if t == nil {
		return nil, errors.New("no free namespace slot (lmqc0sw to lmqc199sw all exist: stale runs? ip netns del them)")
	}
	if err := t.setUp(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *netns) ns(i int) string { return fmt.Sprintf("%sn%d", t.prefix, i+1) }
func (t *netns) sw() string      { return t.prefix + "sw" }
func (t *netns) lineIP(i int) string {
	return fmt.Sprintf("%s%d", t.net, i+1)
}
func (t *netns) cliIP(i int) string  { return fmt.Sprintf("%s%d", t.net, 130+4*i) }
func (t *netns) hostIP(i int) string { return fmt.Sprintf("%s%d", t.net, 129+4*i) }

func (t *netns) setUp() error {
	steps := [][]string{
		{"netns", "exec", t.sw(), "ip", "link", "set", "lo", "up"},
		{"-n", t.sw(), "link", "add", "br0", "type", "bridge"},
		{"-n", t.sw(), "link", "set", "br0", "up"},
	}
	for i := range 3 {
		ns, sw := t.ns(i), t.sw()
		line, port := fmt.Sprintf("%sl%d", t.prefix, i+1), fmt.Sprintf("%ss%d", t.prefix, i+1)
		cli, host := fmt.Sprintf("%sc%d", t.prefix, i+1), fmt.Sprintf("%sh%d", t.prefix, i+1)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			// The line: node <-> bridge.
			[]string{"link", "add", line, "type", "veth", "peer", "name", port},
			[]string{"link", "set", line, "netns", ns},
			[]string{"link", "set", port, "netns", sw},
			[]string{"-n", ns, "link", "set", line, "name", "line"},
			[]string{"-n", ns, "addr", "add", t.lineIP(i) + "/25", "dev", "line"},
			[]string{"-n", ns, "link", "set", "line", "up"},
			[]string{"-n", sw, "link", "set", port, "master", "br0"},
			[]string{"-n", sw, "link", "set", port, "up"},
			// The client link: harness <-> node.
			[]string{"link", "add", host, "type", "veth", "peer", "name", cli},
			[]string{"link", "set", cli, "netns", ns},
			[]string{"-n", ns, "link", "set", cli, "name", "cli"},
			[]string{"-n", ns, "addr", "add", t.cliIP(i) + "/30", "dev", "cli"},
			[]string{"-n", ns, "link", "set", "cli", "up"},
			[]string{"addr", "add", t.hostIP(i) + "/30", "dev", host},
			[]string{"link", "set", host, "up"},
		)
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

func (t *netns) Args(i int) []string {
	var peers [3]string
	for k := range 3 {
		peers[k] = "http://" + t.lineIP(k) + ":2380"
	}
	return []string{"-mqtt-listen", t.cliIP(i) + ":1883", "-http-listen", t.cliIP(i) + ":8080", "-cluster-listen", t.lineIP(i) + ":7946",
		"-etcd-peer-listen", peers[i], "-etcd-client-listen", t.EtcdClientURL(i), "-etcd-initial-cluster", initialCluster(peers)}
}

func (t *netns) Command(i int, path string, args []string) *exec.Cmd {
	// ip netns exec execs the command in place (no fork outside batch
	// mode): the process started is linemq itself, so signals reach it.
	return exec.Command("ip", append([]string{"netns", "exec", t.ns(i), path}, args...)...)
}

func (t *netns) EtcdClientURL(i int) string { return "http://" + t.cliIP(i) + ":2379" }

func (t *netns) link(i int, state string) error {
	port := fmt.Sprintf("%ss%d", t.prefix, i+1)
	if out, err := exec.Command("ip", "-n", t.sw(), "link", "set", port, state).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set %s %s: %v: %s", port, state, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (t *netns) Cut(i int) error  { return t.link(i, "down") }
func (t *netns) Heal(i int) error { return t.link(i, "up") }

// Close deletes the namespaces; their veths go with them, and with them
// the host ends of the client links.
func (t *netns) Close() error {
	var errs []error
	for i := range 3 {
		exec.Command("ip", "link", "del", fmt.Sprintf("%sh%d", t.prefix, i+1)).Run() // if it outlived its peer's namespace
		if out, err := exec.Command("ip", "netns", "del", t.ns(i)).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", t.ns(i), err, strings.TrimSpace(string(out))))
		}
	}
	if out, err := exec.Command("ip", "netns", "del", t.sw()).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
		errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", t.sw(), err, strings.TrimSpace(string(out))))
	}
	return errors.Join(errs...)
}

func (t *netns) String() string {
	return fmt.Sprintf("network namespaces %s* (line %s0/25)", t.prefix, t.net)
}
