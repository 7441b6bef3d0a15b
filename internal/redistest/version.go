package redistest

import (
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"testing"
)

// Version is what a server binary says it is: its name ("redis" or
// "valkey") and version, from `redis-server --version`.
type Version struct {
	Name                string // "redis" or "valkey"
	Major, Minor, Patch int
}

// String is e.g. "valkey 8.1.1", as Sluice's provision log writes it.
func (v Version) String() string {
	return v.Name + " " + strconv.Itoa(v.Major) + "." + strconv.Itoa(v.Minor) + "." + strconv.Itoa(v.Patch)
}

// Functions reports whether the server has Redis Functions (FUNCTION,
// FCALL): Redis 7 and later, and every Valkey.
func (v Version) Functions() bool { return v.Name == "valkey" || v.Major >= 7 }

var (
	versionsMu sync.Mutex
	versions   = map[string]Version{}
	versionRE  = regexp.MustCompile(`^(Redis|Valkey) server v=(\d+)\.(\d+)\.(\d+)`)
)

// ServerVersion is the version of the server the tests run (Binary).
func ServerVersion(t testing.TB) Version {
	t.Helper()
	return versionOf(t, Binary(t))
}

func versionOf(t testing.TB, bin string) Version {
	t.Helper()
	versionsMu.Lock()
	defer versionsMu.Unlock()
	if v, ok := versions[bin]; ok {
		return v
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("%s --version: cannot read %q", bin, out)
	}
	v := Version{Name: map[string]string{"Redis": "redis", "Valkey": "valkey"}[string(m[1])]}
	v.Major, _ = strconv.Atoi(string(m[2]))
	v.Minor, _ = strconv.Atoi(string(m[3]))
	v.Patch, _ = strconv.Atoi(string(m[4]))
	versions[bin] = v
	return v
}

// forVersion drops the options the server does not know: Redis 6 has no
// enable-debug-command (DEBUG is always on there).
func forVersion(v Version, args []string) []string {
	if v.Name != "redis" || v.Major >= 7 {
		return args
	}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if args[i] == "--enable-debug-command" && i+1 < len(args) {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}
