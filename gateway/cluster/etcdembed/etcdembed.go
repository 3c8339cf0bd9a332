// Package etcdembed runs an etcd member inside the linemq process, so three
// to five gateways can form their coordination quorum without a separate
// etcd installation to manage.
//
// # Model
//
// Each gateway of an embedded cluster starts one member with [Start]; the
// members find each other through the peer URLs listed in
// Options.InitialCluster (the -etcd-initial-cluster flag) and elect a
// leader once a majority is up. The gateway's own etcd client then talks to
// its local member (Options.ClientListen), and the registry built on it
// works exactly as it does against external endpoints.
//
//	m, err := etcdembed.Start(etcdembed.Options{
//		Name:           "gw1",
//		Dir:            filepath.Join(dataDir, etcdembed.DirName),
//		PeerListen:     "http://10.0.0.11:2380",
//		ClientListen:   "http://127.0.0.1:2379",
//		InitialCluster: "gw1=http://10.0.0.11:2380,gw2=http://10.0.0.12:2380,gw3=http://10.0.0.13:2380",
//	})
//	if err != nil { ... }
//	defer m.Close()
//	err = m.WaitReady(ctx) // a quorum has formed and this member serves
//
// # Tuning
//
// The defaults (see [Options]) are chosen for an SD card and a plant-floor
// network rather than a data centre: a bounded database (QuotaBytes),
// periodic compaction so history does not grow with subscribe churn,
// fewer retained WAL files, and heartbeat and election timeouts long enough
// that a slow fsync on a cheap card or a congested link does not trigger
// elections. docs/cluster.md explains each choice.
//
// # Caveats
//
// Start does not wait for the cluster: a member of a three-gateway cluster
// serves only once a majority of members are up. Wait on [Member.Ready] or
// call [Member.WaitReady].
//
// A member that had a leader, lost it and reaches another member again
// has this process's peer connections shut down so that etcd dials them
// anew (streams.go): etcd would otherwise wait for TCP's retransmission
// backoff after a cut link heals. It needs Linux (/proc/self/fd).
//
// Peer and client traffic is plain HTTP/2, or mutual TLS with
// [Options.TLS] (every URL then https://): members verify each other's
// certificates and those of their clients against the CA file. etcd reads
// the certificate, key and CRL again at each handshake, so replacing those
// files takes effect without a restart; the CA file is read at start.
package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/linemq/linemq/gateway/certs"
	"github.com/linemq/linemq/gateway/cluster/internal/zaplog"
)

// DirName is the directory, inside the gateway's data directory, that holds
// the embedded member's data (its WAL, snapshots and database).
const DirName = "etcd"

// Defaults used for the zero values of Options.
const (
	// DefaultClientListen serves the gateway's own client only.
	DefaultClientListen = "http://127.0.0.1:2379"
	// DefaultPeerListen suits a single member; a real cluster lists the
	// gateway's LAN address instead.
	DefaultPeerListen = "http://127.0.0.1:2380"
	// DefaultClusterToken keeps members of different linemq clusters
	// that share a network from joining each other by mistake.
	DefaultClusterToken = "linemq"
	// DefaultQuotaBytes bounds the database file. The registry holds
	// kilobytes to a few megabytes; the quota stops a runaway writer
	// from filling the data partition (etcd then raises a NOSPACE alarm
	// and refuses writes instead).
	DefaultQuotaBytes = 256 << 20
	// DefaultHeartbeat is the leader's heartbeat interval: 2.5 times
	// etcd's 100 ms, because an fsync on an SD card can take tens of
	// milliseconds and the links between gateways may be Wi-Fi.
	DefaultHeartbeat = 250 * time.Millisecond
	// DefaultElectionTimeout is ten heartbeats, as etcd recommends; a
	// leader that is merely slow is not deposed.
	DefaultElectionTimeout = 2500 * time.Millisecond
	// DefaultSnapshotCount triggers a raft snapshot every 10,000 applied
	// entries, which keeps memory and the WAL kept for catch-up small.
	DefaultSnapshotCount = 10000
	// DefaultCompactionRetention compacts the key history every ten
	// minutes. A watcher disconnected for longer re-reads the registry,
	// which it has to be able to do anyway.
	DefaultCompactionRetention = 10 * time.Minute
	// DefaultMaxWALFiles keeps three WAL segments of 64 MiB (etcd keeps
	// five) to spare the card's space; older segments are purged only
	// once a snapshot covers them.
	DefaultMaxWALFiles = 3
	// DefaultMaxSnapFiles keeps three snapshot files.
	DefaultMaxSnapFiles = 3
)

