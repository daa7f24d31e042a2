package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// readmePath is the repository's README, two levels above this package's
// directory when tests run.
var readmePath = filepath.Join("..", "README.md")

// codeBlock is one fenced block of a Markdown file.
type codeBlock struct {
	lang  string // the fence's info string: "sh", "yaml", ...
	line  int    // 1-based line of the opening fence
	lines []string
}

// codeBlocks returns the fenced blocks of md in order.
func codeBlocks(md string) []codeBlock {
	var blocks []codeBlock
	var cur *codeBlock
	for i, l := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(l)
		if !strings.HasPrefix(trimmed, "```") {
			if cur != nil {
				cur.lines = append(cur.lines, l)
			}
			continue
		}
		if cur == nil {
			cur = &codeBlock{lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), line: i + 1}
			continue
		}
		blocks = append(blocks, *cur)
		cur = nil
	}
	return blocks
}

// isShell says whether a fence's info string is a shell.
func isShell(lang string) bool {
	switch lang {
	case "sh", "bash", "shell":
		return true
	}
	return false
}

// shellCommand is one logical line of a shell block: continuations joined.
type shellCommand struct {
	line int // 1-based line in the file where it starts
	text string
}

// shellCommands joins a block's lines into logical lines as sh reads them:
// a trailing backslash continues the line, and so does an open quote.
func shellCommands(b codeBlock) []shellCommand {
	var out []shellCommand
	var cur strings.Builder
	start := 0
	for i, l := range b.lines {
		if cur.Len() == 0 {
			start = b.line + 1 + i
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\"))
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(l)
		if quoteOpen(cur.String()) {
			cur.WriteByte('\n')
			continue
		}
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, shellCommand{line: start, text: s})
		}
		cur.Reset()
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, shellCommand{line: start, text: s})
	}
	return out
}

// quoteOpen says whether s ends inside a quoted string (outside a comment).
func quoteOpen(s string) bool {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == 0 && c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return false
		case quote != '\'' && c == '\\':
			i++
		case quote == 0 && (c == '\'' || c == '"'):
			quote = c
		case c == quote:
			quote = 0
		}
	}
	return quote != 0
}

// shellWords splits a command line as sh would for a simple command:
// quotes and backslashes, a comment from an unquoted #, and the command
// ending at an unquoted |, &, ;, < or >.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inWord:
			flush()
			return words, nil
		case strings.IndexByte("|&;<>", c) >= 0:
			flush()
			return words, nil
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) && strings.IndexByte("\"\\$`", s[j+1]) >= 0 {
					j++
				}
				w.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
			i = j
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return words, nil
}

// ferryArgs returns the arguments after the ferry binary when words run
// ferry (ferry, bin/ferry or ./bin/ferry, after any VAR=value words), and
// false for any other command.
func ferryArgs(words []string) ([]string, bool) {
	for len(words) > 0 && isAssignment(words[0]) {
		words = words[1:]
	}
	if len(words) == 0 {
		return nil, false
	}
	switch words[0] {
	case "ferry", "bin/ferry", "./bin/ferry":
		return words[1:], true
	}
	return nil, false
}

// isAssignment says whether a word is a shell variable assignment.
func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for i, c := range name {
		letter := c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
		digit := i > 0 && c >= '0' && c <= '9'
		if !letter && !digit {
			return false
		}
	}
	return true
}

// documentedCommand is one ferry command line of a Markdown file.
type documentedCommand struct {
	line int
	text string
	args []string
}

// ferryCommands extracts every ferry command line of md's shell blocks.
func ferryCommands(md string) ([]documentedCommand, error) {
	var out []documentedCommand
	for _, b := range codeBlocks(md) {
		if !isShell(b.lang) {
			continue
		}
		for _, c := range shellCommands(b) {
			words, err := shellWords(c.text)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", c.line, err)
			}
			if args, ok := ferryArgs(words); ok {
				out = append(out, documentedCommand{line: c.line, text: c.text, args: args})
			}
		}
	}
	return out, nil
}

// TestReadmeCommandsParse: every ferry command the README shows names a
// real subcommand and parses with that subcommand's own flags.
func TestReadmeCommandsParse(t *testing.T) {
	md, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatalf("read the README: %v", err)
	}
	cmds, err := ferryCommands(string(md))
	if err != nil {
		t.Fatalf("README: %v", err)
	}
	if len(cmds) == 0 {
		t.Fatal("README: no ferry commands found in its sh blocks")
	}
	seen := map[string]bool{}
	for _, c := range cmds {
		if err := ParseArgs(c.args); err != nil {
			t.Errorf("README.md:%d: %s\n\t%v", c.line, c.text, err)
		}
		if len(c.args) > 0 {
			seen[c.args[0]] = true
		}
	}
	// The README shows a user how to run, plan, train and serve; a rewrite
	// that drops one of them should be deliberate.
	for _, want := range []string{"generate", "plan", "cache", "train", "serve"} {
		if !seen[want] {
			t.Errorf("README shows no `ferry %s` command", want)
		}
	}
}

// TestReadmeOpensWithTheTwoCommands: CI runs `make test` from the README's
// first code block, which must be exactly `make demo` and `make test`.
func TestReadmeOpensWithTheTwoCommands(t *testing.T) {
	md, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatalf("read the README: %v", err)
	}
	blocks := codeBlocks(string(md))
	if len(blocks) == 0 {
		t.Fatal("README has no code block")
	}
	first := blocks[0]
	var got [][]string
	for _, c := range shellCommands(first) {
		words, err := shellWords(c.text)
		if err != nil {
			t.Fatalf("README.md:%d: %v", c.line, err)
		}
		got = append(got, words)
	}
	want := [][]string{{"make", "demo"}, {"make", "test"}}
	if !isShell(first.lang) || !reflect.DeepEqual(got, want) {
		t.Errorf("README.md:%d: first code block is %q with commands %q, want sh with %q", first.line, first.lang, got, want)
	}
}

