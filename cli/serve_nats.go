package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"ferry/server/natsq"
	"ferry/server/queue"
)

// natsFlags are ferry serve's flags for running on NATS JetStream instead
// of the local journal.
type natsFlags struct {
	nats, listen, monitor, role, worker string
	replicas                            int
}

func (n *natsFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&n.nats, "nats", "", "run the queue on NATS JetStream: 'embedded' (a NATS server inside this process, files under --data-dir) or nats://HOST:4222 (an existing server or cluster; several URLs separated by commas)")
	fs.StringVar(&n.listen, "nats-listen", "", "with --nats embedded: HOST:PORT where other ferry serve processes (--nats nats://HOST:PORT --role worker) join (default: none, in-process only)")
	fs.StringVar(&n.monitor, "nats-monitor", "", "with --nats embedded: HOST:PORT of the NATS monitoring endpoint (/jsz, which KEDA's JetStream scaler reads)")
	fs.StringVar(&n.role, "role", "both", "with --nats: api (accept jobs), worker (run jobs), or both")
	fs.IntVar(&n.replicas, "nats-replicas", 1, "with --nats nats://: copies of the job stream, state bucket and output store in the cluster (3 on a 3-node cluster survives a node)")
	fs.StringVar(&n.worker, "worker-name", "", "with --nats: this worker's name, unique in the cluster and stable across restarts, so a restart settles the jobs it was running (default: HOST-PID)")
}

// check validates the NATS flags.
func (n *natsFlags) check() error {
	switch n.role {
	case "api", "worker", "both":
	default:
		return userf("--role %q: want api, worker or both", n.role)
	}
	if n.replicas < 1 || n.replicas > 5 {
		return userf("--nats-replicas %d: want 1 to 5", n.replicas)
	}
	if n.nats == "" {
		if n.role != "both" || n.listen != "" || n.monitor != "" || n.replicas != 1 {
			return userf("--role, --nats-listen, --nats-monitor and --nats-replicas need --nats (embedded or nats://HOST:4222)")
		}
		return nil
	}
	if n.nats != "embedded" {
		for _, u := range strings.Split(n.nats, ",") {
			if !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
				return userf("--nats %q: want 'embedded' or nats://HOST:4222", n.nats)
			}
		}
		if n.listen != "" || n.monitor != "" {
			return userf("--nats-listen and --nats-monitor only apply to --nats embedded")
		}
	} else if n.replicas != 1 {
		return userf("--nats-replicas %d: the embedded server is a single node; replicas need a cluster (--nats nats://HOST:4222)", n.replicas)
	}
	for _, a := range []struct{ flag, addr string }{{"--nats-listen", n.listen}, {"--nats-monitor", n.monitor}} {
		if a.addr == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a.addr)
		if err != nil {
			return userf("%s %q: want HOST:PORT (e.g. 127.0.0.1:4222)", a.flag, a.addr)
		}
		if !isLoopback(host) {
			return userf("%s %s is not a loopback address: the embedded NATS server has no authentication; run a NATS cluster with its own security for other machines", a.flag, a.addr)
		}
	}
	return nil
}

// workerName is the name this process leases jobs under ("" without
// --nats: the server's default).
func (n *natsFlags) workerName() string {
	if n.nats == "" {
		return ""
	}
	if n.worker != "" {
		return n.worker
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "ferry"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// open returns the NATS queue, nil when --nats is not set.
func (n *natsFlags) open(ctx context.Context, dataDir string, maxQueue int, stderr io.Writer) (queue.Queue, error) {
	if n.nats == "" {
		return nil, nil
	}
	cfg := natsq.Config{MaxQueue: maxQueue, Worker: n.workerName(), Replicas: n.replicas}
	if n.nats != "embedded" {
		q, err := natsq.Connect(ctx, n.nats, "ferry-serve-"+n.role, cfg)
		if err != nil {
			return nil, asUser(err)
		}
		return q, nil
	}
	q, err := natsq.OpenEmbedded(ctx, natsq.EmbeddedOptions{StoreDir: filepath.Join(dataDir, "nats"),
		Listen: n.listen, Monitor: n.monitor}, cfg)
	if err != nil {
		return nil, asUser(err)
	}
	if u := q.Embedded().ClientURL(); u != "" {
		fmt.Fprintf(stderr, "ferry serve: NATS JetStream embedded, workers join with --nats %s --role worker\n", u)
	}
	if a := q.Embedded().MonitorAddr(); a != "" {
		fmt.Fprintf(stderr, "ferry serve: NATS monitoring on http://%s/jsz\n", a)
	}
	return q, nil
}
