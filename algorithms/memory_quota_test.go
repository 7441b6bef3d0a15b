package algorithms_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/leasetwin"
)

// leasingAlgorithms are the algorithms whose zones lease quota.
var leasingAlgorithms = []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket}

// slowLimit is a limit of alg whose state barely changes within a
// second: 100 events an hour (a token bucket of burst 100 refills one
// event in 36s), so counts read the same for the lease's life.
func slowLimit(alg algorithms.Algorithm) algorithms.Limit {
	return algorithms.Limit{Algorithm: alg, Events: 100, Window: time.Hour}
}

// leasing is a request of cost on key that leases for 100ms, asking for
// units more, as holder.
func leasing(key string, l algorithms.Limit, cost, units int64, holder string) algorithms.Request {
	return algorithms.Request{Key: key, Limit: l, Cost: cost,
		Quota: algorithms.QuotaAsk{For: 100 * time.Millisecond, Units: units, Holder: holder}}
}

func allow(t *testing.T, m *algorithms.MemoryStore, at time.Time, reqs ...algorithms.Request) []algorithms.Decision {
	t.Helper()
	return m.AllowAt(at, reqs)
}

func peek(m *algorithms.MemoryStore, at time.Time, r algorithms.Request) algorithms.Decision {
	return m.PeekAt(at, []algorithms.Request{r})[0]
}

// TestQuotaGrantCounts: a grant takes its units with the request's cost:
// the decision and the next request see the remaining less both, and the
// grant reports itself as the units out.
func TestQuotaGrantCounts(t *testing.T) {
	for _, alg := range leasingAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			m := leasetwin.NewMemoryStore()
			l := slowLimit(alg)
			d := allow(t, m, t0, leasing("k", l, 1, 10, "a"))[0]
			want := algorithms.QuotaGrant{Units: 10, End: t0.Add(100 * time.Millisecond).UnixMicro(), Generation: t0.UnixMicro(), ID: 1, Out: 10, Takers: 1}
			if !d.Allowed || d.Quota != want || d.Remaining != 89 {
				t.Fatalf("got %+v, want allowed, remaining 89, grant %+v", d, want)
			}
			plain := algorithms.Request{Key: "k", Limit: l, Cost: 1}
			if got := allow(t, m, t0.Add(time.Millisecond), plain)[0]; !got.Allowed || got.Remaining != 88 {
				t.Errorf("next request: got %+v, want allowed with remaining 88", got)
			}
			if got := peek(m, t0.Add(time.Millisecond), plain); got.Quota != (algorithms.QuotaGrant{}) {
				t.Errorf("a zone that does not lease reports %+v, want no quota", got.Quota)
			}
		})
	}
}

// TestQuotaGrantHalvesRemaining: a grant is at most half of what remains
// after the request (for one holder), and never more than asked.
func TestQuotaGrantHalvesRemaining(t *testing.T) {
	for _, alg := range leasingAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			m := leasetwin.NewMemoryStore()
			d := allow(t, m, t0, leasing("k", slowLimit(alg), 1, 1000, "a"))[0]
			if d.Quota.Units != 49 || d.Remaining != 50 { // floor(99/2)
				t.Errorf("got units %d, remaining %d; want 49 and 50", d.Quota.Units, d.Remaining)
			}
		})
	}
}

