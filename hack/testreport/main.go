// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Command testreport runs `go test -json ...` (its arguments; several side by side, separated by a lone ";") and prints, as `go test` without -v would, each
// package's result and what its TestMain said, and the whole output of every failed test; it ends with what did not
// run: the tests skipped and why, and the suites that could not run (a missing prerequisite, a failed build) with their
// reason, then the failed tests with the first line of their first messages. It exits as the first command that
// failed.
//
//	go run ./hack/testreport go test -json -race ./pkg/... ";" go test -json ./test/...
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
)

// event is a line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Output     string
	// Elapsed is the test's or, without Test, the package's time in seconds, on its end event.
	Elapsed float64
}

// cannotRun begins the line a suite prints when a prerequisite is missing (test/framework/testenv.CannotRunPrefix).
const cannotRun = "cannot run: "

const module = "github.com/gardener/gardener-extension-cilium-selfhosted/"

// cpuPrefix begins the line in which a suite says the CPU time it used (test/framework/testenv.CPUPrefix).
const cpuPrefix = "suite CPU: "

// shufflePrefix begins the line in which a test binary run with -shuffle=on says its seed.
const shufflePrefix = "-test.shuffle "

type report struct {
	// output holds the lines of each test (package + " " + test) and of each package outside its tests (package).
	output                       map[string][]string
	skipped, failed, couldNotRun []string
	failedTests                  map[string]bool
	// running are the tests of each package that started and have not ended: when the binary dies (a panic outside
	// the test's goroutine, a timeout, os.Exit) they never do, and their output holds why.
	running     map[string][]string
	buildFailed map[string]bool
	passed      int
	// elapsed is each package's time, from its end event; cpu what the suite said of its CPU time.
	elapsed map[string]float64
	cpu     map[string]string
}

func newReport() *report {
	return &report{output: map[string][]string{}, failedTests: map[string]bool{}, running: map[string][]string{}, buildFailed: map[string]bool{}, elapsed: map[string]float64{}, cpu: map[string]string{}}
}

func main() {
	cmds := commands(os.Args[1:])
	if len(cmds) == 0 {
		fmt.Fprintln(os.Stderr, "usage: testreport go test -json [flags] [packages] [; go test -json ...]")
		os.Exit(2)
	}
	events, wait, err := start(cmds)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if path := os.Getenv("TESTREPORT_JSON"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer f.Close()
		events = io.TeeReader(events, &keepGoing{w: f})
	}
	r := newReport()
	r.read(events, os.Stdout)
	code := wait()
	r.print(os.Stdout)
	if code != 0 {
		os.Exit(code)
	}
}

// commands splits args at each lone ";" into the commands to run side by side.
func commands(args []string) [][]string {
	var cmds [][]string
	var cmd []string
	for _, arg := range append(args, ";") {
		if arg != ";" {
			cmd = append(cmd, arg)
			continue
		}
		if len(cmd) > 0 {
			cmds = append(cmds, cmd)
		}
		cmd = nil
	}
	return cmds
}

// start starts cmds side by side and returns their events, whole lines of each interleaved, and how to wait for them:
// the exit code of the first that failed, else 0.
func start(cmds [][]string) (io.Reader, func() int, error) {
	// A pipe's writes are gated one after the other (io.Pipe): a line is written whole.
	events, w := io.Pipe()
	var readers sync.WaitGroup
	var started []*exec.Cmd
	for _, args := range cmds {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			for _, c := range started {
				_ = c.Process.Kill()
			}
			return nil, nil, err
		}
		started = append(started, cmd)
		readers.Go(func() {
			scanner := bufio.NewScanner(stdout)
			scanner.Buffer(make([]byte, 1<<20), 16<<20)
			for scanner.Scan() {
				_, _ = w.Write(append(scanner.Bytes(), '\n'))
			}
			if err := scanner.Err(); err != nil {
				fmt.Fprintf(os.Stderr, "testreport: reading the events of %s: %v\n", strings.Join(args, " "), err)
			}
			// Whatever stopped the reading, go test must not block on a full pipe.
			_, _ = io.Copy(io.Discard, stdout)
		})
	}
	go func() {
		readers.Wait()
		w.Close()
	}()
	return events, func() int {
		code := 0
		for _, cmd := range started {
			err := cmd.Wait()
			exit, ok := err.(*exec.ExitError)
			switch {
			case ok && code == 0:
				code = exit.ExitCode()
			case err != nil && !ok:
				fmt.Fprintln(os.Stderr, err)
				code = 2
			}
		}
		return code
	}, nil
}

