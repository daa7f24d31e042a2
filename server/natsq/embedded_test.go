package natsq

import (
	"net"
	"strings"
	"testing"
)

func TestSplitHostPort(t *testing.T) {
	cases := []struct {
		in       string
		host     string
		port     int
		errMatch string
	}{
		{"127.0.0.1:4222", "127.0.0.1", 4222, ""},
		{"127.0.0.1:0", "127.0.0.1", -1, ""}, // nats-server's "any free port"
		{"[::1]:5000", "::1", 5000, ""},
		{"4222", "", 0, "not host:port"},
		{"127.0.0.1:x", "", 0, "port must be a number"},
		{"127.0.0.1:70000", "", 0, "port must be a number"},
	}
	for _, c := range cases {
		host, port, err := splitHostPort(c.in)
		if c.errMatch != "" {
			if err == nil || !strings.Contains(err.Error(), c.errMatch) {
				t.Errorf("%q: err %v, want %q", c.in, err, c.errMatch)
			}
			continue
		}
		if err != nil || host != c.host || port != c.port {
			t.Errorf("%q: %q %d %v, want %q %d", c.in, host, port, err, c.host, c.port)
		}
	}
}

// TestEmbeddedBusyPort: a taken address fails at once with what to do.
func TestEmbeddedBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, o := range []EmbeddedOptions{{StoreDir: t.TempDir(), Listen: l.Addr().String()}, {StoreDir: t.TempDir(), Monitor: l.Addr().String()}} {
		if _, err := StartEmbedded(o); err == nil || !strings.Contains(err.Error(), "choose another address") {
			t.Errorf("%+v: %v, want a clear error", o, err)
		}
	}
	if _, err := StartEmbedded(EmbeddedOptions{}); err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("no store dir: %v", err)
	}
}