// TestQuotaLeaseEnds: each algorithm's end rule.
func TestQuotaLeaseEnds(t *testing.T) {
	ask := func(l algorithms.Limit, lease time.Duration) algorithms.Request {
		return algorithms.Request{Key: "k", Limit: l, Cost: 1, Quota: algorithms.QuotaAsk{For: lease, Units: 10, Holder: "a"}}
	}
	t.Run("fixed_window ends with its window", func(t *testing.T) {
		m := leasetwin.NewMemoryStore()
		l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 100, Window: time.Second}
		at := t0.Add(900 * time.Millisecond)
		if d := allow(t, m, at, ask(l, 250*time.Millisecond))[0]; d.Quota.End != t0.Add(time.Second).UnixMicro() {
			t.Errorf("near the window's end: got end %d, want the window's end %d", d.Quota.End, t0.Add(time.Second).UnixMicro())
		}
		at = t0.Add(time.Second)
		if d := allow(t, m, at, ask(l, 250*time.Millisecond))[0]; d.Quota.End != at.Add(250*time.Millisecond).UnixMicro() {
			t.Errorf("at the window's start: got end %d, want now + 250ms", d.Quota.End)
		}
	})
	t.Run("fixed_window with a period ends with its period", func(t *testing.T) {
		m := leasetwin.NewMemoryStore()
		l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 100, Calendar: algorithms.Calendar{Period: algorithms.PeriodDay, Location: time.UTC}}
		midnight := time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC)
		if d := allow(t, m, midnight.Add(-50*time.Millisecond), ask(l, 250*time.Millisecond))[0]; d.Quota.End != midnight.UnixMicro() {
			t.Errorf("got end %d, want midnight %d", d.Quota.End, midnight.UnixMicro())
		}
	})
	t.Run("sliding_window ends with its slot", func(t *testing.T) {
		m := leasetwin.NewMemoryStore()
		l := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 100, Window: time.Second} // 50ms slots
		if d := allow(t, m, t0.Add(10*time.Millisecond), ask(l, 250*time.Millisecond))[0]; d.Quota.End != t0.Add(50*time.Millisecond).UnixMicro() {
			t.Errorf("got end %d, want the slot's end %d", d.Quota.End, t0.Add(50*time.Millisecond).UnixMicro())
		}
		if d := allow(t, m, t0.Add(60*time.Millisecond), ask(l, 10*time.Millisecond))[0]; d.Quota.End != t0.Add(70*time.Millisecond).UnixMicro() {
			t.Errorf("a short lease: got end %d, want now + 10ms", d.Quota.End)
		}
	})
	t.Run("sliding_log counts the lease until its end + window", func(t *testing.T) {
		m := leasetwin.NewMemoryStore()
		l := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 10, Window: 2 * time.Second} // leases of at most 40ms (SlidingLogLeaseParts)
		d := allow(t, m, t0, ask(l, 100*time.Millisecond))[0]                                        // floor(9/2) = 4 units
		if d.Quota.Units != 4 || d.Quota.End != t0.Add(40*time.Millisecond).UnixMicro() {
			t.Fatalf("got %+v, want 4 units until t0 + 40ms", d.Quota)
		}
		plain := algorithms.Request{Key: "k", Limit: l, Cost: 1}
		for _, c := range []struct {
			at   time.Duration
			want int64
		}{{0, 5}, {2 * time.Second, 6}, {2040*time.Millisecond - time.Microsecond, 6}, {2040 * time.Millisecond, 10}} {
			if got := peek(m, t0.Add(c.at), plain).Remaining; got != c.want {
				t.Errorf("at t0 + %v: got remaining %d, want %d", c.at, got, c.want)
			}
		}
	})
	t.Run("token_bucket is burst - units until the end", func(t *testing.T) {
		// 10 events a second, burst 20: 11 taken at t0 (10, then 1 with
		// the grant) are 6 at the lease's end, t0 + 500ms, and the grant's
		// 4 units are taken then; until then the bucket is one of 16.
		m := leasetwin.NewMemoryStore()
		l := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 100, Window: 10 * time.Second, Burst: 20} // leases of at most 500ms
		plain := algorithms.Request{Key: "k", Limit: l, Cost: 1}
		allow(t, m, t0, algorithms.Request{Key: "k", Limit: l, Cost: 10})
		d := allow(t, m, t0, ask(l, 500*time.Millisecond))[0] // floor(9/2) = 4 units
		if d.Quota.Units != 4 || d.Quota.End != t0.Add(500*time.Millisecond).UnixMicro() {
			t.Fatalf("got %+v, want 4 units until t0 + 500ms", d.Quota)
		}
		for _, c := range []struct {
			at   time.Duration
			want int64 // 16 less 11 drained since t0
		}{{100 * time.Millisecond, 6}, {300 * time.Millisecond, 8}, {499 * time.Millisecond, 9}} {
			if got := peek(m, t0.Add(c.at), plain).Remaining; got != c.want {
				t.Errorf("at t0 + %v: got remaining %d, want %d", c.at, got, c.want)
			}
		}
		for i := range 6 {
			if d := allow(t, m, t0.Add(100*time.Millisecond), plain)[0]; !d.Allowed {
				t.Fatalf("request %d of 6 at t0 + 100ms denied", i+1)
			}
		}
		d = allow(t, m, t0.Add(100*time.Millisecond), plain)[0]
		if d.Allowed || d.RetryAfter != 100*time.Millisecond {
			t.Errorf("the 7th: got %+v, want denied for one event (100ms)", d)
		}
		if got := peek(m, t0.Add(900*time.Millisecond), plain).Remaining; got != 8 {
			t.Errorf("400ms after the end: got remaining %d, want 8 (16 at the end, less 4 drained)", got)
		}
	})
}

