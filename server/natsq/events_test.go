package natsq

import (
	"fmt"
	"testing"
	"time"
)

// TestEventRelay: events one process publishes reach another in order;
// a process does not hear its own.
func TestEventRelay(t *testing.T) {
	url := startServer(t).ClientURL()
	api := connect(t, url, "api", fastConfig())
	worker := connect(t, url, "worker", fastConfig())
	got := make(chan string, 200)
	stop, err := api.SubscribeEvents(func(id, typ string, data []byte) {
		got <- fmt.Sprintf("%s %s %s", id, typ, data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := api.PublishEvent("video_1", "progress", []byte(`{"own":true}`)); err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := range n {
		if err := worker.PublishEvent("video_1", "progress", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	worker.PublishEvent("video_1", "completed", []byte("end"))
	if err := worker.PublishEvent("bad.id", "progress", nil); err == nil {
		t.Fatal("an event for a job id with a dot was published")
	}
	for i := 0; i <= n; i++ {
		want := fmt.Sprintf("video_1 progress %d", i)
		if i == n {
			want = "video_1 completed end"
		}
		select {
		case g := <-got:
			if g != want {
				t.Fatalf("event %d: %q, want %q", i, g, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d never came", i)
		}
	}
	select {
	case g := <-got:
		t.Fatalf("extra event %q (its own echoed back?)", g)
	case <-time.After(100 * time.Millisecond):
	}
}
