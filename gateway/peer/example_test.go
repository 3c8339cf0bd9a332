package peer_test

import (
	"context"
	"log"
	"net"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/peer"
)

// inbound is the gateway's side of what peers send.
type inbound struct{}

// Forward reaches this node's ordinary subscribers only: no share group
// picks, no forwarding on.
func (inbound) Forward(from string, m *broker.Message) {}

// Deliver queues m to one session, and answers once it is queued (and,
// for a persistent session, synced).
func (inbound) Deliver(from string, to peer.Target, m *broker.Message, r peer.Reply) {
	here := true // is to.Client connected here, a member of (to.Group, to.Filter)?
	if !here {
		r.Done(false, nil) // the sender picks the next member
		return
	}
	r.Done(true, nil) // or later, from the syncer, once committed
}

// The gateway's glue in a few lines: peers come from the registry, the
// share-group pick skips unavailable peers, a directed delivery's outcome
// releases the publisher's held PUBACK or re-picks. (Compiled, not run.)
func Example() {
	m, err := peer.New(peer.Options{Node: "gw1", Cluster: "line-3", Handler: inbound{}})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	ln, err := net.Listen("tcp", ":7946")
	if err != nil {
		log.Fatal(err)
	}
	if err := m.Start(ln); err != nil {
		log.Fatal(err)
	}

	// From the registry's node events: every node's name and address.
	m.SetPeers(map[string]string{"gw1": "10.0.0.11:7946", "gw2": "10.0.0.12:7946", "gw3": "10.0.0.13:7946"})

	// The pick: a member on gw2 is taken only if gw2 is available now.
	msg := broker.NewMessage("line/3/temp", []byte("21.5"), 1, false)
	if m.Available("gw2") {
		to := peer.Target{Group: "workers", Filter: "line/3/#", Client: "plc-7"}
		err := m.Deliver(context.Background(), "gw2", to, msg, func(err error) {
			if err != nil {
				// ErrNotHere, ErrTimeout, ErrBroken...: pick the next
				// member in the same pass, without moving the cursor.
				return
			}
			// Accepted: this delivery no longer holds the PUBACK.
		})
		if err != nil {
			log.Printf("gw2 refused at once (%v): pick the next member", err)
		}
	}

	// An ordinary forward, at most once per node with ordinary interest.
	if err := m.Send("gw3", msg); err != nil {
		log.Printf("forward to gw3 lost (%v): counted, it cannot be replaced", err)
	}
}
