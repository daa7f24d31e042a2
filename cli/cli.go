// Package cli is the ferry command line: subcommands, flags, and the rule
// that a user's mistake is one line saying what is wrong and how to fix it
// (exit 2), while an internal failure exits 1 with its context. Main is
// callable in-process so that tests drive the CLI without building it.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
)

// Exit codes.
const (
	ExitOK        = 0
	ExitInternal  = 1
	ExitUsage     = 2
	ExitInterrupt = 130
)

// UserError is a mistake in the request: exit code 2, no stack, one line.
type UserError struct{ Msg string }

func (e *UserError) Error() string { return e.Msg }

// userf makes a UserError.
func userf(format string, args ...any) error {
	return &UserError{Msg: fmt.Sprintf(format, args...)}
}

// asUser marks err as the user's to fix, keeping its text.
func asUser(err error) error {
	if err == nil {
		return nil
	}
	var u *UserError
	if errors.As(err, &u) {
		return err
	}
	return &UserError{Msg: err.Error()}
}

// env is what a command needs from the process.
type env struct {
	ctx            context.Context
	stdout, stderr io.Writer
	// parseOnly stops the command once its flags parse (ParseArgs).
	parseOnly bool
}

type command struct {
	summary string
	run     func(e *env, args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(e *env, args []string) error) {
	commands[name] = command{summary: summary, run: run}
}

// Main runs one ferry invocation and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) (code int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return run(ctx, args, stdout, stderr)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "ferry: internal error: %v\n", r)
			code = ExitInternal
		}
	}()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return ExitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "ferry: unknown command %q (commands: %s; see ferry help)\n", args[0], strings.Join(commandNames(), ", "))
		return ExitUsage
	}
	err := cmd.run(&env{ctx: ctx, stdout: stdout, stderr: stderr}, args[1:])
	return report(stderr, args[0], err, ctx)
}

// report prints err as one line and picks the exit code.
func report(stderr io.Writer, name string, err error, ctx context.Context) int {
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		msg := "interrupted; nothing was written"
		var im interface{ interruptMessage() string }
		if errors.As(err, &im) {
			msg = im.interruptMessage()
		}
		fmt.Fprintf(stderr, "ferry %s: %s\n", name, msg)
		return ExitInterrupt
	}
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	fmt.Fprintf(stderr, "ferry %s: %s\n", name, msg)
	var u *UserError
	if errors.As(err, &u) {
		return ExitUsage
	}
	return ExitInternal
}

func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// examples are the command lines each command's -h shows, the README's
// own (cli/readme_test.go parses every one with its command's flags).
var examples = map[string][]string{
	"cache":     {`ferry cache --model ~/models/Wan2.1-T2V-1.3B-Diffusers --data clips/ --out cache/ --width 256 --height 256 --frames 17`},
	"calibrate": {`ferry calibrate`},
	"generate": {
		`ferry generate --model ~/models/Wan2.1-T2V-1.3B-Diffusers --prompt "A cat walks on the grass, realistic" --height 480 --width 832 --frames 81 --device-mem 4GiB --host-mem 8GiB --out cat.mp4`,
		`ferry generate --model ~/models/Wan2.1-T2V-1.3B-Diffusers --lora my.safetensors:0.8 --prompt "..." --out e.mp4`,
	},
	"inspect": {`ferry inspect --model wan2.1-t2v-1.3b`},
	"plan": {
		`ferry plan --model wan2.1-t2v-14b --height 480 --width 832 --frames 81 --device-mem 8GiB`,
		`ferry plan --train --arch wan2.1-t2v-1.3b --height 256 --width 256 --frames 17 --batch-size auto --lora-rank 32 --device-mem 4GiB --host-mem 12GiB`,
	},
	"serve": {`ferry serve --listen 127.0.0.1:8080 --data-dir data --models models --device-mem 1GiB --host-mem 4GiB --keep-alive 5m`},
	"synth": {`ferry synth --arch wan-tiny --out models/wan-tiny`},
	"train": {`ferry train --model ~/models/Wan2.1-T2V-1.3B-Diffusers --data cache/ --out my.safetensors --steps 500 --lora-rank 32 --batch-size auto --device-mem 4GiB --host-mem 12GiB`},
}

// startExamples are the commands `ferry help` shows first.
var startExamples = []string{"plan", "generate", "train", "serve"}

func usage(w io.Writer) {
	fmt.Fprintln(w, "ferry runs and fine-tunes video diffusion models (Wan 2.1 and 2.2) on machines")
	fmt.Fprintln(w, "with less memory than the model, under --device-mem and --host-mem budgets.")
	fmt.Fprintln(w, "\nUsage: ferry <command> [flags]   (ferry <command> -h for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nExamples (README.md has more):")
	for _, n := range startExamples {
		fmt.Fprintf(w, "  %s\n", examples[n][0])
	}
}

// newFlags makes a flag set whose errors become UserErrors and whose -h
// prints to stdout.
func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "Usage: ferry %s %s\n", name, synopsis)
		if ex := examples[name]; len(ex) > 0 {
			fmt.Fprintf(e.stdout, "\nExamples:\n  %s\n", strings.Join(ex, "\n  "))
		}
		fmt.Fprint(e.stdout, "\nFlags:\n")
		fs.SetOutput(e.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// errParsedOnly is how parse stops a command started by ParseArgs.
var errParsedOnly = errors.New("flags parsed; command not run")

// ParseArgs parses a ferry command line (command, then flags) with the
// command's own flag set and stops before the command runs. It returns nil
// when the command exists and every flag exists and takes its value, else
// the one-line error ferry would print. Tests use it to keep documented
// command lines valid without running them.
func ParseArgs(args []string) error {
	if len(args) == 0 {
		return userf("no command (commands: %s)", strings.Join(commandNames(), ", "))
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return userf("unknown command %q (commands: %s)", args[0], strings.Join(commandNames(), ", "))
	}
	e := &env{ctx: context.Background(), stdout: io.Discard, stderr: io.Discard, parseOnly: true}
	err := cmd.run(e, args[1:])
	if errors.Is(err, errParsedOnly) {
		return nil
	}
	if err == nil {
		return fmt.Errorf("ferry %s ran without parsing its flags through parse", args[0])
	}
	return err
}

// parse parses args, turning flag errors into one-line user errors. A
// command started by ParseArgs (e.parseOnly) stops here with errParsedOnly.
func (e *env) parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err // Parse has printed the usage already
		}
		return userf("%v (see ferry %s -h)", err, fs.Name())
	}
	if fs.NArg() > 0 {
		return userf("unexpected argument %q (flags start with --; see ferry %s -h)", fs.Arg(0), fs.Name())
	}
	if e.parseOnly {
		return errParsedOnly
	}
	return nil
}
