// Command clockcheck is the host side of the clock steps in
// `make appliance-test` (scripts/appliance/appliance-test.sh): with the
// arm64 linemq running under QEMU, it connects 100 MQTT 5 clients through
// the hostfwd port (half with a session expiry of 60 s, keep alive 5 s),
// leaves two sessions offline (one expiring 20 s after its disconnect,
// one with a message expiring after 8 s and one after 120 s queued), and
// has the guest's wall clock stepped a year forward, then a year back.
// It checks that no client is disconnected and each receives every
// message published across the steps, that the 8 s message expires and
// the 120 s one does not (with its remaining interval), and that the
// 20 s session expires 20 s after its disconnect, neither at the step nor
// never. Then the guest restarts linemq with its clock at 1970 on the
// same data: the stored sessions are neither all expired at once nor kept
// for ever (a 30 s session expires within a minute).
//
// It prints what it saw and exits 1 on the first broken promise. Every
// wait has a deadline.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

var (
	mqttAddr = flag.String("mqtt", "", "the guest's MQTT port on the host")
	ctlAddr  = flag.String("ctl", "", "the guest's test-only control port on the host")
	httpAddr = flag.String("http", "", "the guest's status page port on the host")
	clients  = flag.Int("clients", 100, "clients connected across the steps")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Println("clockcheck: FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("clockcheck: PASS")
}

// client is one connection and what it saw.
type client struct {
	*paho.Client
	id   string
	got  chan *paho.Publish
	lost atomic.Bool // the connection ended without our DISCONNECT
	why  atomic.Value
}

// dial connects id with a new session (Clean Start 1) of expiry seconds.
func dial(id string, expiry uint32, keepAlive uint16) (*client, *paho.Connack, error) {
	return connect(id, expiry, keepAlive, true)
}

// dialResume connects id again with its session (Clean Start 0).
func dialResume(id string) (*client, *paho.Connack, error) {
	return connect(id, 600, 30, false)
}

func connect(id string, expiry uint32, keepAlive uint16, clean bool) (*client, *paho.Connack, error) {
	nc, err := net.DialTimeout("tcp", *mqttAddr, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	c := &client{id: id, got: make(chan *paho.Publish, 64)}
	c.Client = paho.NewClient(paho.ClientConfig{
		Conn: nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(r paho.PublishReceived) (bool, error) {
			select {
			case c.got <- r.Packet:
			default:
			}
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) { c.lost.Store(true); c.why.Store(fmt.Sprintf("DISCONNECT %#x", d.ReasonCode)) },
		OnClientError:      func(err error) { c.lost.Store(true); c.why.Store(err.Error()) },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: id, KeepAlive: keepAlive, CleanStart: clean,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: connect: %w", id, err)
	}
	if ca.ReasonCode != 0 {
		return nil, nil, fmt.Errorf("%s: CONNACK %#x", id, ca.ReasonCode)
	}
	return c, ca, nil
}

func (c *client) sub(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
	return err
}

func (c *client) pub(topic, payload string, expiry uint32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(payload)}
	if expiry > 0 {
		p.Properties = &paho.PublishProperties{MessageExpiry: &expiry}
	}
	_, err := c.Publish(ctx, p)
	return err
}

// control sends one word to the guest's control port.
func control(word string) error {
	nc, err := net.DialTimeout("tcp", *ctlAddr, 5*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	_, err = fmt.Fprintln(nc, word)
	time.Sleep(time.Second) // the guest's nc reads a line, then the next nc listens
	return err
}

// session reports whether the guest's broker holds client id's session.
func session(id string) (bool, error) {
	hc := http.Client{Timeout: 5 * time.Second}
	r, err := hc.Get("http://" + *httpAddr + "/api/v1/clients/" + id)
	if err != nil {
		return false, err
	}
	r.Body.Close()
	switch r.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("/api/v1/clients/%s: %s", id, r.Status)
}

// waitOffline waits until the broker has taken id's DISCONNECT: a message
// published before that could still go out on the connection, and a
// message sent once is delivered whatever its expiry [MQTT-3.3.2-5].
func waitOffline(id string) error {
	hc := http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		r, err := hc.Get("http://" + *httpAddr + "/api/v1/clients/" + id)
		if err == nil {
			var c struct {
				Connected bool `json:"connected"`
			}
			derr := json.NewDecoder(r.Body).Decode(&c)
			r.Body.Close()
			if r.StatusCode == http.StatusOK && derr == nil && !c.Connected {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s still connected 20 s after its DISCONNECT", id)
}

// waitGone waits until id's session is gone, for at most within, and
// returns when.
func waitGone(id string, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		ok, err := session(id)
		if err == nil && !ok {
			return time.Now(), nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("%s's session still there after %v", id, within)
}

func run() error {
	// The connected ones.
	// One after the other: the guest's user-mode network forwards a burst
	// of connections slowly, and a CONNECT timeout here would measure QEMU.
	conns := make([]*client, *clients)
	for i := range conns {
		expiry := uint32(0)
		if i%2 == 0 {
			expiry = 60
		}
		c, _, err := dial(fmt.Sprintf("clk-%d", i), expiry, 5)
		if err == nil {
			err = c.sub("clock/all")
		}
		if err != nil {
			return err
		}
		conns[i] = c
	}
	fmt.Printf("clockcheck: %d clients connected (keep alive 5 s; half with a 60 s session expiry)\n", len(conns))

	// The offline ones.
	ex, _, err := dial("clk-expire", 20, 30)
	if err != nil {
		return err
	}
	if err := ex.sub("clock/x"); err != nil {
		return err
	}
	ex.Disconnect(&paho.Disconnect{})
	expireGone := time.Now()
	if err := waitOffline("clk-expire"); err != nil {
		return err
	}
	q, _, err := dial("clk-queue", 600, 30)
	if err != nil {
		return err
	}
	if err := q.sub("clock/q"); err != nil {
		return err
	}
	q.Disconnect(&paho.Disconnect{})
	if err := waitOffline("clk-queue"); err != nil {
		return err
	}
	pub := conns[1]
	if err := pub.pub("clock/q", "short", 8); err != nil {
		return err
	}
	if err := pub.pub("clock/q", "long", 120); err != nil {
		return err
	}
	published := time.Now()
	fmt.Println("clockcheck: clk-expire offline (session expiry 20 s); clk-queue offline with a message expiring in 8 s and one in 120 s")

	every := func(what string) error {
		if err := pub.pub("clock/all", what, 0); err != nil {
			return err
		}
		deadline := time.After(20 * time.Second)
		for _, c := range conns {
			select {
			case m := <-c.got:
				if string(m.Payload) != what {
					return fmt.Errorf("%s got %q, want %q", c.id, m.Payload, what)
				}
			case <-deadline:
				return fmt.Errorf("%s did not get %q within 20 s", c.id, what)
			}
		}
		return nil
	}
	for _, step := range []string{"stepfwd", "stepback"} {
		if err := control(step); err != nil {
			return err
		}
		time.Sleep(6 * time.Second) // more than a keep-alive interval on the new clock
		if err := every("after " + step); err != nil {
			return err
		}
		fmt.Printf("clockcheck: %s: all %d clients still connected and served\n", step, len(conns))
	}
	if ok, err := session("clk-expire"); err != nil || !ok {
		return fmt.Errorf("clk-expire's session gone at a clock step (%v)", err)
	}

	// The 8 s message has expired; the 120 s one has not.
	if d := time.Until(published.Add(10 * time.Second)); d > 0 {
		time.Sleep(d)
	}
	q, ca, err := dialResume("clk-queue")
	if err != nil {
		return err
	}
	if !ca.SessionPresent {
		return errors.New("clk-queue's session was not present after the steps")
	}
	select {
	case m := <-q.got:
		left := uint32(0)
		if m.Properties != nil && m.Properties.MessageExpiry != nil {
			left = *m.Properties.MessageExpiry
		}
		waited := time.Since(published)
		if string(m.Payload) != "long" {
			return fmt.Errorf("clk-queue got %q first; the 8 s message should have expired", m.Payload)
		}
		if want := 120 - uint32(waited.Seconds()); left > want+2 || left+3 < want {
			return fmt.Errorf("the 120 s message came with %d s left after %v; want about %d", left, waited.Round(time.Second), want)
		}
		fmt.Printf("clockcheck: clk-queue resumed %v after the publish: the 8 s message expired, the 120 s one came with %d s left\n", waited.Round(time.Second), left)
	case <-time.After(10 * time.Second):
		return errors.New("clk-queue got nothing: the 120 s message expired at a clock step")
	}
	select {
	case m := <-q.got:
		return fmt.Errorf("clk-queue got %q as well", m.Payload)
	case <-time.After(time.Second):
	}
	q.Disconnect(&paho.Disconnect{})

	gone, err := waitGone("clk-expire", 40*time.Second)
	if err != nil {
		return err
	}
	after := gone.Sub(expireGone)
	if after < 19*time.Second || after > 30*time.Second {
		return fmt.Errorf("clk-expire's 20 s session ended %v after its disconnect", after.Round(time.Second))
	}
	fmt.Printf("clockcheck: clk-expire's 20 s session ended %v after its disconnect, across both steps\n", after.Round(100*time.Millisecond))
	for _, c := range conns {
		if c.lost.Load() {
			return fmt.Errorf("%s was disconnected: %v", c.id, c.why.Load())
		}
	}
	fmt.Printf("clockcheck: 0 of %d clients disconnected\n", len(conns))

	// The next boot at 1970, on the same data.
	short, _, err := dial("clk-1970", 30, 30)
	if err != nil {
		return err
	}
	short.Disconnect(&paho.Disconnect{})
	if err := waitOffline("clk-1970"); err != nil {
		return err
	}
	for _, c := range conns {
		c.Disconnect(&paho.Disconnect{}) // their sessions stay (half of them)
	}
	if err := control("restart1970"); err != nil {
		return err
	}
	restarted, err := ready(90 * time.Second)
	if err != nil {
		return err
	}
	for _, id := range []string{"clk-0", "clk-1970", "clk-queue"} {
		ok, err := session(id)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s's session expired at a start with the clock at 1970", id)
		}
	}
	gone, err = waitGone("clk-1970", 90*time.Second)
	if err != nil {
		return fmt.Errorf("after a start at 1970: %w", err)
	}
	fmt.Printf("clockcheck: started at 1970 on the stored sessions: none expired at once; clk-1970's 30 s session ended %v after the start\n", gone.Sub(restarted).Round(100*time.Millisecond))
	return nil
}

// ready waits for the guest's /readyz after a restart and returns when it
// answered.
func ready(within time.Duration) (time.Time, error) {
	time.Sleep(2 * time.Second) // the old process's /readyz may still answer
	hc := http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if r, err := hc.Get("http://" + *httpAddr + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("no /readyz within %v of the restart", within)
}
