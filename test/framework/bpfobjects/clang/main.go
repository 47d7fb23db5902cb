// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Command clang is what Cilium's agents on the test nodes run as clang: it hands a compilation to the real clang
// (test/framework/bpfobjects) unless the same compilation ran before, whose object it writes instead. Anything else
// goes to clang as it is.
//
// Cilium's loader compiles with `-c <source> -o -` (pkg/datapath/loader/compile.go), so the object goes to stdout,
// which ccache does not cache. A compilation is the same when clang's arguments, working directory and preprocessed
// input are: its object is then clang's own output for it, byte for byte.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
)

// compiler is the real clang, set at build time (bpfobjects.Build).
var compiler string

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if !cacheable(args) {
		if err := syscall.Exec(compiler, append([]string{compiler}, args...), os.Environ()); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir := filepath.Join(filepath.Dir(self), "objects")
	key, err := keyOf(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	object := filepath.Join(dir, key)
	if cached, err := os.ReadFile(object); err == nil {
		record(dir, "hit", key)
		if _, err := os.Stdout.Write(cached); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	record(dir, "compiled", key)
	return compile(args, object)
}

// record appends what became of a compilation to the directory's log, which the suites count.
func record(dir, what, key string) {
	f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, what, key)
}

// cacheable says whether args compile one source to an object on stdout, as Cilium's loader does.
func cacheable(args []string) bool {
	out := slices.Index(args, "-o")
	return slices.Contains(args, "-c") && !slices.Contains(args, "-E") && out >= 0 && out+1 < len(args) && args[out+1] == "-"
}

// keyOf names the compilation: clang, the working directory, the arguments and the preprocessed input.
func keyOf(args []string) (string, error) {
	var pre bytes.Buffer
	cmd := exec.Command(compiler, append(slices.Clone(args), "-E")...)
	cmd.Stdout, cmd.Stderr = &pre, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("preprocessing: %w", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, s := range append([]string{compiler, wd}, args...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(pre.Bytes())
	return hex.EncodeToString(h.Sum(nil)), nil
}

// compile runs clang, writes its object to stdout and keeps it at object when it succeeded.
func compile(args []string, object string) int {
	var out bytes.Buffer
	cmd := exec.Command(compiler, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, &out, os.Stderr
	err := cmd.Run()
	if _, werr := os.Stdout.Write(out.Bytes()); werr != nil {
		fmt.Fprintln(os.Stderr, werr)
		return 1
	}
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		return exit.ExitCode()
	} else if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Written aside and renamed: agents compiling the same object at once each find a whole one.
	tmp, err := os.CreateTemp(filepath.Dir(object), ".partial-*")
	if err == nil {
		_, err = tmp.Write(out.Bytes())
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), object)
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeping the object:", err)
	}
	return 0
}
