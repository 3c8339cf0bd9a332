package packet_test

import (
	"fmt"
	"net"

	"github.com/linemq/linemq/broker/packet"
)

// A connection's read loop: frame every complete packet in what one Read
// returned, decode each into a struct the connection reuses, and keep the
// incomplete tail for the next Read.
func ExampleReadFrame() {
	// Two packets and the first byte of a third.
	buf := []byte{0x30, 0x07, 0x00, 0x03, 'a', '/', 'b', 'h', 'i', 0xC0, 0x00, 0x40}
	var pub packet.Publish
	for {
		h, n, err := packet.ReadFrame(buf, 1<<20)
		if err != nil {
			// Close the connection; in v5 first send a DISCONNECT with packet.CodeOf(err).
			fmt.Println("close:", err)
			return
		}
		if n == 0 || len(buf) < n+h.Remaining {
			break // incomplete: read more
		}
		body := buf[n : n+h.Remaining]
		switch h.Type {
		case packet.PUBLISH:
			if err := pub.Decode(packet.V311, h.Flags, body); err != nil {
				fmt.Println("close:", err)
				return
			}
			fmt.Printf("PUBLISH %s %q\n", pub.Topic, pub.Payload)
		case packet.PINGREQ:
			if packet.DecodeEmpty(body) == nil {
				fmt.Println("PINGREQ")
			}
		}
		buf = buf[n+h.Remaining:]
	}
	fmt.Printf("%d byte left for the next read\n", len(buf))
	// Output:
	// PUBLISH a/b "hi"
	// PINGREQ
	// 1 byte left for the next read
}

// Decode errors carry the reason code the connection is closed with.
func ExampleCodeOf() {
	var ack packet.Ack
	err := ack.Decode(packet.V5, packet.PUBACK, []byte{0x00, 0x00})
	d := packet.Disconnect{Reason: packet.CodeOf(err)}
	fmt.Println(err)
	fmt.Printf("% x\n", d.Append(nil, packet.V5))
	// Output:
	// packet: packet identifier 0
	// e0 01 81
}

// Fanning one message out: each subscriber gets its own small header (its
// packet identifier and QoS), and every header shares the payload in one
// writev.
func ExamplePublish_AppendHeader() {
	msg := packet.Publish{Topic: []byte("a/b"), Payload: []byte("a large shared payload")}
	buf := make([]byte, 0, 256) // one pooled buffer for all headers
	var out net.Buffers
	for id := uint16(1); id <= 2; id++ {
		sub := msg // copies the header fields; Payload still points at the shared bytes
		sub.QoS, sub.PacketID = 1, id
		start := len(buf)
		buf = sub.AppendHeader(buf, packet.V311)
		out = append(out, buf[start:len(buf):len(buf)], msg.Payload)
	}
	n := 0
	for _, b := range out {
		n += len(b)
	}
	fmt.Println(len(out), "buffers,", n, "bytes")
	// Output: 4 buffers, 62 bytes
}
