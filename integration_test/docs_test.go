package integration_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docBlock is one ```caddyfile block of a document.
type docBlock struct {
	file string
	line int // of the block's first line
	text string
}

// caddyfileBlocks returns the ```caddyfile blocks of the document at path.
func caddyfileBlocks(t *testing.T, path string) []docBlock {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	var cur *docBlock
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```caddyfile":
			cur = &docBlock{file: filepath.Base(path), line: i + 2}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("%s: a ```caddyfile block from line %d never ends", path, cur.line)
	}
	return blocks
}

// siteAddress is a Caddyfile's first line when it opens a site block.
var siteAddress = regexp.MustCompile(`^[^\s{@]*[.:][^\s]*\s*\{$`)

// whole reports whether a block is a Caddyfile of its own: it opens with
// the global options or a site; else it is what goes in a site.
func whole(text string) bool {
	first := strings.TrimSpace(strings.SplitN(strings.TrimSpace(text), "\n", 2)[0])
	return first == "{" || siteAddress.MatchString(first)
}

// TestDocsCaddyfilesValidate runs `caddy validate` on every recipe's
// Caddyfile (each ```caddyfile block of docs/recipes.md, in a site unless
// it is a Caddyfile of its own), and on the README's and configuration
// reference's blocks that are whole Caddyfiles (the others are syntax
// summaries), so that the docs never show a Caddyfile that does not load.
func TestDocsCaddyfilesValidate(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1/0") // validate does not need it to answer
	var blocks []docBlock
	blocks = append(blocks, caddyfileBlocks(t, "../docs/recipes.md")...)
	for _, path := range []string{"../README.md", "../docs/configuration.md"} {
		for _, b := range caddyfileBlocks(t, path) {
			if whole(b.text) {
				blocks = append(blocks, b)
			}
		}
	}
	if len(blocks) < 15 {
		t.Fatalf("found %d blocks, want the recipes' 15 at least", len(blocks))
	}
	for _, b := range blocks {
		t.Run(fmt.Sprintf("%s:%d", b.file, b.line), func(t *testing.T) {
			var out string
			var err error
			if whole(b.text) {
				out, err = caddyValidateFile(t, b.text)
			} else {
				out, err = caddyValidate(t, b.text)
			}
			if err != nil {
				t.Errorf("caddy validate: %v\n%s\n%s", err, b.text, out)
			}
		})
	}
}

// caddyValidateFile runs `caddy validate` on caddyfile as it is.
func caddyValidateFile(t *testing.T, caddyfile string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddyBin, "validate", "--config", "Caddyfile", "--adapter", "caddyfile")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// shorthands are the Caddyfile's placeholder shorthands a recipe may use
// without defining them.
var shorthands = map[string]bool{
	"client_ip": true, "dir": true, "file": true, "host": true, "hostport": true, "method": true,
	"path": true, "port": true, "query": true, "remote": true, "remote_host": true, "remote_port": true,
	"scheme": true, "uri": true,
}

var (
	bareVar = regexp.MustCompile(`\{([a-z_]+)\}`)
	mapOut  = regexp.MustCompile(`(?m)^\s*map\s+\S+\s+(.*)\{\s*$`)
)

// TestRecipesSelfContained: each recipe defines what it reads: a
// placeholder of its own (such as a map's {plan_limit}) is defined by a
// map in the same block; the Redis URL is read one way, {env.REDIS_URL};
// and no recipe matches on remote_ip, which behind a trusted proxy is the
// proxy's address (client_ip is the client's).
func TestRecipesSelfContained(t *testing.T) {
	for _, b := range caddyfileBlocks(t, "../docs/recipes.md") {
		defined := make(map[string]bool)
		for _, m := range mapOut.FindAllStringSubmatch(b.text, -1) {
			for _, out := range bareVar.FindAllStringSubmatch(m[1], -1) {
				defined[out[1]] = true
			}
		}
		for _, v := range bareVar.FindAllStringSubmatch(b.text, -1) {
			if !shorthands[v[1]] && !defined[v[1]] {
				t.Errorf("recipes.md:%d: {%s} is read but not defined in the recipe (a map would)", b.line, v[1])
			}
		}
		if strings.Contains(b.text, "{$") {
			t.Errorf("recipes.md:%d: {$…} reads the environment at parse time; the recipes use {env.…}", b.line)
		}
		if strings.Contains(b.text, "remote_ip") {
			t.Errorf("recipes.md:%d: remote_ip is the proxy's address behind a proxy; use client_ip", b.line)
		}
	}
}