// TestQuotaAllOrNothing: a request gets a grant in every zone or in none:
// none when a zone does not lease, asks for nothing, is a dry run, or
// would get under 2 units.
func TestQuotaAllOrNothing(t *testing.T) {
	for _, alg := range leasingAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			l, small := slowLimit(alg), slowLimit(alg)
			small.Events = 4 // floor((4-1)/2) = 1 unit: too few
			for _, c := range []struct {
				name  string
				other algorithms.Request
			}{
				{"a zone that does not lease", algorithms.Request{Key: "o", Limit: l, Cost: 1}},
				{"a zone that asks for nothing", leasing("o", l, 1, 0, "a")},
				{"a dry-run zone", func() algorithms.Request { r := leasing("o", l, 1, 10, "a"); r.DryRun = true; return r }()},
				{"a zone that would get 1 unit", leasing("o", small, 1, 10, "a")},
			} {
				m := leasetwin.NewMemoryStore()
				ds := allow(t, m, t0, leasing("k", l, 1, 10, "a"), c.other)
				if !ds[0].Allowed || !ds[1].Allowed || ds[0].Quota.Units != 0 || ds[1].Quota.Units != 0 {
					t.Errorf("%s: got %+v and %+v, want both allowed without a grant", c.name, ds[0], ds[1])
				}
				if got := peek(m, t0, leasing("k", l, 1, 0, "a")); got.Remaining != 99 || got.Quota.Out != 0 {
					t.Errorf("%s: the leasing zone's key has remaining %d and %d out, want 99 and none", c.name, got.Remaining, got.Quota.Out)
				}
			}
			m := leasetwin.NewMemoryStore()
			ds := allow(t, m, t0, leasing("k", l, 1, 10, "a"), leasing("o", l, 2, 5, "a"))
			if ds[0].Quota.Units != 10 || ds[1].Quota.Units != 5 || ds[0].Remaining != 89 || ds[1].Remaining != 93 {
				t.Errorf("two leasing zones: got %+v and %+v, want 10 and 5 units", ds[0], ds[1])
			}
		})
	}
}

// TestQuotaHolders: a grant is at most the remaining over twice the
// instances that recently held leases on the key, the asker included.
func TestQuotaHolders(t *testing.T) {
	m := leasetwin.NewMemoryStore()
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1000, Window: time.Hour}
	steps := []struct {
		holder    string
		at        time.Duration
		wantUnits int64
	}{
		{"a", 0, 499},                    // floor(999 / 2)
		{"b", 0, 124},                    // floor(499 / 4): a holds one
		{"a", 10 * time.Millisecond, 93}, // floor(374 / 4): a and b
		{"c", 20 * time.Millisecond, 46}, // floor(280 / 6)
		// a's and b's latest ended 100ms and more ago: c alone counts
		{"a", 215 * time.Millisecond, 58}, // floor(233 / 4)
		{"d", 500 * time.Millisecond, 87}, // floor(174 / 2): nobody's lease ended within 100ms
	}
	for _, s := range steps {
		d := allow(t, m, t0.Add(s.at), leasing("k", l, 1, 1000, s.holder))[0]
		if d.Quota.Units != s.wantUnits {
			t.Errorf("%s at +%v: got %d units, want %d", s.holder, s.at, d.Quota.Units, s.wantUnits)
		}
	}
}

// TestQuotaMin: no grant anywhere when a lease would end sooner than its
// ask's Min.
func TestQuotaMin(t *testing.T) {
	m := leasetwin.NewMemoryStore()
	fw := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 100, Window: time.Second}
	sw := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 100, Window: time.Second}
	r, other := leasing("k", fw, 1, 10, "a"), leasing("o", sw, 1, 10, "a")
	r.Quota.Min, other.Quota.Min = 20*time.Millisecond, 20*time.Millisecond
	at := t0.Add(40 * time.Millisecond) // sw's slot ends in 10ms
	ds := allow(t, m, at, r, other)
	if ds[0].Quota.Units != 0 || ds[1].Quota.Units != 0 {
		t.Errorf("got %+v and %+v, want no grant", ds[0].Quota, ds[1].Quota)
	}
	at = t0.Add(50 * time.Millisecond) // a new slot: 50ms left
	if ds = allow(t, m, at, r, other); ds[0].Quota.Units != 10 || ds[1].Quota.Units != 10 {
		t.Errorf("in a new slot: got %+v and %+v, want both granted", ds[0].Quota, ds[1].Quota)
	}
	r.Quota.Min = 101 * time.Millisecond
	if d := allow(t, m, at, r)[0]; d.Quota.Units != 0 {
		t.Errorf("a Min over the lease: got %+v, want no grant", d.Quota)
	}
}

