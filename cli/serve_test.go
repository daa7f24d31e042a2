package cli

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestServeFlagErrors(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	data := t.TempDir()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no data dir", []string{"serve", "--models", model}, "--data-dir DIR is required"},
		{"no models", []string{"serve", "--data-dir", data}, "--models DIR is required"},
		{"missing models", []string{"serve", "--data-dir", data, "--models", filepath.Join(data, "nope")}, "no such folder"},
		{"open without key", []string{"serve", "--data-dir", data, "--models", model, "--listen", "0.0.0.0:0"}, "not a loopback address"},
		{"bad listen", []string{"serve", "--data-dir", data, "--models", model, "--listen", "nowhere"}, "want HOST:PORT"},
		{"missing loras", []string{"serve", "--data-dir", data, "--models", model, "--loras", filepath.Join(data, "nope")}, "--loras"},
		{"bad keep-alive", []string{"serve", "--data-dir", data, "--models", model, "--keep-alive", "-5s"}, "or -1 for forever"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			t.Setenv("FERRY_API_KEY", "")
			code := run(context.Background(), c.args, &out, &errb)
			if code != ExitUsage || !strings.Contains(errb.String(), c.want) || strings.Count(errb.String(), "\n") != 1 {
				t.Fatalf("exit %d, stderr %q; want 2 and %q on one line", code, errb.String(), c.want)
			}
		})
	}
}

// The server starts on loopback, answers /healthz, and stops on cancel.
func TestServeStartsAndStops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() {
		done <- run(ctx, []string{"serve", "--listen", addr, "--data-dir", t.TempDir(), "--models", synthModel(t, "wan-tiny"), "--api-key", "k"}, &bytes.Buffer{}, &errb)
	}()
	ok := false
	for range 200 {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			ok = resp.StatusCode == 200
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !ok {
		cancel()
		t.Fatalf("no /healthz: %s", errb.String())
	}
	resp, err := http.Get("http://" + addr + "/v1/videos")
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the key: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
}
