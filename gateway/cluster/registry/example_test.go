package registry_test

import (
	"context"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/linemq/linemq/gateway/cluster/registry"
)

// The broker glue in a few lines: remote members and routes flow in as
// events, subscriptions flow out as writes a SUBACK waits for, and CONNECT
// claims the session. (Compiled, not run: it needs an etcd.)
func Example() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	var r *registry.Registry
	r, err = registry.New(registry.Options{
		Client:  cli,
		Cluster: "line-3",
		Node:    "gw1",
		Addr:    "10.0.0.11:7946",
		OnEvent: func(ev registry.Event) {
			if ev.Node == r.Node() {
				return // the broker holds its own members and routes itself
			}
			switch ev.Kind {
			case registry.MemberJoined, registry.MemberLeft:
				// Push the group's new candidate order into the broker's
				// share group: r.MembersLocalFirst(ev.Group, ev.Filter).
			case registry.RouteAdded, registry.RouteRemoved:
				// Update the index of remote nodes' ordinary filters.
			case registry.SessionOwned:
				// If ev.Prev.Node is this node, another node took the
				// client over: disconnect it here (0x8E).
			}
		},
		OnState: func(s registry.State, why error) {
			log.Printf("cluster registry %v: %v", s, why) // feeds the health check
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Start(); err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	<-r.Ready() // only now open the MQTT listeners

	// CONNECT from a client: own its session before the CONNACK.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	claim, err := r.ClaimSession(ctx, "plc-7")
	if err != nil {
		log.Fatal(err) // refuse the CONNECT rather than serve a second owner
	}
	_ = claim.Prev // a previous owner on another node hands the session over

	// SUBSCRIBE $share/workers/line/3/#: the SUBACK waits, bounded, until
	// the membership is committed and so routable from every node.
	if err := r.AddMember("workers", "line/3/#", "plc-7", 1).Wait(ctx); err != nil {
		log.Printf("membership not yet committed: %v", err) // it still will be
	}
}