func (r *report) read(in io.Reader, out io.Writer) {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	// Whatever stops the reading, go test must not block on a full pipe.
	defer func() { _, _ = io.Copy(io.Discard, in) }()
	for scanner.Scan() {
		var e event
		if err := json.Unmarshal(scanner.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(out, scanner.Text())
			continue
		}
		pkg := strings.TrimPrefix(e.Package, module)
		if pkg == "" {
			// A build event names the package and the test binary it was for: "pkg [pkg.test]".
			pkg, _, _ = strings.Cut(strings.TrimPrefix(e.ImportPath, module), " ")
		}
		key := pkg
		if e.Test != "" {
			key += " " + e.Test
		}
		if e.Test != "" && e.Action != "run" && e.Action != "output" && e.Action != "pause" && e.Action != "cont" {
			r.running[pkg] = slices.DeleteFunc(r.running[pkg], func(k string) bool { return k == key })
		}
		if e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip") && e.Elapsed > 0 {
			r.elapsed[pkg] = e.Elapsed
		}
		switch e.Action {
		case "run":
			r.running[pkg] = append(r.running[pkg], key)
		case "output", "build-output":
			line := strings.TrimRight(e.Output, "\n")
			r.output[key] = append(r.output[key], line)
			if cpu, ok := strings.CutPrefix(line, cpuPrefix); ok && e.Test == "" {
				r.cpu[pkg] = cpu
				continue
			}
			// The seed of -shuffle matters only to repeat a failure: it is printed with the package's failure.
			if e.Test == "" && line != "PASS" && line != "FAIL" && !strings.HasPrefix(line, "=== ") && !strings.HasPrefix(line, shufflePrefix) {
				fmt.Fprintln(out, line)
			}
		case "pass":
			if e.Test != "" {
				r.passed++
			}
		case "skip":
			if e.Test != "" {
				r.skipped = append(r.skipped, key+": "+r.reason(key))
			}
		case "fail":
			if e.Test == "" {
				for _, line := range r.output[pkg] {
					if strings.HasPrefix(line, shufflePrefix) {
						fmt.Fprintf(out, "%s: to repeat its order: go test -shuffle=%s ./%s\n", pkg, strings.TrimPrefix(line, shufflePrefix), pkg)
					}
				}
			}
			switch {
			case e.Test != "":
				r.failedTests[pkg] = true
				r.failed = append(r.failed, key+r.said(key))
				fmt.Fprintln(out, strings.Join(r.output[key], "\n"))
			case len(r.running[pkg]) > 0:
				// The binary died inside these tests.
				for _, key := range r.running[pkg] {
					r.failed = append(r.failed, key+" (did not finish)")
					fmt.Fprintln(out, strings.Join(r.output[key], "\n"))
				}
				r.failedTests[pkg] = true
			case !r.failedTests[pkg] && !r.buildFailed[pkg]:
				r.couldNotRun = append(r.couldNotRun, pkg+": "+r.why(pkg))
			}
		case "build-fail":
			r.buildFailed[pkg] = true
			r.couldNotRun = append(r.couldNotRun, pkg+": its build failed")
		}
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintln(out, "testreport: reading go test's events:", err)
	}
}

// reason is what a skipped test said, without the lines `go test` adds.
func (r *report) reason(key string) string {
	var said []string
	for _, line := range r.output[key] {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "=== ") && !strings.HasPrefix(t, "--- ") {
			said = append(said, t)
		}
	}
	if len(said) == 0 {
		return "no reason given"
	}
	return strings.Join(said, " ")
}

// saidLines is how many of a failed test's messages the closing list repeats.
const saidLines = 3

// said is the first line of each of the first saidLines messages of a failed test (t.Error, t.Log), each on a line of
// its own, for the list at the end: a CI log cut in its middle keeps its head and tail, and a failed test's output
// (the extension logs it shows) can be long.
func (r *report) said(key string) string {
	var b strings.Builder
	n := 0
	for _, line := range r.output[key] {
		// go test indents a message's first line by four spaces per level and its further lines by four more.
		t := strings.TrimLeft(line, " ")
		file, _, ok := strings.Cut(t, ": ")
		if !ok || !strings.Contains(file, ".go:") || strings.Contains(file, " ") {
			continue
		}
		if n++; n > saidLines {
			break
		}
		if len(t) > 300 {
			t = t[:300] + "…"
		}
		b.WriteString("\n      " + t)
	}
	return b.String()
}

// why a package failed outside its tests: its prerequisite line, else the last thing it said.
func (r *report) why(pkg string) string {
	lines := r.output[pkg]
	if i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, cannotRun) }); i >= 0 {
		return lines[i][strings.Index(lines[i], cannotRun):]
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if t := strings.TrimSpace(lines[i]); t != "" && t != "FAIL" && !strings.HasPrefix(t, "FAIL\t") && !strings.HasPrefix(t, "exit status") {
			return "failed outside its tests: " + t
		}
	}
	return "failed outside its tests"
}

func (r *report) print(out io.Writer) {
	fmt.Fprintf(out, "\n== %d tests passed, %d failed, %d skipped; %d suites could not run\n", r.passed, len(r.failed), len(r.skipped), len(r.couldNotRun))
	for _, section := range []struct {
		title string
		lines []string
	}{{"skipped", r.skipped}, {"could not run", r.couldNotRun}, {"time per package, longest first", r.times()}, {"failed", r.failed}} {
		if len(section.lines) == 0 {
			continue
		}
		fmt.Fprintf(out, "%s:\n", section.title)
		for _, l := range section.lines {
			fmt.Fprintf(out, "  %s\n", l)
		}
	}
}

// times are the packages that took a second or more, longest first, with the CPU time of those that said it.
func (r *report) times() []string {
	pkgs := slices.Collect(maps.Keys(r.elapsed))
	slices.SortFunc(pkgs, func(a, b string) int { return cmp.Compare(r.elapsed[b], r.elapsed[a]) })
	var lines []string
	for _, pkg := range pkgs {
		if r.elapsed[pkg] >= 1 {
			line := fmt.Sprintf("%7.1fs  %s", r.elapsed[pkg], pkg)
			if cpu := r.cpu[pkg]; cpu != "" {
				line += ", CPU " + cpu
			}
			lines = append(lines, line)
		}
	}
	return lines
}

// keepGoing writes to w until a write fails, then says so once and discards the rest: go test's events must go on being
// read, or it blocks on a full pipe.
type keepGoing struct {
	w      io.Writer
	failed bool
}

func (k *keepGoing) Write(p []byte) (int, error) {
	if !k.failed {
		if _, err := k.w.Write(p); err != nil {
			k.failed = true
			fmt.Fprintln(os.Stderr, "testreport: writing TESTREPORT_JSON:", err)
		}
	}
	return len(p), nil
}
