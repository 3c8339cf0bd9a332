package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The gRPC service, registered by hand: one bidirectional streaming method
// whose messages are frames in a raw-bytes codec, so there is no .proto
// and no protoc step.
const (
	serviceName = "linemq.peer.v1.Peer"
	methodName  = "/" + serviceName + "/Link"
	codecName   = "linemq-frame"

	mdCluster = "linemq-cluster"
	mdNode    = "linemq-node"
	// mdVersion carries Hello.Version; an older node neither sends nor
	// reads it.
	mdVersion = "linemq-frame-version"
)

// The connection's keep alive: gRPC's HTTP/2 pings. They are the backstop
// that tears down a connection whose peer vanished (a hung process, a
// pulled cable) and unblocks a Send stuck on flow control; the Mesh's own
// pings on the stream detect a hang long before (see Options.PingTimeout).
// 10 s is the shortest client ping interval gRPC allows.
const (
	KeepaliveTime    = 10 * time.Second
	KeepaliveTimeout = 5 * time.Second
)

// maxFrame bounds one frame in both directions: a frame carries at least
// one whole record, and an MQTT message may be up to 256 MiB.
const maxFrame = 256<<20 + 64<<10

// GRPCOptions configure the gRPC transport.
type GRPCOptions struct {
	// TLS, when set, makes every connection mutual TLS: Certificates is
	// this node's certificate (presented both when it dials and when it
	// accepts), RootCAs verifies the nodes it dials and ClientCAs (RootCAs
	// if nil) the nodes that dial it. Client certificates are always
	// required and verified, whatever ClientAuth says.
	//
	// Unless ServerName is set, certificates name their node: a dialer
	// verifies the other end's certificate against the node name it dials
	// (not the address), and an acceptor refuses a dialer whose
	// certificate does not name the node its Hello claims. With
	// ServerName set, every node's certificate carries that one name and
	// any certificate from the CA may claim any node.
	TLS *tls.Config

	// Identity, instead of TLS, supplies the configurations of a node
	// whose certificates may be replaced while it runs.
	Identity Identity
}

// Identity supplies a node's mutual-TLS configurations when its
// certificates may change while it runs (gateway/certs.Mutual):
// ServerConfig once, for every handshake the node accepts, which must
// require and verify client certificates itself; ClientConfig at every
// dial, for the material in force then (the dialler sets ServerName to
// the node it dials when the configuration names none).
type Identity interface {
	ServerConfig() *tls.Config
	ClientConfig() *tls.Config
}

// GRPC is the default Transport: gRPC over TCP (HTTP/2), optionally with
// mutual TLS. Each Dial makes its own connection, so reconnecting is the
// Mesh's decision (with its backoff), never a hidden retry inside gRPC.
type GRPC struct {
	server      credentials.TransportCredentials
	clientTLS   func() *tls.Config // nil: plain TCP
	verifyNames bool

	mu       sync.Mutex
	srv      *grpc.Server
	closed   bool
	handlers sync.WaitGroup // stream handlers; Close waits for them
}

var _ Transport = (*GRPC)(nil)

// NewGRPC makes a gRPC transport.
func NewGRPC(o GRPCOptions) *GRPC {
	g := &GRPC{server: insecure.NewCredentials()}
	switch {
	case o.Identity != nil:
		g.server = credentials.NewTLS(o.Identity.ServerConfig())
		g.clientTLS = o.Identity.ClientConfig
		g.verifyNames = o.Identity.ClientConfig().ServerName == ""
	case o.TLS != nil:
		s := o.TLS.Clone()
		s.ClientAuth = tls.RequireAndVerifyClientCert
		if s.ClientCAs == nil {
			s.ClientCAs = s.RootCAs
		}
		g.server = credentials.NewTLS(s)
		g.clientTLS = o.TLS.Clone
		g.verifyNames = o.TLS.ServerName == ""
	}
	return g
}