// Options configure one embedded member. The zero value of every field but
// Name and Dir means the default documented on it. Options are read once,
// by Start.
type Options struct {
	// Name is the member's name in the cluster (-etcd-name); required, and
	// unique among the members.
	Name string
	// Dir is the member's data directory; required. A gateway passes
	// filepath.Join(dataDir, DirName). An existing directory restarts the
	// member with its data, and InitialCluster is then ignored.
	Dir string
	// PeerListen is where the member listens for other members
	// (-etcd-peer-listen), a comma-separated list of URLs such as
	// "http://10.0.0.11:2380". Default DefaultPeerListen. The host must be
	// an IP address; port 0 asks the kernel for a free port, which only a
	// single member can use (nobody could list it in InitialCluster).
	PeerListen string
	// ClientListen is where the member serves clients
	// (-etcd-client-listen), a comma-separated list of URLs. Default
	// DefaultClientListen. Port 0 asks for a free port; ClientURLs
	// reports the one chosen.
	ClientListen string
	// AdvertisePeer is the peer URL other members use to reach this one.
	// Default: this member's entry in InitialCluster, else PeerListen.
	AdvertisePeer string
	// AdvertiseClient is the client URL this member publishes to clients
	// that synchronise their endpoints. Default ClientListen.
	AdvertiseClient string
	// InitialCluster lists every member of a new cluster as
	// "name=peerURL,..." (-etcd-initial-cluster). Default: this member
	// alone, a cluster of one.
	InitialCluster string
	// ClusterToken distinguishes clusters that bootstrap on one network.
	// Default DefaultClusterToken.
	ClusterToken string
	// Existing joins a cluster that already runs (after `etcdctl member
	// add` on it) instead of bootstrapping a new one.
	Existing bool

	// TLS, when its Cert is set, makes peer and client traffic mutual
	// TLS with these files: the certificate serves both to accept and to
	// dial (server and client authentication, naming the member's IP
	// addresses), and the CA verifies other members and clients, which
	// must present a certificate. Every URL must then be https://.
	TLS certs.Files

	// QuotaBytes bounds the database size. Default DefaultQuotaBytes.
	QuotaBytes int64
	// Heartbeat is the leader's heartbeat interval, a multiple of a
	// millisecond. Default DefaultHeartbeat.
	Heartbeat time.Duration
	// ElectionTimeout is how long a follower waits without a heartbeat
	// before it calls an election; at least five heartbeats. Default
	// DefaultElectionTimeout. Every member of a cluster should use the
	// same value.
	ElectionTimeout time.Duration
	// SnapshotCount is the number of applied entries between raft
	// snapshots. Default DefaultSnapshotCount.
	SnapshotCount uint64
	// CompactionRetention is the period of automatic compaction (etcd's
	// periodic mode). Default DefaultCompactionRetention; negative
	// disables it.
	CompactionRetention time.Duration
	// MaxWALFiles is the number of WAL segments kept. Default
	// DefaultMaxWALFiles.
	MaxWALFiles uint

	// UnsafeNoFsync skips fsync. THIS LOSES DATA ON POWER LOSS: tests
	// only.
	UnsafeNoFsync bool
	// Logger receives etcd's logs at the levels it enables; nil discards
	// them.
	Logger *slog.Logger
}

