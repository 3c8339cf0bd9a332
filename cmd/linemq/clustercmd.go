package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/linemq/linemq/gateway/cluster"
	"github.com/linemq/linemq/gateway/config"
)

// runCluster is `linemq cluster ...`: operations on a line from any
// machine that reaches its etcd. Today one: forget, which takes a gateway
// out of the line on purpose so that no gateway reports it missing.
func runCluster(args []string, stdout, stderr io.Writer) int {
	usage := func() {
		fmt.Fprint(stderr, `usage: linemq cluster forget -etcd-endpoints URLS [-cluster NAME] NODE
       linemq cluster replace -etcd-endpoints URLS -peer-url URL NODE

forget takes NODE out of the line on purpose (a gateway taken out of
service, or replaced under another name): the other gateways stop listing
it as missing. A gateway that registers again is back in the line. With
embedded etcd, remove its member too (etcdctl member remove), or the
member list names it again.

replace makes room for a gateway that replaces NODE under the same name
(its SD card died, a blank one is in): with embedded etcd, NODE's member
is removed and a new one at URL (its -etcd-peer-listen) added in its
place. Start the replacement with an empty data directory and the
-etcd-initial-cluster and -etcd-initial-cluster-state the command prints;
it is sent its share of the line's session replicas as it registers.
`)
	}
	if len(args) == 0 || (args[0] != "forget" && args[0] != "replace") {
		usage()
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("linemq cluster "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = usage
	endpoints := fs.String("etcd-endpoints", "", "comma-separated client `URLS` of the line's etcd (any gateway's -etcd-client-listen)")
	name := fs.String("cluster", config.DefaultClusterName, "the cluster's `NAME` (cluster.name)")
	peerURL := fs.String("peer-url", "", "the replacement's etcd peer `URL` (its -etcd-peer-listen)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 || *endpoints == "" || (verb == "replace" && *peerURL == "") {
		usage()
		return 2
	}
	node := fs.Arg(0)
	// Long enough for etcd to accept a membership change after a member's
	// restart (it refuses one until every member has been up 5 s).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if verb == "replace" {
		ic, err := cluster.ReplaceMember(ctx, strings.Split(*endpoints, ","), node, *peerURL)
		if err != nil {
			fmt.Fprintf(stderr, "linemq cluster replace: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s's etcd member is replaced; start the new %s with an empty data directory and\n  -etcd-initial-cluster %s -etcd-initial-cluster-state existing\n", node, node, ic)
		return 0
	}
	removed, err := cluster.ForgetNode(ctx, strings.Split(*endpoints, ","), *name, node)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "linemq cluster forget: %v\n", err)
		return 1
	case !removed:
		fmt.Fprintf(stderr, "linemq cluster forget: %q is not in the line (no gateway of that name ever registered)\n", node)
		return 1
	}
	fmt.Fprintf(stdout, "%s is no longer part of the line; the gateways stop listing it as missing within 5 s\n", node)
	return 0
}
