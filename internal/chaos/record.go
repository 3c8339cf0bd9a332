package chaos

import (
	"sync"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// Msg identifies one published message: its publisher's tag and sequence
// number, both carried in the payload.
type Msg struct {
	Pub string
	Seq uint64
}

// Publish is what a publisher saw of one PUBLISH it sent.
type Publish struct {
	Msg    Msg
	Node   int               // the node it was sent to
	Sent   time.Time         // when it was written
	Acked  time.Time         // when its PUBACK came; zero if none came
	Reason packet.ReasonCode // the PUBACK's reason, when Acked is set
}

// Delivery is one copy of a message that a subscriber received.
type Delivery struct {
	Msg    Msg
	Kind   string // the subscription kind of the receiving client
	Client string
	Conn   int // index into Record.Conns
	Dup    bool
	At     time.Time
}

// Conn is one MQTT connection a client had accepted (CONNACK 0x00).
type Conn struct {
	Client         string
	Kind           string // subscription kind, or "pub" for a publisher
	Node           int
	Connack        time.Time
	SessionPresent bool
	Closed         time.Time // when it was closed, by either side; zero while open
	How            string    // how it closed ("DISCONNECT 0x8e", "connection closed", "client: ...")
	Abandoned      time.Time // when its client gave up on it and left it open; zero if never
}

// Outage is a span during which a node could not speak to its peers: dead,
// frozen or cut off.
type Outage struct {
	Node     int
	From, To time.Time // To is zero until it ended
	What     FaultKind
}

// MoveResult is the CONNACK that ended a subscriber's move to another node.
type MoveResult struct {
	Client         string
	From, To, Node int // the node left, the node asked for, the node reached
	At             time.Time
	SessionPresent bool
	ExpectPresent  bool // both nodes were healthy: the session must be found
}

// Record is everything the clients saw during a run; the checker's only
// input. It is safe for concurrent use while the run goes on; Snapshot
// copies it for checking.
type Record struct {
	mu         sync.Mutex
	publishes  []Publish
	deliveries []Delivery
	conns      []Conn
	outages    []Outage
	moves      []MoveResult
	refusedCon map[packet.ReasonCode]int // CONNACK refusals by reason
	probes     map[string]int            // routing probes received, by client
}

// NewRecord returns an empty record.
func NewRecord() *Record {
	return &Record{refusedCon: map[packet.ReasonCode]int{}, probes: map[string]int{}}
}

func (r *Record) publish(p Publish) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.publishes = append(r.publishes, p)
	return len(r.publishes) - 1
}

func (r *Record) ack(i int, reason packet.ReasonCode, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.publishes[i].Acked, r.publishes[i].Reason = at, reason
}

func (r *Record) deliver(d Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deliveries = append(r.deliveries, d)
}

func (r *Record) probe(client string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.probes[client]++
}

func (r *Record) probesOf(client string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.probes[client]
}

func (r *Record) open(c Conn) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conns = append(r.conns, c)
	return len(r.conns) - 1
}

// closed records how connection i ended; the first report wins, since a
// client closing a connection then sees its own close as an error.
func (r *Record) closed(i int, how string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns[i].Closed.IsZero() {
		r.conns[i].Closed, r.conns[i].How = at, how
	}
}

func (r *Record) abandoned(i int, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conns[i].Abandoned = at
}

func (r *Record) refusedConnect(code packet.ReasonCode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refusedCon[code]++
}

func (r *Record) moved(m MoveResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.moves = append(r.moves, m)
}

func (r *Record) outageStart(node int, what FaultKind, at time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outages = append(r.outages, Outage{Node: node, From: at, What: what})
	return len(r.outages) - 1
}

func (r *Record) outageEnd(i int, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outages[i].To = at
}

// undelivered counts the acknowledged messages that some delivery unit
// still lacks; the run drains until it is 0 or its deadline passes.
func (r *Record) undelivered(units []Unit) int {
	s := r.Snapshot(time.Now())
	return len(missing(s, units))
}

// Snapshot is a copy of a record, taken at End.
type Snapshot struct {
	Publishes       []Publish
	Deliveries      []Delivery
	Conns           []Conn
	Outages         []Outage
	Moves           []MoveResult
	RefusedConnects map[packet.ReasonCode]int
	End             time.Time // the end of observation
}

// Snapshot copies the record; end is the end of observation (a connection
// still open then was open until at least end).
func (r *Record) Snapshot(end time.Time) Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Snapshot{
		Publishes:       append([]Publish(nil), r.publishes...),
		Deliveries:      append([]Delivery(nil), r.deliveries...),
		Conns:           append([]Conn(nil), r.conns...),
		Outages:         append([]Outage(nil), r.outages...),
		Moves:           append([]MoveResult(nil), r.moves...),
		RefusedConnects: map[packet.ReasonCode]int{},
		End:             end,
	}
	for k, v := range r.refusedCon {
		s.RefusedConnects[k] = v
	}
	return s
}