// TestQuotaGiveBack: a give-back of a grant's unused units frees them,
// with its generation, before its end plus quota_lease.
func TestQuotaGiveBack(t *testing.T) {
	for _, alg := range leasingAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			m := leasetwin.NewMemoryStore()
			r := leasing("k", slowLimit(alg), 1, 10, "a")
			d := allow(t, m, t0, r)[0]
			at := t0.Add(50 * time.Millisecond)
			other := d
			other.Quota.Generation++
			m.GiveBackAt(at, []algorithms.GiveBack{algorithms.GiveBackOf(r, other, 7)})
			if got := peek(m, at, r); got.Remaining != 89 || got.Quota.Out != 10 {
				t.Errorf("after a give-back of another generation: got remaining %d, %d out; want 89 and 10", got.Remaining, got.Quota.Out)
			}
			m.GiveBackAt(at, []algorithms.GiveBack{algorithms.GiveBackOf(r, d, 7)})
			got := peek(m, at, r)
			if got.Remaining != 96 || got.Quota.Out != 3 {
				t.Errorf("after giving back 7 of 10: got remaining %d, %d out; want 96 and 3", got.Remaining, got.Quota.Out)
			}
		})
	}
}

// TestQuotaGiveBackAnyOrder: a holder's give-backs of two grants land in
// either order (they travel in separate calls), each once. token_bucket
// takes back only its latest grant (TestQuotaGiveBackRefused).
func TestQuotaGiveBackAnyOrder(t *testing.T) {
	for _, alg := range leasingAlgorithms {
		if alg == algorithms.TokenBucket {
			continue
		}
		t.Run(string(alg), func(t *testing.T) {
			m := leasetwin.NewMemoryStore()
			r := leasing("k", slowLimit(alg), 1, 10, "a")
			first := allow(t, m, t0, r)[0]
			second := allow(t, m, t0.Add(time.Millisecond), r)[0]
			if first.Quota.Units != 10 || second.Quota.Units != 10 || second.Remaining != 78 {
				t.Fatalf("grants %+v and %+v, want 10 units each, 78 left", first, second)
			}
			earlier := algorithms.GiveBackOf(r, first, 7)
			later := algorithms.GiveBackOf(r, second, 5)
			at := t0.Add(50 * time.Millisecond)
			for _, gb := range []algorithms.GiveBack{later, earlier, earlier, later} { // the second of each: sent twice
				m.GiveBackAt(at, []algorithms.GiveBack{gb})
			}
			if got := peek(m, at, r); got.Remaining != 78+12 || got.Quota.Out != 8 {
				t.Errorf("after giving back 5 of the later grant, then 7 of the earlier: remaining %d, %d out; want %d and 8",
					got.Remaining, got.Quota.Out, 78+12)
			}
		})
	}
}

// TestQuotaGiveBackAfterUnitsEnded: a grant made once every lease had
// ended starts the units out afresh, so a give-back of an earlier grant
// that lands after it returns its units to the state but takes none off
// the later grant's units out.
func TestQuotaGiveBackAfterUnitsEnded(t *testing.T) {
	for _, alg := range leasingAlgorithms {
		if alg == algorithms.TokenBucket { // its give-back counts only before its lease's end
			continue
		}
		t.Run(string(alg), func(t *testing.T) {
			m := leasetwin.NewMemoryStore()
			r := leasing("k", slowLimit(alg), 1, 10, "a")
			first := allow(t, m, t0, r)[0]
			second := allow(t, m, t0.Add(150*time.Millisecond), r)[0] // first's lease ended at 100ms
			if first.Quota.Units != 10 || second.Quota.Units != 10 || second.Quota.Out != 10 {
				t.Fatalf("grants %+v and %+v, want 10 units each, 10 out after the second", first, second)
			}
			at := t0.Add(160 * time.Millisecond) // before first's end + quota_lease
			m.GiveBackAt(at, []algorithms.GiveBack{algorithms.GiveBackOf(r, first, 7)})
			if got := peek(m, at, r); got.Remaining != second.Remaining+7 || got.Quota.Out != 10 {
				t.Errorf("after giving back 7 of the first grant: remaining %d, %d out; want %d and 10 (the second's)",
					got.Remaining, got.Quota.Out, second.Remaining+7)
			}
		})
	}
}

