package etcdembed

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"time"
)

// A member cut off from the others comes back slowly unless it is helped.
//
// etcd's raft traffic travels on long-lived TCP streams. rafthttp means to
// put a 5 s read timeout on them, so that a stream broken by a cut link is
// noticed and dialled again, but the timeout is never applied: its
// transport sets the deprecated http.Transport.Dial beside DialContext,
// and net/http uses DialContext (etcd 3.7.3). Through a cut, the streams
// stay open with the data written into them unacknowledged, and when the
// link comes back they carry data again only at the sender's next
// retransmission, which TCP spaces exponentially: measured, the member of
// a gateway cut off for 8.9 s first heard its leader again 4.3 s after the
// heal, one cut off for 15 s 11.8 s after it. The member has no
// leader all that time (its pre-votes reach the leader, which ignores
// them while its own followers answer it), and the gateway learns nothing
// from etcd: not that its sessions were taken up elsewhere, nor anything
// else.
//
// streamWatch ends that wait. Once this member has had a leader and then
// been without one for an election timeout, it dials each other member's
// peer address every probeEvery; when one answers, the link is back while
// etcd's streams still wait for TCP, and it shuts down every connection of
// this process to or from a member's peer address (never the gateway's
// MQTT or cluster connections), at most once per kickGap. etcd dials anew
// at once, and the member hears its leader within a heartbeat or two.
const (
	probeEvery   = 500 * time.Millisecond
	probeTimeout = 300 * time.Millisecond
)

// peerEndpoints is what shutdownPeerConns matches a connection against.
type peerEndpoints struct {
	listen []*net.TCPAddr // this member's peer listeners (inbound streams)
	remote []*net.TCPAddr // the other members' peer addresses (outbound)
}

// matches reports whether a connection from local to remote is one of
// etcd's peer connections.
func (p peerEndpoints) matches(local, remote *net.TCPAddr) bool {
	for _, a := range p.remote {
		if a.Port == remote.Port && a.IP.Equal(remote.IP) {
			return true
		}
	}
	for _, l := range p.listen {
		if l.Port == local.Port && (l.IP.IsUnspecified() || l.IP.Equal(local.IP)) {
			return true
		}
	}
	return false
}

// streamWatch runs until stop is closed; see the comment above.
func (m *Member) streamWatch(election time.Duration, log *slog.Logger, stop <-chan struct{}) {
	kickGap := 2 * election
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	var hadLeader bool
	var lostAt, kickedAt time.Time
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			if m.etcd.Server.Leader() != 0 {
				hadLeader, lostAt = true, time.Time{}
				continue
			}
			if !hadLeader {
				continue // still forming: nothing of ours is stale
			}
			if lostAt.IsZero() {
				lostAt = now
			}
			if now.Sub(lostAt) < election || now.Sub(kickedAt) < kickGap {
				continue
			}
			eps := m.peerEndpoints()
			answered := reachable(eps.remote)
			if answered == "" {
				continue // still cut off, or the others are down
			}
			kickedAt = now
			n, err := shutdownPeerConns(eps)
			log.Info("etcd: member without a leader reaches another member again; its peer connections are dialled anew",
				"without_leader", now.Sub(lostAt).Round(time.Millisecond), "answered", answered, "connections", n, "err", err)
		}
	}
}

// peerEndpoints reads this member's peer listeners and the other members'
// advertised peer URLs (the member list may have changed since start).
func (m *Member) peerEndpoints() peerEndpoints {
	var eps peerEndpoints
	for _, l := range m.etcd.Peers {
		if a, ok := l.Addr().(*net.TCPAddr); ok {
			eps.listen = append(eps.listen, a)
		}
	}
	self := m.etcd.Server.MemberID()
	for _, mb := range m.etcd.Server.Cluster().Members() {
		if mb.ID == self {
			continue
		}
		for _, raw := range mb.PeerURLs {
			u, err := url.Parse(raw)
			if err != nil {
				continue
			}
			eps.remote = append(eps.remote, resolve(u.Host)...)
		}
	}
	return eps
}

// resolve turns an advertised peer host:port into addresses: an IP
// address as it is, a name through the resolver, bounded by probeTimeout
// (a name that does not resolve while the link is cut gives none).
func resolve(hostport string) []*net.TCPAddr {
	if ap, err := netip.ParseAddrPort(hostport); err == nil {
		return []*net.TCPAddr{net.TCPAddrFromAddrPort(ap)}
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	ips, _ := net.DefaultResolver.LookupIPAddr(ctx, host)
	out := make([]*net.TCPAddr, 0, len(ips))
	for _, ip := range ips {
		out = append(out, &net.TCPAddr{IP: ip.IP, Port: p, Zone: ip.Zone})
	}
	return out
}

// reachable dials each address and returns the first that accepts a TCP
// connection, or "".
func reachable(addrs []*net.TCPAddr) string {
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a.String(), probeTimeout)
		if err == nil {
			c.Close()
			return a.String()
		}
	}
	return ""
}
