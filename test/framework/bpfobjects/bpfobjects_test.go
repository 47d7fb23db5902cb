// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package bpfobjects

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSameCompilationSameObject: a compilation as Cilium's loader runs it (one source, the object to stdout) gives
// clang's own object, the first time compiled and the second from the cache; a change of the input, even in an
// included header, or of the arguments compiles again; anything else (clang --version) goes to clang.
func TestSameCompilationSameObject(t *testing.T) {
	if _, err := os.Stat(Clang); err != nil {
		t.Skipf("%s is missing: run `sudo hack/setup.sh`", Clang)
	}
	c, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("config.h", "#define ANSWER 42\n")
	write("prog.c", "#include \"config.h\"\nint answer(void) { return ANSWER; }\n")
	args := []string{"-O2", "--target=bpf", "-g", "-I" + src, "-c", filepath.Join(src, "prog.c"), "-o", "-"}
	run := func(binary string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(binary, args...)
		cmd.Dir = src
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v", binary, args, err)
		}
		return out
	}
	wrapper := filepath.Join(c.Dir(), Compiler)
	for i, step := range []struct {
		change         func()
		args           []string
		compiled, hits int
	}{
		{nil, args, 1, 0},
		{nil, args, 1, 1},
		{func() { write("config.h", "#define ANSWER 43\n") }, args, 2, 1},
		{nil, append([]string{"-DOTHER"}, args...), 3, 1},
		{nil, args, 3, 2},
	} {
		if step.change != nil {
			step.change()
		}
		if got, want := run(wrapper, step.args...), run(Clang, step.args...); !bytes.Equal(got, want) {
			t.Errorf("step %d: the object differs from clang's own (%d bytes, want %d)", i, len(got), len(want))
		}
		compiled, hits, err := c.Counts()
		if err != nil {
			t.Fatal(err)
		}
		if compiled != step.compiled || hits != step.hits {
			t.Errorf("step %d: %d compiled, %d from the cache, want %d and %d", i, compiled, hits, step.compiled, step.hits)
		}
	}
	if got, want := run(wrapper, "--version"), run(Clang, "--version"); !bytes.Equal(got, want) {
		t.Errorf("clang --version through the cache: %q, want %q", got, want)
	}
}