// TestQuotaGiveBacksBounded: a holder's grants given back are kept until
// their give-back time is over, at most 64 of them: a give-back past that
// is refused, so that one's work stays bounded.
func TestQuotaGiveBacksBounded(t *testing.T) {
	m := leasetwin.NewMemoryStore()
	r := leasing("k", algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 100_000, Window: time.Hour}, 1, 10, "a")
	var gbs []algorithms.GiveBack
	for i := range 65 {
		d := allow(t, m, t0.Add(time.Duration(i)*time.Microsecond), r)[0]
		gbs = append(gbs, algorithms.GiveBackOf(r, d, 5))
	}
	at := t0.Add(time.Millisecond)
	before := peek(m, at, r).Remaining
	m.GiveBackAt(at, gbs[:64])
	after64 := peek(m, at, r).Remaining
	m.GiveBackAt(at, gbs[64:])
	if got := peek(m, at, r).Remaining; after64 != before+64*5 || got != after64 {
		t.Errorf("remaining %d, %d after 64 give-backs of 5, %d after the 65th; want %d and the 65th refused",
			before, after64, got, before+64*5)
	}
}

// TestQuotaGiveBackRefused: a give-back changes nothing after a reset, an
// override set or cleared, past its lease's end plus quota_lease, and for
// token_bucket past its lease's end or after a later grant.
func TestQuotaGiveBackRefused(t *testing.T) {
	type when struct {
		name   string
		before func(m *algorithms.MemoryStore, r algorithms.Request) time.Time // returns the give-back's time
	}
	reset := when{"after a reset", func(m *algorithms.MemoryStore, r algorithms.Request) time.Time {
		m.ResetAt(t0.Add(time.Millisecond), r.Key)
		allow(t, m, t0.Add(2*time.Millisecond), algorithms.Request{Key: r.Key, Limit: r.Limit, Cost: 11})
		return t0.Add(3 * time.Millisecond)
	}}
	set := when{"after an override", func(m *algorithms.MemoryStore, r algorithms.Request) time.Time {
		if err := m.SetOverrideAt(t0.Add(time.Millisecond), r.Key, algorithms.Override{Events: 100}, 0); err != nil {
			t.Fatal(err)
		}
		return t0.Add(2 * time.Millisecond)
	}}
	cleared := when{"after an override cleared", func(m *algorithms.MemoryStore, r algorithms.Request) time.Time {
		m.ClearOverrideAt(t0.Add(time.Millisecond), r.Key)
		return t0.Add(2 * time.Millisecond)
	}}
	late := when{"past its end + quota_lease + the grace", func(_ *algorithms.MemoryStore, _ algorithms.Request) time.Time {
		return t0.Add(200*time.Millisecond + algorithms.QuotaGiveBackGrace)
	}}
	for _, alg := range leasingAlgorithms {
		cases := []when{reset, set, cleared, late}
		if alg == algorithms.TokenBucket {
			cases = append(cases, when{"past its end", func(_ *algorithms.MemoryStore, _ algorithms.Request) time.Time {
				return t0.Add(100 * time.Millisecond)
			}}, when{"after a later grant", func(m *algorithms.MemoryStore, r algorithms.Request) time.Time {
				r.Quota.Holder = "b"
				if d := allow(t, m, t0.Add(time.Millisecond), r)[0]; d.Quota.Units == 0 {
					t.Fatalf("the later request got no grant: %+v", d)
				}
				return t0.Add(2 * time.Millisecond)
			}})
		}
		for _, c := range cases {
			t.Run(string(alg)+" "+c.name, func(t *testing.T) {
				m := leasetwin.NewMemoryStore()
				r := leasing("k", slowLimit(alg), 1, 10, "a")
				d := allow(t, m, t0, r)[0]
				at := c.before(m, r)
				before := peek(m, at, r)
				m.GiveBackAt(at, []algorithms.GiveBack{algorithms.GiveBackOf(r, d, 10)})
				if got := peek(m, at, r); got.Remaining != before.Remaining || got.Quota != before.Quota {
					t.Errorf("got remaining %d, %+v; want %d, %+v as before the give-back", got.Remaining, got.Quota, before.Remaining, before.Quota)
				}
			})
		}
	}
}

