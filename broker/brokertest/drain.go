package brokertest

import (
	"net"
	"sync/atomic"

	"github.com/linemq/linemq/broker/packet"
)

// Drain reads everything from c until it fails, acknowledging QoS 1
// messages (PUBACK) and adding the PUBLISH packets it reads to n: the
// receiving end of a benchmark, which must cost the broker's clients as
// little as it can. It does not decode what it counts.
func Drain(c net.Conn, v packet.Version, n *atomic.Int64) {
	buf := make([]byte, 0, 64<<10)
	tmp := make([]byte, 64<<10)
	var acks []byte
	var p packet.Publish
	for {
		k, err := c.Read(tmp)
		if err != nil {
			return
		}
		buf = append(buf, tmp[:k]...)
		off := 0
		count := int64(0)
		for {
			h, hl, err := packet.ReadFrame(buf[off:], 0)
			if err != nil || hl == 0 || len(buf)-off < hl+h.Remaining {
				break
			}
			if h.Type == packet.PUBLISH {
				count++
				if h.Flags&0x06 != 0 {
					p.Decode(v, h.Flags, buf[off+hl:off+hl+h.Remaining])
					acks = (&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(acks, v)
				}
			}
			off += hl + h.Remaining
		}
		buf = append(buf[:0], buf[off:]...)
		if len(acks) > 0 {
			c.Write(acks)
			acks = acks[:0]
		}
		n.Add(count)
	}
}
