// Command testreport runs `go test -json ...` (its arguments) and prints, as `go test` without -v would, each
// package's result and what its TestMain said, and the whole output of every failed test; it ends with what did not
// run: the tests skipped and why, and the suites that could not run (a missing prerequisite, a failed build) with their
// reason, then the failed tests. It exits as the command does.
//
//	go run ./hack/testreport go test -json -race ./...
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
	// elapsed is each package's time, from its end event.
	elapsed map[string]float64
}

func newReport() *report {
	return &report{output: map[string][]string{}, failedTests: map[string]bool{}, running: map[string][]string{}, buildFailed: map[string]bool{}, elapsed: map[string]float64{}}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testreport go test -json [flags] [packages]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var events io.Reader = stdout
	if path := os.Getenv("TESTREPORT_JSON"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer f.Close()
		events = io.TeeReader(stdout, &keepGoing{w: f})
	}
	r := newReport()
	r.read(events, os.Stdout)
	err = cmd.Wait()
	r.print(os.Stdout)
	if exit, ok := err.(*exec.ExitError); ok {
		os.Exit(exit.ExitCode())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
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
				r.failed = append(r.failed, key)
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

// times are the packages that took a second or more, longest first.
func (r *report) times() []string {
	pkgs := slices.Collect(maps.Keys(r.elapsed))
	slices.SortFunc(pkgs, func(a, b string) int { return cmp.Compare(r.elapsed[b], r.elapsed[a]) })
	var lines []string
	for _, pkg := range pkgs {
		if r.elapsed[pkg] >= 1 {
			lines = append(lines, fmt.Sprintf("%7.1fs  %s", r.elapsed[pkg], pkg))
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
