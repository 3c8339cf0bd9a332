package chaos

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// clientName matches the harness's client ids in a violation's words.
var clientName = regexp.MustCompile(`\b(?:share|plain|pub)-[0-9a-z]+\b`)

// WriteExcerpts prints, for a run that broke an invariant, what each
// node logged about the clients the violations name, with the registry's
// and the cluster's own lines for context (etcd's are left out), at most
// perNode lines a node, the last ones. A failure in CI then carries its
// evidence: the processes' log files go with the machine.
func (r *Result) WriteExcerpts(w io.Writer, perNode int) {
	if r.Report.OK() || r.Dir == "" || r.Dir == "(removed)" {
		return
	}
	names := map[string]bool{}
	for _, inv := range r.Report.Invariants {
		for _, ex := range inv.Examples {
			for _, n := range clientName.FindAllString(ex, -1) {
				names[n] = true
			}
		}
	}
	logs, _ := filepath.Glob(filepath.Join(r.Dir, "n*.log"))
	for _, name := range logs {
		lines := excerpt(name, names, perNode)
		fmt.Fprintf(w, "  %s: %d lines about %s, and the registry's\n", filepath.Base(name), len(lines), strings.Join(keys(names), ", "))
		for _, l := range lines {
			fmt.Fprintln(w, "    "+l)
		}
	}
}

// excerpt returns the last max lines of the log file name that mention
// one of names or come from the registry or the cluster, etcd's excluded.
func excerpt(name string, names map[string]bool, max int) []string {
	f, err := os.Open(name)
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, "component=etcd") {
			continue
		}
		keep := strings.Contains(l, "component=registry") || strings.Contains(l, "component=cluster")
		for n := range names {
			keep = keep || strings.Contains(l, n)
		}
		if keep {
			out = append(out, l)
		}
	}
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
