package etcdembed

import (
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/linemq/linemq/gateway/certs"
)

func TestConfigDefaultsSuitSDCards(t *testing.T) {
	cfg, err := Options{Name: "gw1", Dir: t.TempDir()}.config()
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"quota", cfg.QuotaBackendBytes, int64(DefaultQuotaBytes)},
		{"heartbeat ms", cfg.TickMs, uint(250)},
		{"election ms", cfg.ElectionMs, uint(2500)},
		{"snapshot count", cfg.SnapshotCount, uint64(DefaultSnapshotCount)},
		{"max WAL files", cfg.MaxWalFiles, uint(DefaultMaxWALFiles)},
		{"compaction mode", cfg.AutoCompactionMode, embed.CompactorModePeriodic},
		{"compaction retention", cfg.AutoCompactionRetention, "10m0s"},
		{"fsync", cfg.UnsafeNoFsync, false},
		{"JSON gateway", cfg.EnableGRPCGateway, false},
		{"cluster state", cfg.ClusterState, embed.ClusterStateFlagNew},
		{"token", cfg.InitialClusterToken, DefaultClusterToken},
		{"initial cluster", cfg.InitialCluster, "gw1=" + DefaultPeerListen},
		{"client listen", cfg.ListenClientUrls[0].String(), DefaultClientListen},
		{"advertised client", cfg.AdvertiseClientUrls[0].String(), DefaultClientListen},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("etcd refuses the defaults: %v", err)
	}
}

func TestConfigAdvertisesInitialClusterEntry(t *testing.T) {
	o := Options{
		Name:           "gw2",
		Dir:            t.TempDir(),
		PeerListen:     "http://0.0.0.0:2380",
		ClientListen:   "http://127.0.0.1:2379,http://10.0.0.12:2379",
		InitialCluster: "gw1=http://10.0.0.11:2380, gw2=http://10.0.0.12:2380 ,gw3=http://10.0.0.13:2380",
		Existing:       true,
	}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.AdvertisePeerUrls[0].String(); got != "http://10.0.0.12:2380" {
		t.Errorf("advertised peer URL %q, want this member's initial-cluster entry", got)
	}
	if len(cfg.ListenClientUrls) != 2 {
		t.Errorf("client listen URLs %v, want both", cfg.ListenClientUrls)
	}
	if cfg.ClusterState != embed.ClusterStateFlagExisting {
		t.Errorf("cluster state %q, want existing", cfg.ClusterState)
	}
}

func TestConfigRefuses(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"no name", Options{Dir: dir}, "name is required"},
		{"no dir", Options{Name: "a"}, "data directory is required"},
		{"wildcard advertised", Options{Name: "a", Dir: dir, PeerListen: "http://0.0.0.0:2380"}, "wildcard"},
		{"not in initial cluster", Options{Name: "a", Dir: dir, InitialCluster: "b=http://10.0.0.2:2380"}, "does not list member"},
		{"bad initial cluster", Options{Name: "a", Dir: dir, InitialCluster: "a=http://10.0.0.1:2380,junk"}, "not name=URL"},
		{"https", Options{Name: "a", Dir: dir, ClientListen: "https://127.0.0.1:2379"}, "without TLS the scheme is http://"},
		{"http with TLS", Options{Name: "a", Dir: dir, ClientListen: "http://127.0.0.1:2379", TLS: certs.Files{Cert: "c", Key: "k", CA: "ca"}}, "with TLS the scheme is https://"},
		{"TLS without a CA", Options{Name: "a", Dir: dir, TLS: certs.Files{Cert: "c", Key: "k"}}, "needs a certificate, its key and a CA file"},
		{"no port", Options{Name: "a", Dir: dir, ClientListen: "http://127.0.0.1"}, "host:port"},
		{"election too short", Options{Name: "a", Dir: dir, Heartbeat: 100 * time.Millisecond, ElectionTimeout: 400 * time.Millisecond}, "five heartbeats"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.o.config()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

func TestConfigCompactionOff(t *testing.T) {
	cfg, err := Options{Name: "a", Dir: t.TempDir(), CompactionRetention: -1}.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AutoCompactionRetention != "0" {
		t.Errorf("retention %q, want 0 (off)", cfg.AutoCompactionRetention)
	}
}
