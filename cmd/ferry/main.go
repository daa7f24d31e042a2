// Command ferry runs diffusion models on machines whose memory is smaller
// than the model, by planning and executing a memory residency schedule.
// See `ferry help`.
package main

import (
	"os"

	"ferry/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
