// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package bpfobjects keeps the BPF objects Cilium's agents on the test nodes compile, so that an agent that starts
// again on its node with the same settings gets the object of a compilation that ran before instead of compiling it
// anew (a node's addresses and MACs are in its programs, so nodes do not share objects): its
// clang (./clang) runs the real compiler for a compilation it has not seen, else writes the object that compiler
// wrote. Nothing else changes: the agent still writes its headers, runs clang, and loads and attaches what it gets.
//
// An agent's start compiles three or four programs of about 4 s each on two cores (bpf_host twice, once the node's
// addresses are known), most of the start of a node's agent; test/agents/datapath restarts its agents dozens of times.
package bpfobjects

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/repo"
)

// Clang is the compiler the agents find on their PATH, behind the cache: Cilium needs LLVM >= 18.1 (Debian bookworm's
// default is 14).
const Clang = "/usr/lib/llvm-19/bin/clang"

// Cache is a directory with the clang for the agents and the objects it kept.
type Cache struct{ dir string }

// New builds the agents' clang in front of Clang into dir (created if missing) and returns the cache there.
func New(dir string) (*Cache, error) {
	if err := os.MkdirAll(filepath.Join(dir, "objects"), 0o755); err != nil {
		return nil, err
	}
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "clang"), "-ldflags", "-X main.compiler="+Clang, "./test/framework/bpfobjects/clang")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the agents' clang: %w\n%s", err, out)
	}
	return &Cache{dir: dir}, nil
}

// Dir is the directory that holds the clang and the objects; a container sees it wherever it is bound.
func (c *Cache) Dir() string { return c.dir }

// Compiler is the name of the clang in the directory.
const Compiler = "clang"

// Counts are how many compilations clang ran and how many objects it wrote from the cache.
func (c *Cache) Counts() (compiled, hits int, err error) {
	f, err := os.Open(filepath.Join(c.dir, "objects", "log"))
	if os.IsNotExist(err) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		switch what, _, _ := strings.Cut(s.Text(), " "); what {
		case "compiled":
			compiled++
		case "hit":
			hits++
		}
	}
	return compiled, hits, s.Err()
}
