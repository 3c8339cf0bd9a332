package sparkplug

import "testing"

func TestParseTopic(t *testing.T) {
	tests := []struct {
		topic string
		ok    bool
		want  Topic
	}{
		{"spBv1.0/G1/NBIRTH/E1", true, Topic{Kind: NBIRTH, Group: "G1", Edge: "E1"}},
		{"spBv1.0/G1/NDEATH/E1", true, Topic{Kind: NDEATH, Group: "G1", Edge: "E1"}},
		{"spBv1.0/G1/NDATA/E1", true, Topic{Kind: NDATA, Group: "G1", Edge: "E1"}},
		{"spBv1.0/G1/NCMD/E1", true, Topic{Kind: NCMD, Group: "G1", Edge: "E1"}},
		{"spBv1.0/G1/DBIRTH/E1/D1", true, Topic{Kind: DBIRTH, Group: "G1", Edge: "E1", Device: "D1"}},
		{"spBv1.0/G1/DDEATH/E1/D1", true, Topic{Kind: DDEATH, Group: "G1", Edge: "E1", Device: "D1"}},
		{"spBv1.0/G1/DDATA/E1/D1", true, Topic{Kind: DDATA, Group: "G1", Edge: "E1", Device: "D1"}},
		{"spBv1.0/G1/DCMD/E1/D1", true, Topic{Kind: DCMD, Group: "G1", Edge: "E1", Device: "D1"}},
		{"spBv1.0/STATE/scada1", true, Topic{Kind: STATE, Host: "scada1"}},
		{"STATE/scada1", true, Topic{Kind: STATE, Host: "scada1"}},
		{"spBv1.0/G1/NBIRTH/E1/D1", false, Topic{}},  // node message with a device
		{"spBv1.0/G1/DBIRTH/E1", false, Topic{}},     // device message without one
		{"spBv1.0/G1/DDATA/E1/D1/x", false, Topic{}}, // too deep
		{"spBv1.0/G1/NBIRTH/", false, Topic{}},
		{"spBv1.0//NBIRTH/E1", false, Topic{}},
		{"spBv1.0/G1/BIRTH/E1", false, Topic{}},
		{"spBv1.0/G1", false, Topic{}},
		{"spBv1.0/STATE/a/b", false, Topic{}},
		{"STATE/a/b", false, Topic{}},
		{"spAv1.0/G1/NBIRTH/E1", false, Topic{}},
		{"plant/line1/temp", false, Topic{}},
		{"", false, Topic{}},
	}
	for _, tt := range tests {
		got, ok := ParseTopic(tt.topic)
		if ok != tt.ok || got != tt.want {
			t.Errorf("ParseTopic(%q) = %+v, %v; want %+v, %v", tt.topic, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCertificateTopic(t *testing.T) {
	nb, _ := ParseTopic("spBv1.0/G1/NBIRTH/E1")
	db, _ := ParseTopic("spBv1.0/G1/DBIRTH/E1/D1")
	if got := certificateTopic(nb); got != "$sparkplug/certificates/spBv1.0/G1/NBIRTH/E1" {
		t.Errorf("NBIRTH certificate topic %q", got)
	}
	if got := certificateTopic(db); got != "$sparkplug/certificates/spBv1.0/G1/DBIRTH/E1/D1" {
		t.Errorf("DBIRTH certificate topic %q", got)
	}
}

func TestParseTopicAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { ParseTopic("spBv1.0/G1/DDATA/E1/D1") }); n != 0 {
		t.Errorf("ParseTopic allocates %v times", n)
	}
}