// TestQuotaGenerations: a key's first generation is its first grant's
// µs (above those of bookkeeping a store lost); a reset and an override
// each raise it and clear its units out.
func TestQuotaGenerations(t *testing.T) {
	m := leasetwin.NewMemoryStore()
	r := leasing("k", slowLimit(algorithms.FixedWindow), 1, 10, "a")
	g := t0.UnixMicro()
	if d := allow(t, m, t0, r)[0]; d.Quota.Generation != g || d.Quota.Out != 10 {
		t.Fatalf("got %+v, want generation %d with 10 out", d.Quota, g)
	}
	m.ResetAt(t0, r.Key)
	if q := peek(m, t0, r).Quota; q.Generation != g+1 || q.Out != 0 || q.End != 0 || q.ID != 1 {
		t.Errorf("after a reset: got %+v, want generation %d, nothing out, grant ID 1", q, g+1)
	}
	if err := m.SetOverrideAt(t0, r.Key, algorithms.Override{Events: 50}, 0); err != nil {
		t.Fatal(err)
	}
	m.ClearOverrideAt(t0, r.Key)
	if q := peek(m, t0, r).Quota; q.Generation != g+3 {
		t.Errorf("after an override set and cleared: got %+v, want generation %d", q, g+3)
	}
	// the generation outlives any lease given back: 10s and 1s
	if q := peek(m, t0.Add(algorithms.MaxQuotaLease), r).Quota; q.Generation != g+3 {
		t.Errorf("10s later: got %+v, want generation %d", q, g+3)
	}
	m.ResetAt(t0.Add(time.Hour), "fresh")
	if q, want := peek(m, t0.Add(time.Hour), leasing("fresh", r.Limit, 1, 0, "a")).Quota, t0.Add(time.Hour).UnixMicro()+1; q.Generation != want {
		t.Errorf("a reset of a key without leases: got %+v, want generation %d (the reset's µs, raised)", q, want)
	}
}

// TestQuotaBanTrips: a zone with a ban that leases trips it only when the
// request would be denied with the units out counted as free.
func TestQuotaBanTrips(t *testing.T) {
	m := leasetwin.NewMemoryStore()
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Hour}
	r := leasing("k", l, 1, 4, "a")
	r.BanSeconds = 60
	if d := allow(t, m, t0, r)[0]; d.Quota.Units != 4 {
		t.Fatalf("got %+v, want 4 units", d.Quota)
	}
	r.Quota.Units = 0
	for range 5 {
		if d := allow(t, m, t0, r)[0]; !d.Allowed {
			t.Fatalf("got %+v, want allowed", d)
		}
	}
	d := allow(t, m, t0, r)[0]
	if d.Allowed || d.Banned || d.BanStarted || d.Quota.Out != 4 {
		t.Errorf("denied with 4 out: got %+v, want denied without a ban", d)
	}
	big := r
	big.Cost = 5
	if d := allow(t, m, t0.Add(time.Millisecond), big)[0]; !d.BanStarted {
		t.Errorf("a cost of 5 with 4 out: got %+v, want the ban tripped", d)
	}
	m.ResetAt(t0.Add(2*time.Millisecond), r.Key)
	r.Quota.Units = 4
	allow(t, m, t0.Add(2*time.Millisecond), r)
	r.Quota.Units = 0
	for range 5 {
		allow(t, m, t0.Add(2*time.Millisecond), r)
	}
	if d := allow(t, m, t0.Add(102*time.Millisecond), r)[0]; !d.BanStarted || d.Quota.Out != 0 {
		t.Errorf("denied once the lease ended: got %+v, want the ban tripped", d)
	}
}

// TestQuotaPeekReportsOut: a look at a leasing zone reports the units
// out and their end while a lease lasts, and writes nothing.
func TestQuotaPeekReportsOut(t *testing.T) {
	for _, alg := range leasingAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			m := leasetwin.NewMemoryStore()
			r := leasing("k", slowLimit(alg), 1, 10, "a")
			d := allow(t, m, t0, r)[0]
			want := algorithms.QuotaGrant{End: d.Quota.End, Generation: d.Quota.Generation, ID: 1, Out: 10, Takers: 1}
			if got := peek(m, t0.Add(99*time.Millisecond), r); got.Quota != want || got.Remaining != 89 {
				t.Errorf("during the lease: got %+v, want remaining 89 and %+v", got, want)
			}
			if got := peek(m, t0.Add(99*time.Millisecond), r); got.Quota != want {
				t.Errorf("a second look: got %+v, want %+v", got.Quota, want)
			}
			if got := peek(m, t0.Add(100*time.Millisecond), r).Quota; got != (algorithms.QuotaGrant{Generation: d.Quota.Generation, ID: 1, Takers: 1}) {
				t.Errorf("at its end: got %+v, want nothing out", got)
			}
			plain := r
			plain.Quota.Units = 0
			if got := allow(t, m, t0.Add(time.Millisecond), plain)[0].Quota; got != want {
				t.Errorf("a request asking nothing: got %+v, want %+v", got, want)
			}
		})
	}
}

