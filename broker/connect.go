package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/broker/topic"
)

// errRefused ends a connection whose CONNACK refusing it is already queued.
var errRefused = errors.New("broker: connection refused")

// handleConnect handles the first packet of a connection, which must be
// CONNECT [MQTT-3.1.0-1]: it validates it, authenticates the client, binds
// the connection to a new or existing session and sends CONNACK.
func (c *conn) handleConnect(body []byte) error {
	var p packet.Connect
	if err := p.Decode(body); err != nil {
		if packet.CodeOf(err) == packet.UnsupportedProtocolVersion {
			// Answer in the 3.1.1 form every version can read [MQTT-3.1.2-2].
			c.refuse(packet.V311, packet.UnsupportedProtocolVersion)
			return errRefused
		}
		if len(body) > 6 && body[6] == byte(packet.V5) {
			c.setVersion(packet.V5)
		}
		return err
	}
	c.setVersion(p.Version)
	v5 := c.version >= packet.V5
	if !v5 {
		c.readable = make(chan struct{}, 1) // see pauseWhileHeld
	}
	opts := &c.srv.opts

	if v5 {
		if p.Props.Has(packet.PropReceiveMaximum) {
			c.sendMax = p.Props.ReceiveMaximum
		}
		if p.Props.Has(packet.PropMaximumPacketSize) {
			c.maxOut = p.Props.MaximumPacketSize
		}
		c.aliasMaxOut = p.Props.TopicAliasMaximum
		if p.Props.Has(packet.PropRequestProblemInfo) {
			c.problemInfo = p.Props.RequestProblemInfo == 1
		}
		if p.Props.Has(packet.PropAuthMethod) {
			// Enhanced authentication (AUTH exchanges) is not offered.
			return c.refuse(c.version, packet.BadAuthenticationMethod)
		}
	}

	// Client identifier rules [MQTT-3.1.3-3..9].
	id := string(p.ClientID)
	assigned := false
	if id == "" {
		if !v5 && !p.CleanStart {
			return c.refuse(c.version, packet.ClientIDNotValid) // [MQTT-3.1.3-8]
		}
		id = newClientID()
		assigned = v5 // a 3.1.1 client is never told its id
	} else if len(id) > opts.MaxClientIDLength {
		return c.refuse(c.version, packet.ClientIDNotValid)
	}
	c.clientID = id
	c.info = ClientInfo{ClientID: id, Username: string(p.Username), RemoteAddr: c.nc.RemoteAddr(), Version: c.version}

	// The will is checked now, so a client learns at once that it is unusable.
	if p.WillFlag {
		if err := topic.ValidateName(p.WillTopic); err != nil || c.srv.tooDeep(string(p.WillTopic)) {
			return c.refuse(c.version, packet.TopicNameInvalid)
		}
		if p.WillRetain && opts.DisableRetain {
			return c.refuse(c.version, packet.RetainNotSupported)
		}
		if reservedTopic(opts.ReservedTopics, string(p.WillTopic)) || !opts.Auth.CanPublish(c.info, string(p.WillTopic)) {
			return c.refuse(c.version, packet.NotAuthorized)
		}
		wp := packet.Publish{QoS: p.WillQoS, Retain: p.WillRetain, Payload: p.WillPayload, Props: p.WillProps}
		c.will = &will{
			msg:       newMessage(&wp, p.WillTopic, id, time.Time{}),
			delay:     p.WillProps.WillDelay,
			expiry:    p.WillProps.MessageExpiry,
			hasExpiry: p.WillProps.Has(packet.PropMessageExpiry),
			client:    id,
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), opts.ConnectTimeout)
	rc := opts.Auth.Authenticate(ctx, ConnectRequest{ClientInfo: c.info, Password: p.Password, CleanStart: p.CleanStart})
	cancel()
	if rc != packet.Success {
		return c.refuse(c.version, rc)
	}
	if rc, ok := opts.Auth.(ReadChecker); ok {
		c.readCheck = rc.ReadCheck(c.info)
	}

	// Session expiry: v5 asks; 3.1.1 persistent sessions last forever unless
	// the operator caps them.
	var expiry uint32
	switch {
	case v5:
		expiry = p.Props.SessionExpiry
	case !p.CleanStart:
		expiry = neverExpires
	}
	expiryCapped := false
	if maxExp := opts.MaxSessionExpiry; maxExp > 0 && time.Duration(expiry)*time.Second > maxExp {
		expiry = uint32(maxExp / time.Second)
		expiryCapped = true
	}
	c.expiryIn = expiry

	keepAlive := p.KeepAlive
	serverKeepAlive := false
	if maxKA := uint16(opts.MaxKeepAlive / time.Second); v5 && maxKA > 0 && (keepAlive == 0 || keepAlive > maxKA) {
		keepAlive = maxKA
		serverKeepAlive = true
	}
	c.keepAlive = time.Duration(keepAlive) * time.Second

	connack := func(present bool) []byte {
		ca := packet.Connack{SessionPresent: present}
		if v5 {
			pr := &ca.Props
			pr.Set(packet.PropReceiveMaximum)
			pr.ReceiveMaximum = opts.ReceiveMaximum
			pr.Set(packet.PropMaximumPacketSize)
			pr.MaximumPacketSize = uint32(c.maxIn)
			if opts.TopicAliasMaximum > 0 {
				pr.Set(packet.PropTopicAliasMaximum)
				pr.TopicAliasMaximum = uint16(opts.TopicAliasMaximum)
			}
			pr.Set(packet.PropRetainAvailable)
			pr.RetainAvailable = flag(!opts.DisableRetain)
			pr.Set(packet.PropWildcardSubAvailable)
			pr.WildcardSubAvailable = flag(!opts.DisableWildcardSubs)
			pr.Set(packet.PropSubIDAvailable)
			pr.SubIDAvailable = flag(!opts.DisableSubIDs)
			pr.Set(packet.PropSharedSubAvailable)
			pr.SharedSubAvailable = flag(!opts.DisableSharedSubs)
			if assigned {
				pr.Set(packet.PropAssignedClientID)
				pr.AssignedClientID = []byte(id)
			}
			if serverKeepAlive {
				pr.Set(packet.PropServerKeepAlive)
				pr.ServerKeepAlive = keepAlive
			}
			if expiryCapped {
				pr.Set(packet.PropSessionExpiry)
				pr.SessionExpiry = expiry
			}
		}
		return ca.Append(nil, c.version)
	}
	if c.srv.closed.Load() {
		return c.refuse(c.version, packet.ServerUnavailable)
	}
	if cl := opts.Cluster; cl != nil {
		ctx, cancel := context.WithTimeout(context.Background(), ClusterClaimTimeout)
		var cw *Will
		if c.will != nil {
			cw = c.will.clusterWill(expiry)
		}
		ref, err := cl.Claim(ctx, id, p.CleanStart, cw)
		cancel()
		if c.will != nil {
			c.will.ref = ref
		}
		if err != nil {
			c.srv.logConn("connection refused: session not claimed in the cluster", "client", id, "err", err)
			return c.refuse(c.version, packet.ServerUnavailable)
		}
		if err := c.srv.takeBackHanded(id, p.CleanStart); err != nil {
			c.srv.logConn("connection refused: session not restored", "client", id, "err", err)
			return c.refuse(c.version, packet.ServerUnavailable)
		}
		c.srv.claimed(id)
	}
	// Read before attach: once attached, a connection taking this one
	// over may take its will (attach, under the session's lock).
	w := c.will
	present, rc := c.srv.attach(c, p.CleanStart, expiry, connack)
	if rc != packet.Success {
		return c.refuse(c.version, rc) // a limit: MaxConnections, MaxSessions
	}
	if o := opts.Observer; o != nil && w != nil {
		o.WillSet(c.info, w.msg)
	}
	if ev := opts.Events; ev != nil {
		ev.ClientConnected(c.info, present)
	}
	c.srv.logConn("client connected", "client", id, "addr", addrString(c.info.RemoteAddr), "version", int(c.version),
		"clean", p.CleanStart, "present", present, "keepalive", keepAlive)
	return nil
}

// setVersion records the protocol version; 3.1 is handled as 3.1.1.
func (c *conn) setVersion(v packet.Version) {
	if v == packet.V31 {
		v = packet.V311
	}
	c.wmu.Lock()
	c.version = v
	c.wmu.Unlock()
}

// refuse queues a CONNACK with a failure reason and ends the connection
// [MQTT-3.2.2-6]: no session is created or touched.
func (c *conn) refuse(v packet.Version, rc packet.ReasonCode) error {
	ca := packet.Connack{Reason: rc}
	c.wmu.Lock()
	if !c.closing {
		c.out = ca.Append(c.out, v)
		c.closing, c.linger = true, true
	}
	c.wmu.Unlock()
	c.signal()
	c.srv.logConn("connection refused", "client", c.clientID, "addr", addrString(c.nc.RemoteAddr()), "reason", rc.String())
	return errRefused
}

func flag(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// newClientID makes a client identifier for a client that sent none.
func newClientID() string {
	var b [12]byte
	rand.Read(b[:])
	return "linemq-" + hex.EncodeToString(b[:])
}
