// Package natstest holds helpers for tests that run an embedded NATS
// server.
package natstest

import (
	"os"
	"testing"
	"time"
)

// StoreDir returns a new folder for a JetStream store that is removed when
// the test ends. Call it before the server starts, so that its removal
// runs after the server's shutdown (cleanups run last-in first-out).
//
// t.TempDir is not enough: nats-server's consumer store waits at most
// 100 ms for its flusher when it stops, so on a busy machine a state file
// can still be written after Shutdown and WaitForShutdown return, and
// TempDir's single RemoveAll then fails with "directory not empty". The
// removal here retries for a few seconds instead.
func StoreDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ferry-nats-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := os.RemoveAll(dir)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("remove the NATS store %s: %v", dir, err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return dir
}
