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

func usage(w io.Writer) {
	fmt.Fprintln(w, "ferry runs diffusion models on machines with less memory than the model.")
	fmt.Fprintln(w, "\nUsage: ferry <command> [flags]   (ferry <command> -h for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}

// newFlags makes a flag set whose errors become UserErrors and whose -h
// prints to stdout.
func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "Usage: ferry %s %s\n\nFlags:\n", name, synopsis)
		fs.SetOutput(e.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parse parses args, turning flag errors into one-line user errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err // Parse has printed the usage already
		}
		return userf("%v (see ferry %s -h)", err, fs.Name())
	}
	if fs.NArg() > 0 {
		return userf("unexpected argument %q (flags start with --; see ferry %s -h)", fs.Arg(0), fs.Name())
	}
	return nil
}
