package redistest

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Info is a parsed INFO reply: each "name:value" line, by name. Section
// headers ("# Memory") and blank lines are left out.
type Info map[string]string

// ParseInfo parses an INFO reply; it accepts "\r\n" and "\n" line ends.
func ParseInfo(reply string) Info {
	info := Info{}
	for line := range strings.Lines(reply) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if name, value, ok := strings.Cut(line, ":"); ok {
			info[name] = value
		}
	}
	return info
}

// ReadInfo runs INFO with the given sections on c and parses the reply,
// failing t if Redis does not answer.
// Sections are asked one INFO each: Redis 6 takes one section per INFO
// (and has no errorstats before 6.2: its fields are then missing).
func ReadInfo(t testing.TB, c redis.Cmdable, sections ...string) Info {
	t.Helper()
	if len(sections) <= 1 {
		reply, err := c.Info(context.Background(), sections...).Result()
		if err != nil {
			t.Fatalf("INFO %s: %v", strings.Join(sections, " "), err)
		}
		return ParseInfo(reply)
	}
	info := Info{}
	for _, section := range sections {
		maps.Copy(info, ReadInfo(t, c, section))
	}
	return info
}

// Int is the field name as an integer, e.g. Int("used_memory"); 0 when it
// is missing or not an integer.
func (i Info) Int(name string) int64 {
	n, _ := strconv.ParseInt(i[name], 10, 64)
	return n
}

// Stat is one key of a field made of key=value pairs, as the commandstats
// and errorstats sections write them: Stat("cmdstat_eval", "calls"),
// Stat("errorstat_MOVED", "count"); 0 when either is missing.
func (i Info) Stat(name, key string) int64 {
	for pair := range strings.SplitSeq(i[name], ",") {
		if v, ok := strings.CutPrefix(pair, key+"="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// Show is "name=value", or "name missing", for a log line.
func (i Info) Show(name string) string {
	if v, ok := i[name]; ok {
		return name + "=" + v
	}
	return name + " missing"
}

// ScriptCalls is how many scripts and Functions c's server has run
// (EVAL, EVALSHA, FCALL and their _RO forms), from INFO commandstats.
func ScriptCalls(t testing.TB, c redis.Cmdable) int64 {
	t.Helper()
	info := ReadInfo(t, c, "commandstats")
	var n int64
	for _, cmd := range []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"} {
		n += info.Stat("cmdstat_"+cmd, "calls")
	}
	return n
}
