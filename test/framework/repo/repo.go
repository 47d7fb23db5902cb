// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package repo finds this repository and runs its hack/ scripts from tests, which run in their package's directory.
package repo

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

var root = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("locating this repository: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("locating this repository: not inside its module")
	}
	return filepath.Dir(gomod), nil
})

// Root is the repository's top directory.
func Root() (string, error) { return root() }

// Script runs the script at path (relative to the repository's top) with args and returns what it printed on stdout,
// trimmed. When it succeeds, what it said on stderr is passed on to the test's; when it fails, its error is the last
// line it said, which the scripts make the one that names what to run.
func Script(path string, args ...string) (string, error) {
	top, err := Root()
	if err != nil {
		return "", err
	}
	var said bytes.Buffer
	cmd := exec.Command(filepath.Join(top, path), args...)
	cmd.Stderr = &said
	out, err := cmd.Output()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(said.String()), "\n")
		if last := lines[len(lines)-1]; last != "" {
			return "", fmt.Errorf("%s: %s", path, last)
		}
		return "", fmt.Errorf("%s: %w", path, err)
	}
	_, _ = io.Copy(os.Stderr, &said)
	return strings.TrimSpace(string(out)), nil
}
