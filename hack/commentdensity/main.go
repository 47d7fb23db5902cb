// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Command commentdensity prints the comment density of the hand-written product Go (issue 45): comment characters
// divided by non-blank code characters, over cmd, pkg, webhook and charts, tests and generated files excluded. A
// comment character is any character of a line comment between its first and last non-blank one (SPDX lines and empty
// `//` lines left out) or any non-blank one of a block comment; a code character any non-blank character of any other
// token, string literals included. With -files it lists each file's.
package main

import (
	"flag"
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// roots are the directories of the product's Go.
var roots = []string{"cmd", "pkg", "webhook", "charts"}

func main() {
	perFile := flag.Bool("files", false, "list each file's comment and code characters, densest first")
	flag.Parse()
	type count struct {
		path          string
		comment, code int
	}
	var counts []count
	total := count{}
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if strings.Contains(string(src), "Code generated") && strings.Contains(string(src), "DO NOT EDIT") {
				return nil
			}
			comment, code := measure(src)
			counts = append(counts, count{path, comment, code})
			total.comment, total.code = total.comment+comment, total.code+code
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if *perFile {
		slices.SortFunc(counts, func(a, b count) int { return b.comment*a.code - a.comment*b.code })
		for _, c := range counts {
			fmt.Printf("%5.2f %7d %7d %s\n", float64(c.comment)/float64(max(c.code, 1)), c.comment, c.code, c.path)
		}
	}
	fmt.Printf("%d files: %d comment characters, %d code characters, density %.3f\n", len(counts), total.comment, total.code,
		float64(total.comment)/float64(total.code))
}

// measure counts the comment and code characters of a Go source file.
func measure(src []byte) (comment, code int) {
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile("", fset.Base(), len(src)), src, nil, scanner.ScanComments)
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			return comment, code
		}
		if lit == "" {
			lit = tok.String()
		}
		if tok == token.COMMENT {
			if strings.Contains(lit, "SPDX-") || strings.TrimSpace(lit) == "//" {
				continue
			}
			if strings.HasPrefix(lit, "//") {
				comment += utf8.RuneCountInString(strings.TrimSpace(lit))
			} else {
				comment += nonBlank(lit)
			}
			continue
		}
		if tok == token.SEMICOLON && lit == "\n" {
			continue // inserted by the scanner
		}
		code += nonBlank(lit)
	}
}

func nonBlank(s string) int {
	n := 0
	for _, r := range s {
		if !unicode.IsSpace(r) {
			n++
		}
	}
	return n
}