// config turns Options into etcd's own configuration, defaults filled in.
func (o Options) config() (*embed.Config, error) {
	if o.Name == "" {
		return nil, errors.New("etcdembed: a member name is required")
	}
	if o.Dir == "" {
		return nil, errors.New("etcdembed: a data directory is required")
	}
	cfg := embed.NewConfig()
	cfg.Name = o.Name
	cfg.Dir = o.Dir

	scheme := "http"
	if o.TLS.Cert != "" {
		if o.TLS.Key == "" || o.TLS.CA == "" {
			return nil, errors.New("etcdembed: TLS needs a certificate, its key and a CA file")
		}
		scheme = "https"
		info := transport.TLSInfo{
			CertFile: o.TLS.Cert, KeyFile: o.TLS.Key, TrustedCAFile: o.TLS.CA,
			CRLFile: o.TLS.CRL, ClientCertAuth: true,
		}
		cfg.PeerTLSInfo, cfg.ClientTLSInfo = info, info
	}
	parseURLs := func(what, list string) ([]url.URL, error) { return parseURLs(what, list, scheme) }

	var err error
	peerListen := or(o.PeerListen, defaultURL(DefaultPeerListen, scheme))
	if cfg.ListenPeerUrls, err = parseURLs("peer listen", peerListen); err != nil {
		return nil, err
	}
	clientListen := or(o.ClientListen, defaultURL(DefaultClientListen, scheme))
	if cfg.ListenClientUrls, err = parseURLs("client listen", clientListen); err != nil {
		return nil, err
	}

	initial := o.InitialCluster
	advPeer := o.AdvertisePeer
	if advPeer == "" && initial != "" {
		if advPeer, err = memberURLs(initial, o.Name); err != nil {
			return nil, err
		}
	}
	if advPeer == "" {
		advPeer = peerListen
	}
	if cfg.AdvertisePeerUrls, err = parseURLs("advertised peer", advPeer); err != nil {
		return nil, err
	}
	if err := advertisable("advertised peer", cfg.AdvertisePeerUrls); err != nil {
		return nil, err
	}
	if cfg.AdvertiseClientUrls, err = parseURLs("advertised client", or(o.AdvertiseClient, clientListen)); err != nil {
		return nil, err
	}
	if initial == "" {
		initial = cfg.InitialClusterFromName(o.Name)
	} else if _, err := memberURLs(initial, o.Name); err != nil {
		return nil, err
	}
	cfg.InitialCluster = initial
	cfg.InitialClusterToken = or(o.ClusterToken, DefaultClusterToken)
	if o.Existing {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	} else {
		cfg.ClusterState = embed.ClusterStateFlagNew
	}

	cfg.QuotaBackendBytes = orInt(o.QuotaBytes, DefaultQuotaBytes)
	heartbeat := orInt(o.Heartbeat, DefaultHeartbeat)
	election := orInt(o.ElectionTimeout, DefaultElectionTimeout)
	if heartbeat < time.Millisecond || election < 5*heartbeat {
		return nil, fmt.Errorf("etcdembed: election timeout %v must be at least five heartbeats of %v (and a heartbeat at least 1ms)", election, heartbeat)
	}
	cfg.TickMs = uint(heartbeat / time.Millisecond)
	cfg.ElectionMs = uint(election / time.Millisecond)
	cfg.SnapshotCount = orInt(o.SnapshotCount, DefaultSnapshotCount)
	cfg.MaxWalFiles = orInt(o.MaxWALFiles, DefaultMaxWALFiles)
	cfg.MaxSnapFiles = DefaultMaxSnapFiles
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	switch retention := orInt(o.CompactionRetention, DefaultCompactionRetention); {
	case retention < 0:
		cfg.AutoCompactionRetention = "0"
	default:
		cfg.AutoCompactionRetention = retention.String()
	}
	cfg.UnsafeNoFsync = o.UnsafeNoFsync
	// Nothing of ours speaks etcd's JSON gateway; not serving it is one
	// fewer HTTP surface on a plant network.
	cfg.EnableGRPCGateway = false
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zaplog.New(o.Logger, "etcd"))
	return cfg, nil
}

// Member is a running embedded etcd member, made by Start. Its methods may
// be called concurrently.
type Member struct {
	etcd      *embed.Etcd
	scheme    string // of its URLs: "http://" or "https://"
	closeOnce sync.Once

	stopWatch chan struct{} // ends streamWatch
	watchDone chan struct{} // closed once it has
}