// Dial opens a connection and a stream to node at addr and waits for the
// acceptor's Hello.
func (g *GRPC) Dial(ctx context.Context, node, addr string, self Hello) (Stream, Hello, error) {
	creds := insecure.NewCredentials()
	if g.clientTLS != nil {
		cfg := g.clientTLS()
		if cfg.ServerName == "" {
			cfg.ServerName = node // verify who it is, not where it is
		}
		creds = credentials.NewTLS(cfg)
	}
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true,
		}),
		grpc.WithDefaultCallOptions(
			grpc.ForceCodecV2(codec{}),
			grpc.MaxCallRecvMsgSize(maxFrame),
			grpc.MaxCallSendMsgSize(maxFrame),
		),
	)
	if err != nil {
		return nil, Hello{}, err
	}
	// The stream lives until Close, so its context is not ctx; ctx bounds
	// only the handshake, through cancel.
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	fail := func(err error) (Stream, Hello, error) {
		cancel()
		cc.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("peer: dial %s at %s: %w", node, addr, ctx.Err())
		}
		return nil, Hello{}, err
	}
	sctx = metadata.NewOutgoingContext(sctx, helloMD(self))
	cs, err := cc.NewStream(sctx, &serviceDesc.Streams[0], methodName)
	if err != nil {
		return fail(fmt.Errorf("peer: dial %s at %s: %w", node, addr, err))
	}
	md, err := cs.Header()
	if err == nil && len(md.Get(mdNode)) == 0 {
		// No header: the acceptor refused, and the status says why.
		err = cs.RecvMsg(&inFrame{})
		if st, ok := status.FromError(err); ok {
			err = fmt.Errorf("peer: %s at %s refused the stream: %s", node, addr, st.Message())
		}
	}
	if err != nil {
		return fail(err)
	}
	if !stop() {
		return fail(ctx.Err())
	}
	remote := helloFrom(md)
	return &clientStream{cs: cs, cc: cc, cancel: cancel}, remote, nil
}

// helloMD is h as metadata; a zero Version is left out, as an older node
// leaves it out.
func helloMD(h Hello) metadata.MD {
	md := metadata.Pairs(mdCluster, h.Cluster, mdNode, h.Node)
	if h.Version != 0 {
		md.Set(mdVersion, strconv.Itoa(h.Version))
	}
	return md
}

// helloFrom reads a Hello from metadata; a missing or unreadable version
// is 0 (version 1).
func helloFrom(md metadata.MD) Hello {
	v, _ := strconv.Atoi(first(md.Get(mdVersion)))
	return Hello{Cluster: first(md.Get(mdCluster)), Node: first(md.Get(mdNode)), Version: max(v, 0)}
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// Serve accepts streams on l until Close.
func (g *GRPC) Serve(l net.Listener, self Hello, accept Acceptor) error {
	g.mu.Lock()
	if g.closed || g.srv != nil {
		g.mu.Unlock()
		l.Close()
		if g.closed {
			return nil
		}
		return errors.New("peer: transport already serving")
	}
	g.srv = grpc.NewServer(
		grpc.Creds(g.server),
		grpc.ForceServerCodecV2(codec{}),
		grpc.MaxRecvMsgSize(maxFrame),
		grpc.MaxSendMsgSize(maxFrame),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		// Dialers ping every KeepaliveTime even while idle; allow it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveTime / 2, PermitWithoutStream: true}),
	)
	g.srv.RegisterService(&serviceDesc, &grpcService{g: g, self: self, accept: accept})
	srv := g.srv
	g.mu.Unlock()
	if err := srv.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err // ErrServerStopped: Close came before Serve got going
	}
	return nil
}

// Close stops the server: its listener and every connection close, and
// every stream handler has returned when Close does.
func (g *GRPC) Close() error {
	g.mu.Lock()
	g.closed = true
	srv := g.srv
	g.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
	g.handlers.Wait()
	return nil
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Link",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			return srv.(*grpcService).link(ss)
		},
	}},
}

type grpcService struct {
	g      *GRPC
	self   Hello
	accept Acceptor
}

