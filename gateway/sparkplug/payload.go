package sparkplug

import (
	"errors"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the Sparkplug B protobuf schema (sparkplug_b.proto)
// that this package reads or writes; the rest are skipped unread.
const (
	fieldTimestamp = 1 // Payload.timestamp, uint64 ms since the epoch
	fieldMetrics   = 2 // Payload.metrics, repeated Metric
	fieldSeq       = 3 // Payload.seq, uint64

	metricName      = 1  // Metric.name, string
	metricTimestamp = 3  // Metric.timestamp, uint64
	metricDatatype  = 4  // Metric.datatype, uint32
	metricInt       = 10 // Metric.int_value, uint32 (Int8..Int32, UInt8..UInt32)
	metricLong      = 11 // Metric.long_value, uint64 (Int64, UInt64, DateTime)
	metricBool      = 14 // Metric.boolean_value
)

// Sparkplug B data types used here.
const (
	typeInt64   = 4
	typeUInt64  = 8
	typeBoolean = 11
)

// bdSeqName is the metric that ties an edge node's NBIRTH to its NDEATH.
const bdSeqName = "bdSeq"

// RebirthMetric is the node control metric that asks an edge node to
// publish its births again.
const RebirthMetric = "Node Control/Rebirth"

// Payload is what this package reads of a Sparkplug B payload.
type Payload struct {
	Timestamp    uint64
	HasTimestamp bool
	Seq          uint64
	HasSeq       bool
	BdSeq        uint64 // the bdSeq metric's value (NBIRTH, NDEATH)
	HasBdSeq     bool
	Metrics      int
}

var errMalformed = errors.New("sparkplug: not a Sparkplug B payload")

// Decode reads p's timestamp, seq and metric count, and the bdSeq metric
// when wantBdSeq (only births and deaths carry it; looking for it in data
// messages would cost a pass over every metric name). It checks that the
// whole payload is well-formed protobuf and allocates nothing.
func Decode(b []byte, wantBdSeq bool) (Payload, error) {
	var p Payload
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return p, errMalformed
		}
		b = b[n:]
		switch {
		case num == fieldTimestamp && typ == protowire.VarintType:
			p.Timestamp, n = protowire.ConsumeVarint(b)
			p.HasTimestamp = true
		case num == fieldSeq && typ == protowire.VarintType:
			p.Seq, n = protowire.ConsumeVarint(b)
			p.HasSeq = true
		case num == fieldMetrics && typ == protowire.BytesType:
			var m []byte
			m, n = protowire.ConsumeBytes(b)
			if n >= 0 {
				p.Metrics++
				if wantBdSeq && !p.HasBdSeq {
					v, ok, err := bdSeqOf(m)
					if err != nil {
						return p, err
					}
					p.BdSeq, p.HasBdSeq = v, ok
				}
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return p, errMalformed
		}
		b = b[n:]
	}
	return p, nil
}

// bdSeqOf reads one Metric and returns its value if it is the bdSeq metric
// (Int64 as the specification's examples and Java Tahu write it, UInt64 as
// the JavaScript client does, in either integer field).
func bdSeqOf(m []byte) (v uint64, ok bool, err error) {
	named := false
	var val uint64
	hasVal := false
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return 0, false, errMalformed
		}
		m = m[n:]
		switch {
		case num == metricName && typ == protowire.BytesType:
			var s []byte
			s, n = protowire.ConsumeBytes(m)
			named = n >= 0 && string(s) == bdSeqName
		case (num == metricLong || num == metricInt) && typ == protowire.VarintType:
			val, n = protowire.ConsumeVarint(m)
			hasVal = true
		default:
			n = protowire.ConsumeFieldValue(num, typ, m)
		}
		if n < 0 {
			return 0, false, errMalformed
		}
		m = m[n:]
	}
	return val, named && hasVal, nil
}

// Append appends p encoded as a Sparkplug B payload: its timestamp and seq
// where set, and a bdSeq metric (Int64) where set. Metrics is not encoded
// (it counts what Decode found). For tools and tests that play an edge
// node.
func (p Payload) Append(b []byte) []byte {
	if p.HasTimestamp {
		b = protowire.AppendTag(b, fieldTimestamp, protowire.VarintType)
		b = protowire.AppendVarint(b, p.Timestamp)
	}
	if p.HasBdSeq {
		b = appendMetric(b, bdSeqName, 0, typeInt64, metricLong, p.BdSeq)
	}
	if p.HasSeq {
		b = protowire.AppendTag(b, fieldSeq, protowire.VarintType)
		b = protowire.AppendVarint(b, p.Seq)
	}
	return b
}

// RebirthCommand encodes an NCMD payload asking an edge node for a rebirth:
// the Node Control/Rebirth metric, Boolean true, stamped with now.
func RebirthCommand(now time.Time) []byte {
	ms := uint64(now.UnixMilli())
	var b []byte
	b = protowire.AppendTag(b, fieldTimestamp, protowire.VarintType)
	b = protowire.AppendVarint(b, ms)
	return appendMetric(b, RebirthMetric, ms, typeBoolean, metricBool, 1)
}

// appendMetric appends to a payload b one metric of a varint value: its
// name, its timestamp when not 0, its datatype, and value in field
// valueField (the one datatype stores its values in).
func appendMetric(b []byte, name string, timestamp, datatype uint64, valueField protowire.Number, value uint64) []byte {
	var m []byte
	m = protowire.AppendTag(m, metricName, protowire.BytesType)
	m = protowire.AppendString(m, name)
	if timestamp != 0 {
		m = protowire.AppendTag(m, metricTimestamp, protowire.VarintType)
		m = protowire.AppendVarint(m, timestamp)
	}
	m = protowire.AppendTag(m, metricDatatype, protowire.VarintType)
	m = protowire.AppendVarint(m, datatype)
	m = protowire.AppendTag(m, valueField, protowire.VarintType)
	m = protowire.AppendVarint(m, value)
	b = protowire.AppendTag(b, fieldMetrics, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}
