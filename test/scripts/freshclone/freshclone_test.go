// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package freshclone checks what a newcomer's clone does on a machine without the folder of reference inputs beside
// it: networking-cilium's chart is fetched at the pinned commit by the project's own script (from a local repository
// served as a file URL, standing for GitHub, which neither this machine nor CI reaches), the suites find it there, and
// with no copy anywhere they stop with one line that names what to run.
package freshclone

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumbin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/repo"
)

// apiFiles are the files of networking-cilium besides the chart that the script fetches, relative to the chart.
var apiFiles = []string{"pkg/apis/cilium/v1alpha1/types_network.go", "pkg/charts/utils.go", "pkg/charts/values.go", "LICENSE"}

func TestFreshClone(t *testing.T) {
	chart, err := ciliumchart.GardenerChartDir()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	standIn, commit := standInRepository(t, chart, filepath.Join(tmp, "networking-cilium.git"))
	clone := cloneWorkingTree(t, filepath.Join(tmp, "newcomer", "gardener-extension-cilium-selfhosted"))
	for dir := clone; dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "shared", "reference")); err == nil {
			t.Fatalf("%s has shared/reference beside it: this test needs a folder without one", dir)
		}
	}
	// The suites' other prerequisites as this machine has them, so that nothing is built again into the empty cache.
	env := environment(t, "CACHE_DIR="+filepath.Join(tmp, "cache"))

	t.Run("the chart is fetched from the repository", func(t *testing.T) {
		env := append(env, "NETWORKING_CILIUM_REPO=file://"+standIn, "NETWORKING_CILIUM_COMMIT="+commit)
		want := filepath.Join(tmp, "cache", "networking-cilium-"+commit, "charts", "internal", "cilium")
		out, said := run(t, clone, env, ciliumchart.GardenerChartScript)
		if out != want+"\n" {
			t.Fatalf("the script printed %q, want %q\n%s", out, want, said)
		}
		for _, f := range apiFiles {
			if _, err := os.Stat(filepath.Join(want, "..", "..", "..", f)); err != nil {
				t.Errorf("the fetched copy lacks %s: %v", f, err)
			}
		}
		// The suites find it there, and say so.
		// With the race detector, as make test runs the suites: its build cache holds what they compile.
		out, said = run(t, clone, env, "go", "test", "-race", "-count=1", "-v", "-run", "^TestGardenerChart$", "./test/integration/chartadmission")
		if !strings.Contains(out+said, "networking-cilium's chart: "+want+" (cached, fetched from file://"+standIn) {
			t.Errorf("the suite does not say it uses the fetched copy:\n%s%s", out, said)
		}
	})

	t.Run("without any copy the suites name what to run", func(t *testing.T) {
		env := append(env, "CACHE_DIR="+filepath.Join(tmp, "empty-cache"), "NETWORKING_CILIUM_REPO=file://"+filepath.Join(tmp, "unreachable"))
		cmd := exec.Command(filepath.Join(clone, ciliumchart.GardenerChartScript))
		cmd.Dir, cmd.Env = clone, env
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("the script found a chart:\n%s", out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if last := lines[len(lines)-1]; !strings.Contains(last, "run hack/networking-cilium/chart.sh where") || !strings.Contains(last, "NETWORKING_CILIUM_CHART") {
			t.Errorf("the last line does not name what to run: %s", last)
		}
		cmd = exec.Command("go", "test", "-race", "-count=1", "-run", "^TestGardenerChart$", "./test/integration/chartadmission", "./test/operator/connect")
		cmd.Dir, cmd.Env = clone, env
		out, err = cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("the suites passed without a chart:\n%s", out)
		}
		for _, want := range []string{"connect cannot run: ", "hack/networking-cilium/chart.sh: networking-cilium's chart is missing"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("the output lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(string(out), "panic:") {
			t.Errorf("a suite panicked:\n%s", out)
		}
	})
}

// standInRepository makes a git repository at dir whose one commit holds the chart at charts/internal/cilium and the
// API files beside it, as gardener/gardener-extension-networking-cilium does, and returns its path and commit.
func standInRepository(t *testing.T, chart, dir string) (string, string) {
	t.Helper()
	git(t, "", "init", "-q", dir)
	copyTree(t, chart, filepath.Join(dir, "charts", "internal", "cilium"))
	reference := filepath.Join(chart, "..", "..", "..")
	for _, f := range apiFiles {
		copyFile(t, filepath.Join(reference, f), filepath.Join(dir, f))
	}
	git(t, dir, "add", "-A")
	git(t, dir, "-c", "user.name=stand-in", "-c", "user.email=stand-in@example.com", "commit", "-q", "-m", "networking-cilium, as at the pinned commit")
	return dir, strings.TrimSpace(git(t, dir, "rev-parse", "HEAD"))
}

// cloneWorkingTree clones this repository into dir with the working tree's changes, so that what is tested is what
// would be committed.
func cloneWorkingTree(t *testing.T, dir string) string {
	t.Helper()
	top, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	git(t, "", "clone", "-q", top, dir)
	for _, f := range strings.Fields(git(t, top, "ls-files", "--modified", "--others", "--exclude-standard")) {
		if _, err := os.Stat(filepath.Join(top, f)); err == nil {
			copyFile(t, filepath.Join(top, f), filepath.Join(dir, f))
		}
	}
	for _, f := range strings.Fields(git(t, top, "ls-files", "--deleted")) {
		_ = os.Remove(filepath.Join(dir, f))
	}
	return dir
}

// environment is the test's environment without a chart of the user's, with the Cilium binaries this machine has
// built and extra.
func environment(t *testing.T, extra ...string) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, ciliumchart.GardenerChartEnv+"=") && !strings.HasPrefix(kv, "CACHE_DIR=") {
			env = append(env, kv)
		}
	}
	for name, envVar := range map[string]string{ciliumbin.Operator: "CILIUM_OPERATOR", ciliumbin.Dbg: "CILIUM_DBG"} {
		bin, err := ciliumbin.Path(name)
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, envVar+"="+bin)
	}
	return append(env, extra...)
}

// run runs name in dir with env and returns its stdout and stderr; it must succeed.
func run(t *testing.T, dir string, env []string, name string, args ...string) (string, string) {
	t.Helper()
	if !filepath.IsAbs(name) && strings.Contains(name, "/") {
		name = filepath.Join(dir, name)
	}
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Dir, cmd.Env, cmd.Stderr = dir, env, &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s%s", name, args, err, out, stderr.String())
	}
	return string(out), stderr.String()
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		copyFile(t, path, filepath.Join(to, rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	// Git records only whether a file is executable; the reference copy is read-only.
	if err := os.WriteFile(to, b, info.Mode().Perm()|0o200); err != nil {
		t.Fatal(err)
	}
}
