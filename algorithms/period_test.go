package algorithms

import (
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParsePeriod(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Period
		err  string
	}{
		{"day", PeriodDay, ""},
		{"week", PeriodWeek, ""},
		{"month", PeriodMonth, ""},
		{"year", PeriodYear, ""},
		{"", NoPeriod, `period: want day, week, month or year, got ""`},
		{"Day", NoPeriod, `period: want day, week, month or year, got "Day"`},
		{"fortnight", NoPeriod, `period: want day, week, month or year, got "fortnight"`},
		{"months", NoPeriod, `period: want day, week, month or year, got "months"`},
	} {
		got, err := ParsePeriod(tc.in)
		if got != tc.want || periodErrText(err) != tc.err {
			t.Errorf("ParsePeriod(%q) = %v, %q; want %v, %q", tc.in, got, periodErrText(err), tc.want, tc.err)
		}
		if err == nil && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
}

func TestPeriodJSON(t *testing.T) {
	type zone struct {
		Period Period `json:"period,omitempty"`
	}
	for _, tc := range []struct {
		p    Period
		json string
	}{
		{NoPeriod, `{}`},
		{PeriodDay, `{"period":"day"}`},
		{PeriodMonth, `{"period":"month"}`},
	} {
		b, err := json.Marshal(zone{tc.p})
		if err != nil || string(b) != tc.json {
			t.Errorf("Marshal(%v) = %s, %v; want %s", tc.p, b, err, tc.json)
		}
		var z zone
		if err := json.Unmarshal([]byte(tc.json), &z); err != nil || z.Period != tc.p {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", tc.json, z.Period, err, tc.p)
		}
	}
	var z zone
	err := json.Unmarshal([]byte(`{"period":"fortnight"}`), &z)
	if !strings.Contains(periodErrText(err), `period: want day, week, month or year, got "fortnight"`) {
		t.Errorf("Unmarshal(fortnight): got %q", periodErrText(err))
	}
	if _, err := json.Marshal(zone{Period(9)}); err == nil {
		t.Errorf("Marshal(Period(9)): got no error")
	}
}

func TestPeriodLoadTimeZone(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{"", "UTC", ""},
		{"UTC", "UTC", ""},
		{"Europe/Berlin", "Europe/Berlin", ""},
		{"Pacific/Apia", "Pacific/Apia", ""},
		{"Local", "", `time_zone: want an IANA name such as Europe/Berlin, got "Local" (the host's zone)`},
		{"Mars/Olympus", "", `time_zone: want an IANA name such as Europe/Berlin, got "Mars/Olympus": unknown time zone Mars/Olympus`},
		{"../etc/passwd", "", `time_zone: want an IANA name such as Europe/Berlin, got "../etc/passwd": time: invalid location name`},
	} {
		loc, err := LoadTimeZone(tc.in)
		if periodErrText(err) != tc.err {
			t.Errorf("LoadTimeZone(%q): got error %q, want %q", tc.in, periodErrText(err), tc.err)
			continue
		}
		if err == nil && loc.String() != tc.want {
			t.Errorf("LoadTimeZone(%q) = %v, want %v", tc.in, loc, tc.want)
		}
	}
}

// TestPeriodTZDataEmbedded: period.go imports time/tzdata, and (where
// `unshare` can make a mount namespace) a child process that sees no host
// zoneinfo and no GOROOT still loads zones. The child mounts an empty
// directory over every directory Go reads zones from.
func TestPeriodTZDataEmbedded(t *testing.T) {
	if os.Getenv("SLUICE_PERIOD_TZ_CHILD") == "1" {
		periodTZChild(t)
		return
	}
	f, err := parser.ParseFile(token.NewFileSet(), "period.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	embedded := false
	for _, imp := range f.Imports {
		embedded = embedded || imp.Path.Value == strconv.Quote("time/tzdata")
	}
	if !embedded {
		t.Errorf("period.go does not import time/tzdata")
	}
	periodTZParent(t)
}

func periodTZParent(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare: checked only that period.go imports time/tzdata")
	}
	empty := t.TempDir()
	cmd := exec.Command("unshare", "-rm", "sh", "-c", periodTZScript, "sh",
		os.Args[0], "-test.run=^TestPeriodTZDataEmbedded$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "SLUICE_PERIOD_TZ_CHILD=1", "EMPTY="+empty,
		"GOROOT="+empty, "ZONEINFO=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 77 || strings.Contains(string(out), "unshare: ") {
		t.Skipf("no mount namespace here (%v): checked only the import\n%s", err, out)
	}
	if err != nil || !strings.Contains(string(out), "zones load without a host database") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func periodTZChild(t *testing.T) {
	if _, err := os.Stat("/usr/share/zoneinfo/Europe/Berlin"); err == nil {
		t.Fatalf("the host's zoneinfo is still visible")
	}
	loc, err := LoadTimeZone("Pacific/Apia")
	if err != nil {
		t.Fatalf("LoadTimeZone: %v", err)
	}
	if _, off := time.Date(2012, 6, 1, 0, 0, 0, 0, loc).Zone(); off != 13*3600 {
		t.Fatalf("Apia's offset in June 2012 = %d, want %d", off, 13*3600)
	}
	t.Log("zones load without a host database")
}

func periodErrText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
