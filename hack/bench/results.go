// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Result is one figure next to its baseline, measured in the same run.
type Result struct {
	Section  string  `json:"section"`
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Baseline float64 `json:"baseline,omitempty"`
	// BaselineName says what the baseline is.
	BaselineName string  `json:"baselineName,omitempty"`
	Ratio        float64 `json:"ratio,omitempty"`
	Goal         string  `json:"goal,omitempty"`
	Met          *bool   `json:"met,omitempty"`
}

type report struct {
	Date    string   `json:"date"`
	Machine string   `json:"machine"`
	Notes   []string `json:"notes,omitempty"`
	Results []Result `json:"results"`
}

func (r *report) add(res Result) {
	if res.Baseline != 0 {
		res.Ratio = res.Value / res.Baseline
	}
	r.Results = append(r.Results, res)
	fmt.Printf("   %-58s %12.3f %-8s", res.Name, res.Value, res.Unit)
	if res.Baseline != 0 {
		fmt.Printf(" baseline %10.3f (%s)  ratio %.2fx", res.Baseline, res.BaselineName, res.Ratio)
	}
	if res.Met != nil {
		fmt.Printf("  goal %s: %v", res.Goal, *res.Met)
	}
	fmt.Println()
}

func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1] + " kB RAM"
	}
	return fmt.Sprintf("%s, %d cores (GOMAXPROCS %d), %s, %s %s/%s", cpu, runtime.NumCPU(), runtime.GOMAXPROCS(0), mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// keepOtherSections takes over, from the day's results at path, the figures of the sections this run did not measure
// (`--sections 8` alone updates section 8) and their notes.
func (r *report) keepOtherSections(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var earlier report
	if json.Unmarshal(b, &earlier) != nil {
		return
	}
	measured := map[string]bool{}
	for _, res := range r.Results {
		measured[res.Section] = true
	}
	var kept []Result
	for _, res := range earlier.Results {
		if !measured[res.Section] {
			kept = append(kept, res)
		}
	}
	r.Results = append(kept, r.Results...)
	for _, n := range earlier.Notes {
		if !slices.Contains(r.Notes, n) && !notesOfMeasured(n, measured) {
			r.Notes = append(r.Notes, n)
		}
	}
}

// notesOfMeasured tells whether note belongs to a section measured again ("Section 6, ..." or "Section 6 did not run").
func notesOfMeasured(note string, measured map[string]bool) bool {
	for section := range measured {
		number, _, _ := strings.Cut(section, ".")
		if strings.HasPrefix(note, "Section "+number+" ") || strings.HasPrefix(note, "Section "+number+",") {
			return true
		}
	}
	return false
}

func (r *report) write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	date, err := time.Parse("2006-01-02 15:04 MST", r.Date)
	if err != nil {
		date = time.Now().UTC()
	}
	base := filepath.Join(dir, "results-"+date.Format("2006-01-02"))
	r.keepOtherSections(base + ".json")
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(base+".json", append(js, '\n'), 0o644); err != nil {
		return "", err
	}
	// Group by section, keeping the order within each.
	results := slices.Clone(r.Results)
	slices.SortStableFunc(results, func(a, b Result) int { return strings.Compare(a.Section, b.Section) })
	var md strings.Builder
	fmt.Fprintf(&md, "# Benchmarks of gardener-extension-cilium-selfhosted\n\n%s, `make bench`. Machine: %s.\n\n", r.Date, r.Machine)
	fmt.Fprintf(&md, "Every figure stands next to its baseline from the same run; ratio = value / baseline.\n")
	section := ""
	for _, res := range results {
		if res.Section != section {
			section = res.Section
			fmt.Fprintf(&md, "\n## %s\n\n| measure | value | baseline | ratio | goal |\n|---|---:|---|---:|---|\n", section)
		}
		baseline, ratio, goal := "", "", res.Goal
		if res.Baseline != 0 {
			baseline = fmt.Sprintf("%s %s (%s)", num(res.Baseline), res.Unit, res.BaselineName)
			ratio = fmt.Sprintf("%.2fx", res.Ratio)
		}
		if res.Met != nil {
			goal += map[bool]string{true: " — met", false: " — **missed**"}[*res.Met]
		}
		fmt.Fprintf(&md, "| %s | %s %s | %s | %s | %s |\n", res.Name, num(res.Value), res.Unit, baseline, ratio, goal)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintf(&md, "\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&md, "- %s\n", n)
		}
	}
	return base + ".md", os.WriteFile(base+".md", []byte(md.String()), 0o644)
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func met(ok bool) *bool { return &ok }