// Start starts a member and returns once it listens; it does not wait for
// the cluster to form (see Member.Ready). On error nothing is left running.
func Start(o Options) (*Member, error) {
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	e, err := embed.StartEtcd(cfg) // closes what it opened when it fails
	if err != nil {
		return nil, fmt.Errorf("etcdembed: start member %q: %w", o.Name, err)
	}
	m := &Member{etcd: e, scheme: "http://", stopWatch: make(chan struct{}), watchDone: make(chan struct{})}
	if o.TLS.Cert != "" {
		m.scheme = "https://"
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	go func() {
		defer close(m.watchDone)
		m.streamWatch(orInt(o.ElectionTimeout, DefaultElectionTimeout), log, m.stopWatch)
	}()
	return m, nil
}

// Ready is closed once the member has joined a cluster with a leader and
// serves clients.
func (m *Member) Ready() <-chan struct{} { return m.etcd.Server.ReadyNotify() }

// WaitReady waits until the member is ready, it fails, or ctx ends.
func (m *Member) WaitReady(ctx context.Context) error {
	select {
	case <-m.Ready():
		return nil
	case err, ok := <-m.etcd.Err():
		if !ok {
			return errors.New("etcdembed: member stopped before it was ready")
		}
		return fmt.Errorf("etcdembed: member failed before it was ready: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("etcdembed: waiting for the cluster: %w", ctx.Err())
	}
}

// Err reports a failure of the running member (a listener or server
// goroutine); it is closed once the member has stopped.
func (m *Member) Err() <-chan error { return m.etcd.Err() }

// ClientURLs returns the URLs the member serves clients on, with the ports
// actually bound (port 0 resolved).
func (m *Member) ClientURLs() []string {
	out := make([]string, 0, len(m.etcd.Clients))
	for _, l := range m.etcd.Clients {
		out = append(out, m.scheme+l.Addr().String())
	}
	return out
}

// PeerURLs returns the URLs the member listens on for other members, with
// the ports actually bound.
func (m *Member) PeerURLs() []string {
	out := make([]string, 0, len(m.etcd.Peers))
	for _, l := range m.etcd.Peers {
		out = append(out, m.scheme+l.Addr().String())
	}
	return out
}

// IsLeader reports whether this member is the cluster's raft leader at the
// moment of the call.
func (m *Member) IsLeader() bool {
	return m.etcd.Server.Leader() == m.etcd.Server.MemberID()
}

// CloseTimeout bounds how long Close waits for the member to stop
// gracefully (a leader hands its leadership to a member still running,
// clients' requests finish) before it stops the member outright. etcd's
// own bound is its request timeout, 10 s with the gateway's election
// timeout: a whole line stopping together would wait that long for a
// transfer to members already gone, past the 5 s a service manager gives.
const CloseTimeout = 1500 * time.Millisecond

// Close stops the member, gracefully within CloseTimeout and outright
// after it. It is safe to call more than once. Clients still connected
// delay it, so close the gateway's own clients first.
func (m *Member) Close() {
	m.closeOnce.Do(func() {
		close(m.stopWatch)
		<-m.watchDone
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.etcd.Close()
		}()
		select {
		case <-done:
			return
		case <-time.After(CloseTimeout):
		}
		// Stopping the server ends a leadership transfer still waiting
		// (its context ends with the server), and the rest of Close
		// goes on from there.
		m.etcd.Server.HardStop()
		for _, l := range m.etcd.Clients {
			l.Close() // connections of other gateways' clients
		}
		<-done
	})
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orInt[T int64 | uint64 | uint | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// defaultURL is a default URL with the scheme in use.
func defaultURL(u, scheme string) string {
	return scheme + strings.TrimPrefix(u, "http")
}

func parseURLs(what, list, scheme string) ([]url.URL, error) {
	var out []url.URL
	for s := range strings.SplitSeq(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("etcdembed: %s URL %q: %w", what, s, err)
		}
		if u.Scheme != scheme {
			why := "without TLS"
			if scheme == "https" {
				why = "with TLS"
			}
			return nil, fmt.Errorf("etcdembed: %s URL %q: %s the scheme is %s://", what, s, why, scheme)
		}
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return nil, fmt.Errorf("etcdembed: %s URL %q needs host:port: %w", what, s, err)
		}
		out = append(out, *u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("etcdembed: no %s URL", what)
	}
	return out, nil
}

// advertisable refuses a wildcard host: other members could not dial it.
func advertisable(what string, urls []url.URL) error {
	for _, u := range urls {
		host, _, _ := net.SplitHostPort(u.Host)
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			return fmt.Errorf("etcdembed: %s URL %q is a wildcard address; list this member in the initial cluster or set its advertised URL", what, u.String())
		}
	}
	return nil
}

// memberURLs returns the peer URLs listed for name in an initial-cluster
// string ("a=http://h1:2380,b=http://h2:2380"; a name may appear more than
// once for several URLs), and checks the string's shape.
func memberURLs(initial, name string) (string, error) {
	var urls []string
	for entry := range strings.SplitSeq(initial, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		n, u, ok := strings.Cut(entry, "=")
		if !ok || n == "" || u == "" {
			return "", fmt.Errorf("etcdembed: initial cluster entry %q is not name=URL", entry)
		}
		if n == name {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return "", fmt.Errorf("etcdembed: initial cluster %q does not list member %q", initial, name)
	}
	return strings.Join(urls, ","), nil
}