// TestRecipesContents: the contents list at the top of docs/recipes.md
// names every recipe (every ## heading).
func TestRecipesContents(t *testing.T) {
	b, err := os.ReadFile("../docs/recipes.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, line := range strings.Split(text, "\n") {
		heading, ok := strings.CutPrefix(line, "## ")
		if ok && !strings.Contains(text, "- ["+heading+"](#") {
			t.Errorf("recipe %q is missing from the contents list", heading)
		}
	}
}

// TestArchitectureNamesTheCode: ARCHITECTURE.md says where to add what;
// every file it names exists, and every Go name its "Where to add" names
// (`Zone.counting`, `algorithms.Store`, `remoteStores`, …) is defined in
// the code, so the guide cannot drift from the tree.
func TestArchitectureNamesTheCode(t *testing.T) {
	b, err := os.ReadFile("../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	code := goSources(t)
	for _, m := range regexp.MustCompile("`([^`\\s]+)`").FindAllStringSubmatch(doc, -1) {
		name := m[1]
		if strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".lua") || strings.HasSuffix(name, ".md") {
			if strings.ContainsAny(name, "<*") || strings.HasPrefix(name, "x") {
				continue // a pattern: algorithms/<name>.go, cli*.go, x_test.go
			}
			// a bare name is a file of the root package or of the
			// package the sentence is about
			found, _ := filepath.Glob(filepath.Join("..", "*", name))
			if _, err := os.Stat(filepath.Join("..", name)); err != nil && len(found) == 0 {
				t.Errorf("ARCHITECTURE.md names %s: no such file", name)
			}
		}
	}
	_, add, _ := strings.Cut(doc, "## Where to add")
	add, _, _ = strings.Cut(add, "\n## ")
	ident := regexp.MustCompile(`^(?:[A-Za-z_]\w*\.)?([A-Za-z_]\w*)$`)
	for _, m := range regexp.MustCompile("`([^`\\s]+)`").FindAllStringSubmatch(add, -1) {
		id := ident.FindStringSubmatch(m[1])
		if id == nil || strings.ContainsAny(m[1], "/") {
			continue
		}
		def := regexp.MustCompile(`(?m)(^func (\([^)]*\) )?` + id[1] + `\(|^type ` + id[1] + `\b|^\t` + id[1] + `(\(|\s))`)
		if !def.MatchString(code) {
			t.Errorf("ARCHITECTURE.md's Where to add names %s: no definition of %s in the code", m[1], id[1])
		}
	}
}

// goSources is the text of every non-test Go file of the module.
// TestArchitectureListsFilesWithoutTests: ARCHITECTURE.md's Tests section
// names exactly the production files of the packages that have no test
// file of their own (x.go without x_test.go beside it).
func TestArchitectureListsFilesWithoutTests(t *testing.T) {
	b, err := os.ReadFile("../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "\n## Tests")
	section, _, _ = strings.Cut(section, "\n## ")
	_, section, _ = strings.Cut(section, "no\ntest file of their own")
	section, _, _ = strings.Cut(section, "Redis tests")
	listed := map[string]bool{}
	dir := "." // the root package until a "dir/:" names another
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(section, -1) {
		name := m[1]
		switch {
		case strings.HasSuffix(name, "/"):
			dir = strings.TrimSuffix(name, "/")
		case strings.Contains(name, "/"):
			listed[name] = true
		default:
			listed[filepath.Join(dir, name)] = true
		}
	}
	for _, pkg := range []string{".", "adaptive", "algorithms", "jwtclaims", "luascripts", "quota", "redisstore"} {
		files, err := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			name, _ := filepath.Rel("..", f)
			_, err := os.Stat(strings.TrimSuffix(f, ".go") + "_test.go")
			if untested := err != nil; untested != listed[name] {
				t.Errorf("ARCHITECTURE.md's Tests: %s has a test file %t, listed as without one %t", name, !untested, listed[name])
			}
			delete(listed, name)
		}
	}
	for name := range listed {
		t.Errorf("ARCHITECTURE.md's Tests lists %s, which is no production file of a package it covers", name)
	}
}

func goSources(t *testing.T) string {
	t.Helper()
	var all strings.Builder
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		all.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return all.String()
}
