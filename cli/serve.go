package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"ferry/server"
)

func init() {
	register("serve", "serve an OpenAI-shaped video API (POST /v1/videos) that keeps models resident between jobs", runServe)
}

// serveFlags are ferry serve's flags.
type serveFlags struct {
	listen, dataDir, apiKey string
	deviceMem, hostMem      sizeFlag
	promptCache             sizeFlag
	models, loras           listFlag
	maxQueue                int
	keepAlive               keepAliveFlag
	outputTTL               time.Duration
	nats                    natsFlags // --nats, --role: see serve_nats.go
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// keepAliveFlag is a duration where -1 means forever.
type keepAliveFlag struct{ d time.Duration }

func (k *keepAliveFlag) String() string {
	if k.d < 0 {
		return "-1"
	}
	return k.d.String()
}

func (k *keepAliveFlag) Set(v string) error {
	if v == "-1" {
		k.d = -1
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return errors.New("want a duration (5m, 30s, 0) or -1 for forever")
	}
	k.d = d
	return nil
}

func (f *serveFlags) define(e *env) *flag.FlagSet {
	fs := newFlags(e, "serve", "--data-dir DIR --models DIR [flags]")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to listen on; one that is not loopback needs --api-key")
	fs.StringVar(&f.dataDir, "data-dir", "", "folder for the job journal and outputs (created)")
	fs.Var(&f.deviceMem, "device-mem", "device memory budget shared by all jobs and resident models, e.g. 8GiB (default: unlimited)")
	fs.Var(&f.hostMem, "host-mem", "host memory budget, e.g. 16GiB (default: unlimited)")
	fs.Var(&f.models, "models", "a pipeline folder, or a folder of them (repeatable); a model's name is its folder's name")
	fs.Var(&f.loras, "loras", "a folder of LoRA files requests may name in \"lora\" (repeatable; each models folder's loras/ is one too); no other file is read")
	fs.IntVar(&f.maxQueue, "max-queue", 64, "jobs waiting or running at most; past it POST /v1/videos answers 503 (0: no limit)")
	f.keepAlive.d = 5 * time.Minute
	fs.Var(&f.keepAlive, "keep-alive", "how long a model stays resident after a job (0: unload at once, -1: forever)")
	fs.DurationVar(&f.outputTTL, "output-ttl", 24*time.Hour, "delete finished jobs and their outputs after this (0: keep)")
	fs.StringVar(&f.apiKey, "api-key", "", "require Authorization: Bearer KEY (default $FERRY_API_KEY)")
	fs.Var(&f.promptCache, "prompt-cache", "keep the text encoder's output for recent prompts, up to this size (e.g. 256MiB; counted in --host-mem): a job repeating a prompt skips the text encoder (default: off)")
	f.nats.define(fs)
	return fs
}

func runServe(e *env, args []string) error {
	var f serveFlags
	fs := f.define(e)
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if f.apiKey == "" {
		f.apiKey = os.Getenv("FERRY_API_KEY")
	}
	if err := f.check(); err != nil {
		return err
	}
	q, err := f.nats.open(e.ctx, f.dataDir, f.maxQueue, e.stderr)
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{DataDir: f.dataDir, DeviceBytes: f.deviceMem.bytes, HostBytes: f.hostMem.bytes,
		Models: f.models, LoRADirs: f.loras, MaxQueue: f.maxQueue, KeepAlive: f.keepAlive.d, OutputTTL: f.outputTTL, APIKey: f.apiKey,
		Queue: q, NoWorker: f.nats.role == "api", WorkerName: f.nats.workerName(), PromptCacheBytes: f.promptCache.bytes})
	if err != nil {
		if q != nil {
			q.Close()
		}
		return asUser(err)
	}
	noteHardware(srv.Hardware())
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		srv.Close()
		return userf("--listen %s: %v", f.listen, err)
	}
	fmt.Fprintf(e.stderr, "ferry serve: listening on http://%s\n", ln.Addr())
	return serveUntilDone(e.ctx, srv, ln)
}

// check validates the flags: the folders, and no open address without a
// key.
func (f *serveFlags) check() error {
	if f.dataDir == "" {
		return userf("--data-dir DIR is required (the job journal and outputs live there)")
	}
	if len(f.models) == 0 {
		return userf("--models DIR is required (a pipeline folder, or a folder of them; `ferry synth` makes one)")
	}
	for _, d := range f.models {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return userf("--models %s: no such folder", d)
		}
	}
	for _, d := range f.loras {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return userf("--loras %s: no such folder", d)
		}
	}
	if err := f.nats.check(); err != nil {
		return err
	}
	if f.maxQueue < 0 {
		return userf("--max-queue %d: want 0 (no limit) or more", f.maxQueue)
	}
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		return userf("--listen %q: want HOST:PORT (e.g. 127.0.0.1:8080)", f.listen)
	}
	if !isLoopback(host) && f.apiKey == "" {
		return userf("--listen %s is not a loopback address: set --api-key or FERRY_API_KEY so that only clients with the key can submit jobs", f.listen)
	}
	return nil
}

// isLoopback reports whether host only accepts local connections.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serveUntilDone serves until Ctrl-C or SIGTERM, then shuts down: running
// jobs stay in the journal and re-run on the next start.
func serveUntilDone(ctx context.Context, srv *server.Server, ln net.Listener) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	hs := srv.HTTPServer(ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	if cerr := srv.Close(); err == nil || errors.Is(err, http.ErrServerClosed) {
		err = cerr
	}
	return err
}
