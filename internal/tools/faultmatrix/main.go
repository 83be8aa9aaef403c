package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/distlock/distlock/conformance"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type cell struct {
	status string // pass, fail, skip
	notes  []string
}

func main() {
	command := flag.String("command", "make faults", "the command that produced the input, quoted in the output")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *command); err != nil {
		fmt.Fprintln(os.Stderr, "faultmatrix:", err)
		os.Exit(1)
	}
}

var locPrefix = regexp.MustCompile(`^\s*[\w./-]+\.go:\d+: `)

func run(in io.Reader, out io.Writer, command string) error {
	checks := conformance.Checks()
	known := map[string]bool{}
	for _, c := range checks {
		known[c.Name] = true
	}
	cells, err := readCells(in, known)
	if err != nil {
		return err
	}
	var backends []string
	for b := range cells {
		backends = append(backends, b)
	}
	sort.Strings(backends)
	if len(backends) == 0 {
		return fmt.Errorf("no conformance results in the input")
	}
	host, _ := os.Hostname()
	fmt.Fprintf(out, "# Conformance and fault matrix\n\n")
	fmt.Fprintf(out, "Generated %s on %s (%s) by `%s`.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), host, machine(), command)
	fmt.Fprintf(out, "pass: checked and held. **FAIL**: broken. documented: the backend cannot promise this, and says so in its package doc (reason below). n/a: not applicable (capability not claimed, or the test harness lacks the fault).\n\n")
	fmt.Fprintf(out, "| check | %s |\n|---|%s\n", strings.Join(backends, " | "), strings.Repeat("---|", len(backends)))
	var footnotes []string
	for _, c := range checks {
		row := []string{fmt.Sprintf("`%s`", c.Name)}
		for _, b := range backends {
			cl := cells[b][c.Name]
			row = append(row, render(cl, b, c.Name, &footnotes))
		}
		fmt.Fprintf(out, "| %s |\n", strings.Join(row, " | "))
	}
	fmt.Fprintf(out, "\n## What each check verifies\n\n")
	for _, c := range checks {
		fmt.Fprintf(out, "- `%s`: %s.\n", c.Name, c.Contract)
	}
	if len(footnotes) > 0 {
		fmt.Fprintf(out, "\n## Notes\n\n")
		for i, f := range footnotes {
			fmt.Fprintf(out, "%d. %s\n", i+1, f)
		}
	}
	return nil
}

// readCells reads `go test -json` events into one cell per backend (a
// conformance run) and check.
func readCells(in io.Reader, known map[string]bool) (map[string]map[string]*cell, error) {
	cells := map[string]map[string]*cell{} // backend → check → cell
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Test == "" {
			continue
		}
		parts := strings.Split(e.Test, "/")
		if len(parts) < 2 || !strings.HasPrefix(parts[0], "TestConformance") || !known[parts[len(parts)-1]] {
			continue
		}
		// One column per conformance run: TestConformanceCluster in
		// package redis is "redis Cluster", subtests add "/variant".
		backend := path.Base(e.Package)
		if v := strings.TrimPrefix(parts[0], "TestConformance"); v != "" {
			backend += " " + v
		}
		if len(parts) > 2 {
			backend += "/" + strings.Join(parts[1:len(parts)-1], "/")
		}
		check := parts[len(parts)-1]
		if cells[backend] == nil {
			cells[backend] = map[string]*cell{}
		}
		c := cells[backend][check]
		if c == nil {
			c = &cell{}
			cells[backend][check] = c
		}
		switch e.Action {
		case "pass", "fail", "skip":
			c.status = e.Action
		case "output":
			line := strings.TrimRight(e.Output, "\n")
			trimmed := strings.TrimSpace(line)
			if trimmed == "" || strings.HasPrefix(trimmed, "=== ") || strings.HasPrefix(trimmed, "--- ") {
				continue
			}
			c.notes = append(c.notes, locPrefix.ReplaceAllString(line, ""))
		}
	}
	return cells, sc.Err()
}

func render(c *cell, backend, check string, footnotes *[]string) string {
	if c == nil || c.status == "" {
		return "—"
	}
	note := strings.Join(c.notes, " ")
	ref := func(label string) string {
		if note == "" {
			return label
		}
		*footnotes = append(*footnotes, fmt.Sprintf("%s / `%s`: %s", backend, check, note))
		return fmt.Sprintf("%s [%d]", label, len(*footnotes))
	}
	switch c.status {
	case "pass":
		if note != "" && len(note) < 200 {
			return ref("pass")
		}
		return "pass"
	case "fail":
		return ref("**FAIL**")
	}
	switch {
	case strings.Contains(note, "documented unsafe"):
		return ref("documented unsafe")
	case strings.Contains(note, "documented"):
		return ref("documented")
	case strings.Contains(note, "does not claim"):
		return "n/a (not claimed)"
	default:
		return ref("n/a")
	}
}

func machine() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	cores := 0
	model := ""
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "processor") {
				cores++
			}
			if model == "" && strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(l[strings.Index(l, ":")+1:])
			}
		}
	}
	return fmt.Sprintf("%d cores, %s", cores, model)
}