// link is the server side of one stream. gRPC ends a server stream when
// its handler returns and forbids SendMsg after that, so the handler stays
// until the stream is closed and no Send is in progress (as etcd's watch
// server waits for its send loop).
func (s *grpcService) link(ss grpc.ServerStream) error {
	s.g.mu.Lock()
	if s.g.closed {
		s.g.mu.Unlock()
		return status.Error(codes.Unavailable, "peer: shutting down")
	}
	s.g.handlers.Add(1)
	s.g.mu.Unlock()
	defer s.g.handlers.Done()

	ctx := ss.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	remote := helloFrom(md)
	if remote.Node == "" {
		return status.Error(codes.InvalidArgument, "peer: no node name")
	}
	if s.g.verifyNames {
		if err := verifyPeerName(ctx, remote.Node); err != nil {
			return status.Error(codes.PermissionDenied, err.Error())
		}
	}
	st := &serverStream{ss: ss, closing: make(chan struct{})}
	// Hold Send until the Hello is sent: the acceptor's writer may start
	// as soon as accept returns, and the Hello must be the first thing
	// the dialer reads.
	st.sendMu.Lock()
	if err := s.accept(remote, st); err != nil {
		st.ended = true
		st.sendMu.Unlock()
		return status.Error(codes.PermissionDenied, err.Error())
	}
	err := ss.SendHeader(helloMD(s.self))
	st.sendMu.Unlock()
	if err == nil {
		select {
		case <-st.closing:
		case <-ctx.Done():
		}
	}
	st.Close() // so the Mesh sees the stream end if the dialer went away
	st.sendMu.Lock()
	st.ended = true
	st.sendMu.Unlock()
	return err
}

// verifyPeerName checks that the dialer's TLS certificate names node.
func verifyPeerName(ctx context.Context, node string) error {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return errors.New("peer: no peer information")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return errors.New("peer: no client certificate")
	}
	if err := info.State.PeerCertificates[0].VerifyHostname(node); err != nil {
		return fmt.Errorf("peer: certificate does not name node %q: %w", node, err)
	}
	return nil
}

// errStreamClosed is returned by Send and Recv on a closed stream.
var errStreamClosed = errors.New("peer: stream closed")

// serverStream is the acceptor's end of a stream.
type serverStream struct {
	ss      grpc.ServerStream
	closing chan struct{}
	once    sync.Once

	sendMu sync.Mutex // held across SendMsg; guards ended and out
	ended  bool       // the handler is returning: SendMsg is no longer allowed
	out    outFrame

	in inFrame // the reader's
}

func (s *serverStream) Send(frame []byte) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.ended {
		return errStreamClosed
	}
	s.out.b = frame
	err := s.ss.SendMsg(&s.out)
	s.out.b = nil
	return err
}

func (s *serverStream) Recv() ([]byte, error) {
	s.in.release()
	if err := s.ss.RecvMsg(&s.in); err != nil {
		return nil, err
	}
	return s.in.buf.ReadOnlyData(), nil
}

func (s *serverStream) Close() error {
	s.once.Do(func() { close(s.closing) })
	return nil
}

// clientStream is the dialer's end of a stream, with its own connection.
type clientStream struct {
	cs     grpc.ClientStream
	cc     *grpc.ClientConn
	cancel context.CancelFunc
	once   sync.Once
	out    outFrame // the writer's
	in     inFrame  // the reader's
}

func (s *clientStream) Send(frame []byte) error {
	s.out.b = frame
	err := s.cs.SendMsg(&s.out)
	s.out.b = nil
	return err
}

func (s *clientStream) Recv() ([]byte, error) {
	s.in.release()
	if err := s.cs.RecvMsg(&s.in); err != nil {
		return nil, err
	}
	return s.in.buf.ReadOnlyData(), nil
}

func (s *clientStream) Close() error {
	s.once.Do(func() {
		s.cancel()
		s.cc.Close()
	})
	return nil
}

// outFrame and inFrame are what the codec marshals and unmarshals.
type outFrame struct{ b []byte }

type inFrame struct{ buf mem.Buffer }

// release gives the last frame's buffer back to the pool.
func (f *inFrame) release() {
	if f.buf != nil {
		f.buf.Free()
		f.buf = nil
	}
}

// codec is the raw-bytes codec: a frame goes on the wire as it is. Marshal
// copies the frame into a pooled buffer that gRPC frees once written, so the
// writer can reuse its own buffer at once and nothing is allocated per frame
// once the pool is warm. Unmarshal keeps gRPC's buffer (by reference) until
// the reader's next Recv.
type codec struct{}

func (codec) Name() string { return codecName }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*outFrame)
	if !ok {
		return nil, fmt.Errorf("peer: codec cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.Copy(f.b, mem.DefaultBufferPool())}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*inFrame)
	if !ok {
		return fmt.Errorf("peer: codec cannot unmarshal into %T", v)
	}
	f.buf = data.MaterializeToBuffer(mem.DefaultBufferPool())
	return nil
}
