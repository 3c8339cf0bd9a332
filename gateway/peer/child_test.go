package peer

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/linemq/linemq/broker"
)

// childEnv makes the test binary run one node, "b", driven on stdin and
// reporting on stdout, instead of the tests: a process of its own that a
// test can stop with SIGSTOP, as an operator or a kernel would.
//
// It prints "addr <addr>" once listening, "delivered <payload>" for each
// delivery its Handler gets (and accepts), and answers these lines:
//
//	peer <addr>   node "a" is at addr
//	deliver <n>   deliver n messages (payloads 0..n-1) to a; then
//	              "outcome <payload> ok|<error>" as each completes
//	stats         "stats <PeerStats of a as JSON>"
//
// It exits when stdin ends.
const childEnv = "LINEMQ_PEER_TEST_CHILD"

func runChild() int {
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	h := newHandler()
	h.deliver = func(_ string, _ Target, m *broker.Message, r Reply) {
		say("delivered %s", m.Payload)
		r.Done(true, nil)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		say("error %v", err)
		return 1
	}
	m, err := New(fast(Options{Node: "b", Handler: h}))
	if err != nil {
		say("error %v", err)
		return 1
	}
	defer m.Close()
	if err := m.Start(ln); err != nil {
		say("error %v", err)
		return 1
	}
	say("addr %s", ln.Addr())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "peer":
			m.SetPeers(map[string]string{"a": arg, "b": ln.Addr().String()})
		case "deliver":
			n, _ := strconv.Atoi(arg)
			for i := range n {
				err := m.Deliver(context.Background(), "a", Target{Group: "g", Filter: "t", Client: "c"},
					msg("t", strconv.Itoa(i)), func(err error) {
						if err != nil {
							say("outcome %d %v", i, err)
						} else {
							say("outcome %d ok", i)
						}
					})
				if err != nil {
					say("outcome %d %v", i, err)
				}
			}
		case "stats":
			for _, s := range m.Stats() {
				b, _ := json.Marshal(s)
				say("stats %s", b)
			}
		}
	}
	return 0
}