// TestQuotaMetaBounded: a flood of keys given leases keeps the store's
// lease bookkeeping within its bound, as its keys are.
func TestQuotaMetaBounded(t *testing.T) {
	m, book := leasetwin.NewMemoryStoreOf(64)
	l := slowLimit(algorithms.FixedWindow)
	for i := range 10_000 {
		m.AllowAt(t0, []algorithms.Request{leasing(fmt.Sprint("k", i), l, 1, 10, "a")})
		m.ResetAt(t0, fmt.Sprint("r", i))
	}
	if got := book.Keys(); got > 64 {
		t.Errorf("keys with lease bookkeeping: got %d, want at most 64", got)
	}
}

// TestQuotaNeverOver: instances taking leases, using them, renewing and
// giving them back, with plain requests between, at random on one clock,
// never admit more than each algorithm's definition allows: per window
// (fixed_window), in every trailing window (sliding_window, sliding_log),
// in every interval of every length (token_bucket: burst + rate × length).
func TestQuotaNeverOver(t *testing.T) {
	for _, alg := range leasingAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			for seed := range uint64(quotaSeeds) {
				l := algorithms.Limit{Algorithm: alg, Events: 200, Window: 10 * time.Second}
				if alg == algorithms.TokenBucket {
					l.Burst = 100
				}
				admitted, leased := replayLeases(t, leasetwin.NewMemoryStore(), l, rand.New(rand.NewPCG(seed, 7)))
				if len(admitted) < 500 || leased < len(admitted)/25 {
					t.Fatalf("seed %d: %d admissions, %d from leases: the replay does not test much", seed, len(admitted), leased)
				}
				if over := overDefinition(l, admitted); over != "" {
					t.Errorf("seed %d: %s", seed, over)
				}
			}
		})
	}
}

// quotaSeeds is how many replays TestQuotaNeverOver runs per algorithm.
const quotaSeeds = 5

// heldLease is a lease as an instance holds it in replayLeases.
type heldLease struct {
	req  algorithms.Request
	at   int64
	g    algorithms.QuotaGrant
	used int64
}

// replayLeases runs three instances' requests on key "k" of l over 20s of
// a clock stepping by up to 4ms, 120ms or 40ms, a second of each in turn, and returns the time (µs) of each unit
// admitted, from the store or from a lease, and how many were from leases.
func replayLeases(t *testing.T, m *algorithms.MemoryStore, l algorithms.Limit, rnd *rand.Rand) ([]int64, int) {
	t.Helper()
	held := make([][]heldLease, 3)
	var admitted []int64
	leased := 0
	admit := func(at, units int64) {
		for range units {
			admitted = append(admitted, at)
		}
	}
	now := t0
	for now.Before(t0.Add(60 * time.Second)) {
		// demand over the limit for a second, then under it, then about it
		step := []int{10_000, 300_000, 100_000}[now.Sub(t0)/(3*time.Second)%3]
		now = now.Add(time.Duration(rnd.IntN(step)) * time.Microsecond)
		us := now.UnixMicro()
		i := rnd.IntN(len(held))
		cost := int64(1 + rnd.IntN(3))
		// end or give back some leases: ended ones, and now and then a live one
		kept := held[i][:0]
		for _, h := range held[i] {
			if us < h.g.End && rnd.IntN(20) > 0 {
				kept = append(kept, h)
				continue
			}
			if unused := h.g.Units - h.used; unused > 0 && rnd.IntN(4) > 0 { // some give-backs come late
				m.GiveBackAt(now, []algorithms.GiveBack{algorithms.GiveBackOf(h.req, algorithms.Decision{At: h.at, Quota: h.g}, unused)})
			}
		}
		held[i] = kept
		taken := false
		for k := range held[i] {
			if h := &held[i][k]; us < h.g.End && h.g.Units-h.used >= cost {
				h.used += cost
				admit(us, cost)
				leased += int(cost)
				taken = true
				break
			}
		}
		if taken {
			continue
		}
		r := algorithms.Request{Key: "k", Limit: l, Cost: cost, Quota: algorithms.QuotaAsk{
			For: []time.Duration{250 * time.Millisecond, time.Second, 3 * time.Second}[rnd.IntN(3)], Units: int64(rnd.IntN(30)),
			Holder: fmt.Sprint("instance", i),
		}}
		if rnd.IntN(5) == 0 {
			r.Quota = algorithms.QuotaAsk{} // a zone of the same key that does not lease
		}
		d := m.AllowAt(now, []algorithms.Request{r})[0]
		if !d.Allowed {
			continue
		}
		admit(us, cost)
		if d.Quota.Units > 0 {
			held[i] = append(held[i], heldLease{req: r, at: d.At, g: d.Quota})
		}
	}
	return admitted, leased
}

