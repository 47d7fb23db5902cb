// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestReport(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"` + module + `test/a","Test":"TestOK"}`,
		`{"Action":"pass","Package":"` + module + `test/a","Test":"TestOK"}`,
		`{"Action":"run","Package":"` + module + `test/a","Test":"TestRoot"}`,
		`{"Action":"output","Package":"` + module + `test/a","Test":"TestRoot","Output":"=== RUN   TestRoot\n"}`,
		`{"Action":"output","Package":"` + module + `test/a","Test":"TestRoot","Output":"    a_test.go:9: needs root\n"}`,
		`{"Action":"output","Package":"` + module + `test/a","Test":"TestRoot","Output":"--- SKIP: TestRoot (0.00s)\n"}`,
		`{"Action":"skip","Package":"` + module + `test/a","Test":"TestRoot"}`,
		`{"Action":"output","Package":"` + module + `test/a","Output":"suite CPU: 7 s (user 5 s, system 2 s)\n"}`,
		`{"Action":"pass","Package":"` + module + `test/a","Elapsed":2.5}`,
		`{"Action":"output","Package":"` + module + `test/operator/connect","Output":"connect cannot run: hack/networking-cilium/chart.sh: run this\n"}`,
		`{"Action":"output","Package":"` + module + `test/operator/connect","Output":"FAIL\tgithub.com/x/test/connect\t0.1s\n"}`,
		`{"Action":"fail","Package":"` + module + `test/operator/connect"}`,
		`{"Action":"output","Package":"` + module + `test/a","Output":"-test.shuffle 11\n"}`,
		`{"Action":"output","Package":"` + module + `test/b","Output":"-test.shuffle 22\n"}`,
		`{"Action":"run","Package":"` + module + `test/b","Test":"TestBad"}`,
		`{"Action":"output","Package":"` + module + `test/b","Test":"TestBad","Output":"    b_test.go:3: went wrong\n"}`,
		`{"Action":"output","Package":"` + module + `test/b","Test":"TestBad","Output":"        I1206 07:45:11.5 leaderelection.go:258] a log line it shows\n"}`,
		`{"Action":"output","Package":"` + module + `test/b","Test":"TestBad","Output":"    b_test.go:4: second\n"}`,
		`{"Action":"output","Package":"` + module + `test/b","Test":"TestBad","Output":"    b_test.go:5: third\n"}`,
		`{"Action":"output","Package":"` + module + `test/b","Test":"TestBad","Output":"    b_test.go:6: fourth\n"}`,
		`{"Action":"fail","Package":"` + module + `test/b","Test":"TestBad"}`,
		`{"Action":"fail","Package":"` + module + `test/b","Elapsed":30}`,
		`{"ImportPath":"` + module + `test/c [` + module + `test/c.test]","Action":"build-fail"}`,
		`{"ImportPath":"` + module + `test/c [` + module + `test/c.test]","Action":"build-output","Output":"c.go:1: syntax error\n"}`,
		`{"Action":"fail","Package":"` + module + `test/c"}`,
		`{"Action":"run","Package":"` + module + `test/d","Test":"TestDies"}`,
		`{"Action":"output","Package":"` + module + `test/d","Test":"TestDies","Output":"panic: in a controller's goroutine\n"}`,
		`{"Action":"fail","Package":"` + module + `test/d"}`,
		`{"Action":"skip","Package":"` + module + `test/nothing"}`,
		`# a line that is no event`,
	}, "\n")
	r := newReport()
	var out bytes.Buffer
	r.read(strings.NewReader(in), &out)
	r.print(&out)
	for _, want := range []string{
		"== 1 tests passed, 2 failed, 1 skipped; 2 suites could not run",
		"  test/d TestDies (did not finish)\n",
		"panic: in a controller's goroutine\n",
		"skipped:\n  test/a TestRoot: a_test.go:9: needs root\n",
		"  test/operator/connect: cannot run: hack/networking-cilium/chart.sh: run this\n",
		"its build failed",
		"failed:\n  test/b TestBad\n      b_test.go:3: went wrong\n      b_test.go:4: second\n      b_test.go:5: third\n  test/d",
		"# a line that is no event\n",
		"connect cannot run: hack/networking-cilium/chart.sh: run this\n",
		"time per package, longest first:\n     30.0s  test/b\n      2.5s  test/a, CPU 7 s (user 5 s, system 2 s)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "-test.shuffle 11") {
		t.Errorf("the seed of a package that passed is printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "test/b: to repeat its order: go test -shuffle=22 ./test/b") {
		t.Errorf("the seed of a package that failed is missing:\n%s", out.String())
	}
	if strings.Contains(out.String(), "=== RUN") {
		t.Errorf("the output of a test that did not fail is printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "b_test.go:3: went wrong") {
		t.Errorf("the output of a failed test is missing:\n%s", out.String())
	}
	if strings.Contains(out.String(), "test/nothing") {
		t.Errorf("a package without tests is listed:\n%s", out.String())
	}
}

func TestCommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want [][]string
	}{
		{[]string{"go", "test", "./..."}, [][]string{{"go", "test", "./..."}}},
		{[]string{"go", "test", "-race", "./pkg/...", ";", "go", "test", "./test/..."}, [][]string{{"go", "test", "-race", "./pkg/..."}, {"go", "test", "./test/..."}}},
		{[]string{";", "go", "test", ";", ";"}, [][]string{{"go", "test"}}},
		{nil, nil},
	} {
		if got := commands(tc.args); !slices.EqualFunc(got, tc.want, slices.Equal) {
			t.Errorf("commands(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestSideBySide: the events of commands run side by side arrive whole, and the exit code is the first failure's.
func TestSideBySide(t *testing.T) {
	line := func(pkg string) string {
		return `{"Action":"output","Package":"` + module + pkg + `","Output":"` + strings.Repeat("x", 5000) + `"}`
	}
	events, wait, err := start([][]string{
		{"sh", "-c", "for i in $(seq 200); do echo '" + line("a") + "'; done"},
		{"sh", "-c", "for i in $(seq 200); do echo '" + line("b") + "'; done; exit 3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(events)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 400 {
		t.Errorf("%d lines, want 400", len(lines))
	}
	for i, l := range lines {
		if l != line("a") && l != line("b") {
			t.Fatalf("line %d is no whole line of either command: %.80q", i, l)
		}
	}
	if code := wait(); code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
}
