// Package docs_test checks the project's Markdown: every relative link in
// README.md and docs/*.md must name a file that exists and, when it carries
// a fragment, a heading of that file as GitHub renders its anchor.
package docs_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestNoDeadRelativeLinks fails on a relative link in README.md or
// docs/*.md whose file is missing or whose #anchor matches no heading.
func TestNoDeadRelativeLinks(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join("..", "README.md")}, files...)
	dead, err := deadLinks(files)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		t.Error(d)
	}
}

// TestDeadLinksAreFound seeds a missing file, a missing anchor and a
// missing anchor in the same file, and checks that each is reported while
// the good links are not.
func TestDeadLinksAreFound(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("b.md", "# B\n\n## What QEMU 7.2's 82574L does (`e1000e`)\n\n## Repeat\n\n## Repeat\n")
	a := write("a.md", strings.Join([]string{
		"# A",
		"[ok](b.md) [ok](b.md#what-qemu-72s-82574l-does-e1000e) [ok](b.md#repeat-1) [ok](#a)",
		"[ok](https://example.com/x.md#nowhere) ![ok](b.md)",
		"`[in code](missing.md)`",
		"```",
		"[in a fence](missing.md)",
		"```",
		"",
		"    [in an indented block](missing.md)",
		"",
		"* a list item",
		"",
		"    [dead in its continuation](missing2.md)",
		"[dead file](missing.md) [dead anchor](b.md#nowhere) [dead here](#nowhere)",
		"[dead dup](b.md#repeat-2)",
	}, "\n"))
	dead, err := deadLinks([]string{a})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"missing2.md", "missing.md", "b.md#nowhere", "#nowhere", "b.md#repeat-2"}
	if len(dead) != len(want) {
		t.Fatalf("found %d dead links, want %d: %q", len(dead), len(want), dead)
	}
	for i, w := range want {
		if !strings.HasSuffix(dead[i], "("+w+")") {
			t.Errorf("dead link %d: %q, want one ending in (%s)", i, dead[i], w)
		}
	}
}

// TestAnchor pins the GitHub slug rules the link check relies on.
func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Two commands":                         "two-commands",
		"ConnectX backend (`connectx/`)":       "connectx-backend-connectx",
		"PCIe dead-link check: cost":           "pcie-dead-link-check-cost",
		"How the cost came down, sessions 1–3": "how-the-cost-came-down-sessions-13",
		"CI runs before `9ac3295`":             "ci-runs-before-9ac3295",
		"The [link](x.md) and *emphasis*":      "the-link-and-emphasis",
		"guest→host, `make_bench`":             "guesthost-make_bench",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

var (
	// linkRE matches an inline link or image: [text](target) or
	// [text](target "title"); the text may hold one level of brackets.
	linkRE = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// refRE matches a reference definition: [label]: target.
	refRE = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$`)
	// codeRE matches an inline code span.
	codeRE = regexp.MustCompile("`+[^`]*`+")
	// headingRE matches an ATX heading.
	headingRE = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	// listItemRE matches the first line of a list item.
	listItemRE = regexp.MustCompile(`^\s{0,3}([*+-]|\d+[.)])\s`)
	// htmlIDRE matches an explicit HTML anchor.
	htmlIDRE = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	// inlineLinkTextRE reduces a link in a heading to its text.
	inlineLinkTextRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// deadLinks returns one line per dead relative link in files, in file and
// line order: "file:line: [text](target)".
func deadLinks(files []string) ([]string, error) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		a, err := fileAnchors(path)
		if err != nil {
			return nil, err
		}
		anchors[path] = a
		return a, nil
	}
	var dead []string
	for _, file := range files {
		lines, err := proseLines(file)
		if err != nil {
			return nil, err
		}
		for n, line := range lines {
			if line == "" {
				continue
			}
			var targets []string
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				targets = append(targets, m[1])
			}
			if m := refRE.FindStringSubmatch(line); m != nil {
				targets = append(targets, m[1])
			}
			for _, target := range targets {
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				full := file
				if path != "" {
					full = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
					if _, err := os.Stat(full); err != nil {
						dead = append(dead, fmt.Sprintf("%s:%d: missing file (%s)", file, n+1, target))
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(full, ".md") {
					continue
				}
				a, err := anchorsOf(full)
				if err != nil {
					return nil, err
				}
				if !a[strings.ToLower(frag)] {
					dead = append(dead, fmt.Sprintf("%s:%d: no such heading (%s)", file, n+1, target))
				}
			}
		}
	}
	return dead, nil
}

// proseLines returns a file's lines with fenced code blocks and inline code
// spans blanked, so that only links a reader can follow remain.
func proseLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading links: %w", err)
	}
	defer f.Close()
	var lines []string
	fence := ""
	// An indented code block starts after a blank line that does not
	// follow a list item (whose continuation lines are indented too).
	prevBlank, inList, inCode := true, false, false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		blank := trimmed == ""
		indented := strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t")
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			line = ""
		case strings.HasPrefix(trimmed, "```"), strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
			line = ""
		case indented && (inCode || prevBlank && !inList):
			inCode = true
			line = ""
		case !blank:
			inCode = false
			if !indented {
				inList = listItemRE.MatchString(line) || inList && !prevBlank
			}
		}
		prevBlank = blank
		lines = append(lines, codeRE.ReplaceAllString(line, ""))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading links in %s: %w", path, err)
	}
	return lines, nil
}

// fileAnchors returns the anchors GitHub gives the headings of a Markdown
// file (a repeated heading gets -1, -2, ...), plus explicit HTML anchors.
func fileAnchors(path string) (map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading anchors: %w", err)
	}
	a := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(line, -1) {
			a[strings.ToLower(m[1])] = true
		}
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := anchor(m[2])
		if n := seen[slug]; n > 0 {
			a[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			a[slug] = true
		}
		seen[slug]++
	}
	return a, nil
}

// anchor computes GitHub's anchor for a heading's text: links reduced to
// their text, lower case, every character but letters, marks, digits,
// '_', '-' and spaces dropped, spaces turned into '-'.
func anchor(heading string) string {
	heading = inlineLinkTextRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsMark(r), unicode.IsDigit(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
