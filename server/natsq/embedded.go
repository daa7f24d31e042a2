package natsq

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// EmbeddedOptions configures the NATS server that `ferry serve --nats
// embedded` runs inside its own process.
type EmbeddedOptions struct {
	// StoreDir holds JetStream's files (ferry uses DATA_DIR/nats).
	StoreDir string
	// Listen is the host:port other processes (more workers) dial to join
	// this single-node cluster; port 0 picks a free one. Empty keeps the
	// server in-process only: nothing listens at all.
	Listen string
	// Monitor is the host:port of the HTTP monitoring endpoint (/jsz, which
	// KEDA's JetStream scaler reads). Empty: no monitoring endpoint.
	Monitor string
	// Name names the server in logs and cluster views.
	Name string
}

// Embedded is a NATS server with JetStream running in this process.
type Embedded struct {
	srv *server.Server
}

// maxPayload is the embedded server's largest message.
const maxPayload = 4 << 20

// readyTimeout bounds how long the embedded server may take to start.
const readyTimeout = 10 * time.Second

// StartEmbedded starts a JetStream-enabled NATS server in this process. It
// fsyncs every write (SyncAlways) so a job acknowledged through it is as
// durable as one in ferry's local journal.
func StartEmbedded(o EmbeddedOptions) (*Embedded, error) {
	if o.StoreDir == "" {
		return nil, fmt.Errorf("nats embedded: no store directory (set --data-dir)")
	}
	opts := &server.Options{
		ServerName:             o.Name,
		JetStream:              true,
		StoreDir:               o.StoreDir,
		SyncAlways:             true,
		NoSigs:                 true,
		NoLog:                  true,
		DisableJetStreamBanner: true,
		DontListen:             o.Listen == "",
		// A job's state holds its request (up to the API's 1 MiB body,
		// base64 in JSON): NATS's default 1 MiB message is too small.
		MaxPayload: maxPayload,
	}
	if o.Name == "" {
		opts.ServerName = "ferry"
	}
	if o.Listen != "" {
		host, port, err := splitHostPort(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("nats embedded: listen address: %w", err)
		}
		if err := checkFree(o.Listen); err != nil {
			return nil, err
		}
		opts.Host, opts.Port = host, port
	}
	if o.Monitor != "" {
		host, port, err := splitHostPort(o.Monitor)
		if err != nil {
			return nil, fmt.Errorf("nats embedded: monitor address: %w", err)
		}
		if err := checkFree(o.Monitor); err != nil {
			return nil, err
		}
		opts.HTTPHost, opts.HTTPPort = host, port
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats embedded: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		return nil, fmt.Errorf("nats embedded: server not ready after %s (is %q free?)", readyTimeout, o.Listen)
	}
	return &Embedded{srv: srv}, nil
}

// checkFree fails at once when addr is taken; nats-server itself would
// only fail to become ready.
func checkFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("nats embedded: cannot listen on %s: %w (choose another address)", addr, err)
	}
	return l.Close()
}

// splitHostPort parses host:port; port 0 becomes nats-server's "random
// free port" (-1), since nats-server reads 0 as its default 4222.
func splitHostPort(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port must be a number from 0 to 65535", addr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// Connect opens a client connection to the server without a socket.
func (e *Embedded) Connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect("", nats.InProcessServer(e.srv), nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("nats embedded: connect: %w", err)
	}
	return nc, nil
}

// ClientURL is the nats:// URL other processes dial, "" when the server
// does not listen.
func (e *Embedded) ClientURL() string {
	a := e.srv.Addr()
	if a == nil {
		return ""
	}
	return "nats://" + a.String()
}

// MonitorAddr is the monitoring endpoint's host:port, "" when off.
func (e *Embedded) MonitorAddr() string {
	if a := e.srv.MonitorAddr(); a != nil {
		return a.String()
	}
	return ""
}

// Shutdown stops the server and waits for it to finish.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
