// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package docs checks the repository's documentation: every relative link of every Markdown file leads to a file or
// directory of the repository.
package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// link is a Markdown inline link; its target ends at the first space or closing parenthesis.
var link = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)

// TestRelativeLinksResolve: every relative link of every tracked Markdown file names a tracked path (anchors are not
// checked), so that moving a page breaks this test rather than the reader's way.
func TestRelativeLinksResolve(t *testing.T) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	dir := strings.TrimSpace(string(root))
	out, err := exec.Command("git", "-C", dir, "ls-files", "*.md").Output()
	if err != nil {
		t.Fatal(err)
	}
	pages := strings.Fields(string(out))
	if len(pages) < 10 {
		t.Fatalf("found %d Markdown files: %v", len(pages), pages)
	}
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			if _, err := os.Stat(filepath.Join(dir, filepath.Dir(page), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", page, m[1])
			}
		}
	}
	t.Logf("%d relative links in %d pages", checked, len(pages))
}