// overDefinition says where admitted (sorted times in µs, one per unit)
// passes l's definition, or "".
func overDefinition(l algorithms.Limit, admitted []int64) string {
	window := l.Window.Microseconds()
	switch l.Algorithm {
	case algorithms.FixedWindow:
		counts := map[int64]int64{}
		for _, at := range admitted {
			if counts[at/window]++; counts[at/window] > l.Events {
				return fmt.Sprintf("window of %d: more than %d admitted", at/window*window, l.Events)
			}
		}
	case algorithms.SlidingWindow, algorithms.SlidingLog:
		first := 0
		for last, at := range admitted { // the trailing window (at - window, at]
			for admitted[first] <= at-window {
				first++
			}
			if n := int64(last - first + 1); n > l.Events {
				return fmt.Sprintf("%d admitted in the window ending at %d, limit %d", n, at, l.Events)
			}
		}
	case algorithms.TokenBucket:
		for i := range admitted {
			for j := i; j < len(admitted); j++ { // [admitted[i], admitted[j]]
				n := int64(j - i + 1)
				if n*window > l.Capacity()*window+l.Events*(admitted[j]-admitted[i]) {
					return fmt.Sprintf("%d admitted in [%d, %d], over burst + rate × length", n, admitted[i], admitted[j])
				}
			}
		}
	}
	return ""
}

// TestQuotaGrantOnlyKeepsCounts: a grant-only call (cost 0) that gets no
// grant, in a later slot or window part, keeps what the key counted.
func TestQuotaGrantOnlyKeepsCounts(t *testing.T) {
	for _, alg := range leasingAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			m := leasetwin.NewMemoryStore()
			l := slowLimit(alg)
			allow(t, m, t0, algorithms.Request{Key: "k", Limit: l, Cost: 5})
			later := t0.Add(5 * time.Minute) // sliding_window's slots are 3 minutes
			if alg == algorithms.TokenBucket {
				later = t0.Add(time.Millisecond) // before an event drains
			}
			small := leasing("k", l, 0, 1, "a") // asks 1 unit: under 2, no grant
			if d := allow(t, m, later, small)[0]; !d.Allowed || d.Quota.Units != 0 {
				t.Fatalf("got %+v, want allowed without a grant", d)
			}
			if got := peek(m, later, small).Remaining; got != 95 {
				t.Errorf("got remaining %d, want 95", got)
			}
		})
	}
}

// TestQuotaMetaExpires: a key's lease bookkeeping lasts its latest lease
// end + quota_lease + the give-back grace + 1s after a grant, and at least
// 22s after a reset.
func TestQuotaMetaExpires(t *testing.T) {
	m := leasetwin.NewMemoryStore()
	r := leasing("k", slowLimit(algorithms.FixedWindow), 1, 10, "a")
	allow(t, m, t0, r) // ends at t0 + 100ms
	gone := t0.Add(1200*time.Millisecond + algorithms.QuotaGiveBackGrace)
	if q := peek(m, gone.Add(-time.Microsecond), r).Quota; q.ID != 1 {
		t.Errorf("just before its expiry: got %+v, want grant 1 remembered", q)
	}
	if q := peek(m, gone, r).Quota; q != (algorithms.QuotaGrant{}) {
		t.Errorf("at its expiry: got %+v, want nothing", q)
	}
	m.ResetAt(gone, r.Key)
	if q, want := peek(m, gone.Add(22*time.Second-time.Microsecond), r).Quota, gone.UnixMicro()+1; q.Generation != want {
		t.Errorf("22s after a reset, less 1µs: got %+v, want generation %d (the reset's µs, raised)", q, want)
	}
	if q := peek(m, gone.Add(22*time.Second), r).Quota; q != (algorithms.QuotaGrant{}) {
		t.Errorf("22s after a reset: got %+v, want nothing", q)
	}
}