// TestReadmeExtraction checks the extractor on lines like the README's, so
// that a broken extractor cannot pass the README by finding nothing.
func TestReadmeExtraction(t *testing.T) {
	md := strings.Join([]string{
		"text `ferry generate --nope` outside a block is not a command",
		"```sh",
		"bin/ferry generate --model m --prompt \"a \\\"cat\\\" # not a comment\" \\",
		"    --height 256 --out a.mp4   # a comment",
		"ID=$(curl -s localhost:8080/v1/videos -d '{\"model\":\"m\",",
		"   \"prompt\":\"p\"}' | jq -r .id)   # a quote spans two lines",
		"curl -sN localhost:8080/v1/videos/$ID/events",
		"FERRY_GEMM=go ferry serve --data-dir d --models m &",
		"go run ./tools/plansweep --model m",
		"```",
		"```yaml",
		"ferry: not a command",
		"```",
	}, "\n")
	cmds, err := ferryCommands(md)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"generate", "--model", "m", "--prompt", "a \"cat\" # not a comment", "--height", "256", "--out", "a.mp4"},
		{"serve", "--data-dir", "d", "--models", "m"},
	}
	var got [][]string
	for _, c := range cmds {
		got = append(got, c.args)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("extracted %q, want %q", got, want)
	}
	if cmds[0].line != 3 {
		t.Errorf("first command at line %d, want 3", cmds[0].line)
	}
}

// TestReadmeParseArgs: the hook accepts real flags without running the command
// and rejects unknown flags, bad values and unknown commands.
func TestReadmeParseArgs(t *testing.T) {
	out := filepath.Join(t.TempDir(), "never-written")
	if err := ParseArgs([]string{"synth", "--arch", "wan-tiny", "--out", out}); err != nil {
		t.Errorf("synth with real flags: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("ParseArgs ran synth: %s exists (stat: %v)", out, err)
	}
	for _, args := range [][]string{
		{"generate", "--no-such-flag"},
		{"plan", "--device-mem", "lots"},
		{"train", "--steps", "x"},
		{"generate", "stray-argument"},
		{"no-such-command"},
		{},
	} {
		if err := ParseArgs(args); err == nil {
			t.Errorf("ParseArgs(%q) = nil, want an error", args)
		}
	}
}

// flagNames lists the flags an argument list gives, without dashes or values.
func flagNames(args []string) []string {
	var names []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			names = append(names, name)
		}
	}
	return names
}

// TestHelpExamplesMatchReadme: every command's -h shows examples; each
// parses with the command's flags, and uses only flags that one of the
// README's commands for the same subcommand uses, so the two say the same.
func TestHelpExamplesMatchReadme(t *testing.T) {
	md, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatalf("read the README: %v", err)
	}
	readme, err := ferryCommands(string(md))
	if err != nil {
		t.Fatalf("README: %v", err)
	}
	for _, name := range commandNames() {
		if len(examples[name]) == 0 {
			t.Errorf("ferry %s -h shows no example", name)
			continue
		}
		_, stdout, _ := ferry(t, name, "-h")
		for _, ex := range examples[name] {
			if !strings.Contains(stdout, ex) {
				t.Errorf("ferry %s -h does not show its example %q", name, ex)
			}
			words, err := shellWords(ex)
			if err != nil {
				t.Fatalf("example %q: %v", ex, err)
			}
			args, ok := ferryArgs(words)
			if !ok || len(args) == 0 || args[0] != name {
				t.Errorf("ferry %s -h: example %q is not a ferry %s command", name, ex, name)
				continue
			}
			if err := ParseArgs(args); err != nil {
				t.Errorf("ferry %s -h: example %q: %v", name, ex, err)
			}
			if !readmeHasFlags(readme, name, flagNames(args[1:])) {
				t.Errorf("ferry %s -h: example %q uses flags %q that no README `ferry %s` command shows together", name, ex, flagNames(args[1:]), name)
			}
		}
	}
	_, top, _ := ferry(t, "--help")
	for _, name := range startExamples {
		if !strings.Contains(top, examples[name][0]) {
			t.Errorf("ferry --help does not show %q", examples[name][0])
		}
	}
}

// readmeHasFlags says whether one README command of subcommand name gives
// every flag in want.
func readmeHasFlags(readme []documentedCommand, name string, want []string) bool {
	for _, c := range readme {
		if len(c.args) == 0 || c.args[0] != name {
			continue
		}
		have := map[string]bool{}
		for _, f := range flagNames(c.args[1:]) {
			have[f] = true
		}
		all := true
		for _, f := range want {
			all = all && have[f]
		}
		if all {
			return true
		}
	}
	return false
}

// TestReadmeDocsCommandsParse: the ferry commands in docs/*.md (not the sweeps,
// which record the commands as they were run) parse as the README's do.
func TestReadmeDocsCommandsParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs/*.md found (glob error %v)", err)
	}
	for _, f := range files {
		md, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cmds, err := ferryCommands(string(md))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, c := range cmds {
			if err := ParseArgs(c.args); err != nil {
				t.Errorf("%s:%d: %s\n\t%v", f, c.line, c.text, err)
			}
		}
	}
}
