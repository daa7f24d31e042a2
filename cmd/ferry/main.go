// Command ferry runs diffusion models on machines whose memory is smaller
// than the model, by planning and executing a memory residency schedule.
// See `ferry help`.
//
// FERRY_CPUPROFILE=FILE writes a Go CPU profile of the whole command, for
// developers (`go tool pprof bin/ferry FILE`).
package main

import (
	"fmt"
	"os"
	"runtime/pprof"

	"ferry/cli"
)

func main() {
	if path := os.Getenv("FERRY_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ferry: FERRY_CPUPROFILE: %v\n", err)
			os.Exit(2)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "ferry: FERRY_CPUPROFILE: %v\n", err)
			os.Exit(2)
		}
		code := cli.Main(os.Args[1:], os.Stdout, os.Stderr)
		pprof.StopCPUProfile()
		f.Close()
		os.Exit(code)
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
