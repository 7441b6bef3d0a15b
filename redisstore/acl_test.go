package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// The tests here run the store as a Redis ACL user: one without the reset
// channel's permission, and one with exactly the rules docs/operations.md
// gives.

// hasChannelRules reports whether the server has ACL channel rules
// (resetchannels, &pattern): Redis 6.2 and later, and every Valkey. On
// Redis 6.0 every user may use every channel.
func hasChannelRules(v redistest.Version) bool {
	return v.Name == "valkey" || v.Major > 6 || (v.Major == 6 && v.Minor >= 2)
}

// aclUser creates user on srv with rules (and password "pw") and returns
// a client authenticated as it.
func aclUser(t *testing.T, srv *redistest.Server, user string, rules ...string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := srv.Client(t).Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s %v: %v", user, rules, err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: "pw"})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestResetWithoutChannelRights: a user that may not use the reset
// channel still resets the key and lifts its ban; Reset says, as an
// UnannouncedError naming the channel's ACL rule, that the other instances
// were not told. Its subscription fails, is reported and tried again, and
// is live once the user gets the channel.
func TestResetWithoutChannelRights(t *testing.T) {
	srv := redistest.Start(t)
	if v := redistest.ServerVersion(t); !hasChannelRules(v) {
		t.Skipf("%s has no ACL channel rules (Redis 6.2 added them): every user may use every channel", v)
	}
	ctx := context.Background()
	client := aclUser(t, srv, "nochan", "~*", "+@all", "resetchannels")
	store, _ := algorithms.Guard(New(client, Options{}))
	req := []algorithms.Request{{Key: fmt.Sprintf("acl:{%d}", rand.Int64()),
		Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}, Cost: 1, BanSeconds: 3600}}
	_, _ = store.Allow(ctx, req)
	if ds, err := store.Allow(ctx, req); err != nil || !ds[0].BanStarted {
		t.Fatalf("the trip: got %+v, %v, want a ban", ds, err)
	}

	err := store.Reset(ctx, req[0].Key)
	var unannounced *algorithms.UnannouncedError
	if !errors.As(err, &unannounced) || !strings.Contains(err.Error(), "&"+ResetChannel) {
		t.Fatalf("Reset: error %v, want an UnannouncedError naming the ACL rule &%s", err, ResetChannel)
	}
	if n := srv.Client(t).Exists(ctx, req[0].Key, BanKey(req[0].Key)).Val(); n != 0 {
		t.Errorf("after Reset: %d of the key's state and ban left, want none", n)
	}
	if ds, err := store.Allow(ctx, req); err != nil || !ds[0].Allowed {
		t.Errorf("after Reset: got %+v, %v, want the key admitted again", ds, err)
	}

	failures, ups := make(chan error, 16), make(chan struct{}, 16)
	forgotten := make(chan string, 16)
	sub := SubscribeResets(client, func(key string) { forgotten <- key },
		func(err error, _ time.Duration) { failures <- err }, func() { ups <- struct{}{} })
	defer sub.Stop()
	select {
	case err := <-failures:
		if !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "&"+ResetChannel) {
			t.Errorf("subscription failure %q, want NOPERM and the ACL rule &%s", err, ResetChannel)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the refused subscription was not reported")
	}
	if sub.Live() {
		t.Error("Live after a refused subscription, want false")
	}

	// once the user may use the channel, a retry subscribes
	if err := srv.Client(t).Do(ctx, "ACL", "SETUSER", "nochan", "&"+ResetChannel).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ups:
	case <-time.After(3 * (resetRetryMin + 2*resetRetryMin + 4*resetRetryMin)):
		t.Fatal("no subscription after the channel was granted")
	}
	// up runs before Live says so: Live follows at once
	for deadline := time.Now().Add(time.Second); !sub.Live() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if !sub.Live() {
		t.Error("not Live once subscribed")
	}
	if err := store.Reset(ctx, req[0].Key); err != nil {
		t.Fatalf("Reset with the channel: %v", err)
	}
	select {
	case k := <-forgotten:
		if k != req[0].Key {
			t.Errorf("forgot %q, want %q", k, req[0].Key)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the reset did not reach the subscription")
	}
}

// documentedACL returns the rules of the ACL SETUSER line that
// docs/operations.md gives for Sluice's user, without the user's name and
// password, for the server version v as the docs say: Redis 6 has no
// Functions (drop +fcall and +function|load), Redis 6.0 no channel rules
// (drop resetchannels and &sluice:reset).
func documentedACL(t *testing.T, v redistest.Version) []string {
	t.Helper()
	f, err := os.Open("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[0] != "ACL" || fields[1] != "SETUSER" || fields[2] != "sluice" {
			continue
		}
		var rules []string
		for _, r := range fields[3:] {
			switch {
			case strings.HasPrefix(r, ">"), r == "on":
			case (r == "+fcall" || r == "+function|load") && !v.Functions():
			case (r == "resetchannels" || strings.HasPrefix(r, "&")) && !hasChannelRules(v):
			default:
				rules = append(rules, r)
			}
		}
		return rules
	}
	t.Fatal("docs/operations.md has no line ACL SETUSER sluice …")
	return nil
}

// TestDocumentedACL: a user with exactly the rules docs/operations.md
// gives can do everything the store does, as a Function and as a script:
// decide every algorithm (with overrides and a ban), peek, settle, set and
// clear overrides, reset and announce it, subscribe, and count top
// offenders, and list a zone's overrides.
func TestDocumentedACL(t *testing.T) {
	srv := redistest.Start(t)
	rules := documentedACL(t, redistest.ServerVersion(t))
	client := aclUser(t, srv, "sluice", rules...)
	for _, scripts := range []bool{false, true} {
		t.Run(fmt.Sprintf("scripts=%v", scripts), func(t *testing.T) {
			store := New(client, Options{Scripts: scripts})
			exerciseStore(t, store)
			if !scripts {
				return
			}
			// after SCRIPT FLUSH (a restarted Redis), EVAL carries the source
			if err := srv.Client(t).ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			req := []algorithms.Request{{Key: fmt.Sprintf("sluice:acl:flushed:{%d}", rand.Int64()),
				Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Minute}, Cost: 1}}
			if ds, err := store.Allow(context.Background(), req); err != nil || !ds[0].Allowed {
				t.Fatalf("Allow after SCRIPT FLUSH: %+v, %v", ds, err)
			}
		})
	}
	failures := make(chan error, 16)
	ups := make(chan struct{}, 1)
	sub := SubscribeResets(client, func(string) {}, func(err error, _ time.Duration) { failures <- err }, func() { ups <- struct{}{} })
	defer sub.Stop()
	select {
	case <-ups:
	case err := <-failures:
		t.Fatalf("subscription: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no subscription")
	}
	ctx := context.Background()
	top := TopSets{Client: client, Prefix: "sluice:", Zone: "acl"}
	if err := top.Add(ctx, time.Now(), []algorithms.Counted{{Key: "k", Count: 3}}); err != nil {
		t.Fatalf("top Add: %v", err)
	}
	if got, err := top.Read(ctx, time.Now()); err != nil || len(got) != 1 {
		t.Fatalf("top Read: %v, %v, want one key", got, err)
	}
	if err := client.Info(ctx, "server").Err(); err != nil {
		t.Errorf("INFO server: %v", err)
	}
	listOverridesAs(t, New(client, Options{}), srv.Client(t))
}

// listOverridesAs lists a zone's overrides with store (a user's), across
// pages and pruning the index of an override that vanished (deleted by
// admin, another user), and fails t on an error or a wrong listing.
func listOverridesAs(t *testing.T, store *Store, admin *redis.Client) {
	t.Helper()
	ctx := context.Background()
	prefix := fmt.Sprintf("sluice:acl-list-%d:", rand.Int64())
	for _, h := range []string{"a", "b", "c"} {
		if err := store.SetOverride(algorithms.WithOverrideKey(ctx, "raw-"+h), prefix+"{"+h+"}", algorithms.Override{Events: 2}, time.Hour); err != nil {
			t.Fatalf("SetOverride %s: %v", h, err)
		}
	}
	if err := store.ClearOverride(ctx, prefix+"{c}"); err != nil {
		t.Fatalf("ClearOverride: %v", err)
	}
	if err := admin.Del(ctx, OverrideKey(prefix+"{a}")).Err(); err != nil {
		t.Fatal(err)
	}
	// a page of 1: a vanished (pruned), b listed, nothing after
	list, next, err := store.ListOverrides(ctx, prefix, "", 1)
	if err != nil || len(list) != 1 || list[0].Hash != "b" || list[0].Key != "raw-b" || next != "" {
		t.Fatalf("ListOverrides: %+v, next %q, %v; want b (raw-b) alone", list, next, err)
	}
	if got, err := admin.ZRange(ctx, OverrideIndexKey(prefix), 0, -1).Result(); err != nil || len(got) != 1 || got[0] != "b" {
		t.Fatalf("index after listing: %v, %v; want [b]", got, err)
	}
}

// exerciseStore runs every kind of call the store makes on keys under
// the default key_prefix, and fails t on an error.
func exerciseStore(t *testing.T, store *Store) {
	t.Helper()
	ctx := context.Background()
	if err := store.Warm(ctx); err != nil {
		t.Fatalf("Warm: %v", err)
	}
	id := rand.Int64()
	month := algorithms.Calendar{Period: algorithms.PeriodMonth, Location: time.UTC}
	for i, l := range []algorithms.Limit{
		{Algorithm: algorithms.FixedWindow, Events: 2, Window: time.Minute},
		{Algorithm: algorithms.SlidingWindow, Events: 2, Window: time.Minute},
		{Algorithm: algorithms.SlidingLog, Events: 2, Window: time.Minute},
		{Algorithm: algorithms.TokenBucket, Events: 2, Window: time.Minute, Burst: 3},
		{Algorithm: algorithms.FixedWindow, Events: 2, Calendar: month},
		{Algorithm: algorithms.Concurrency, Events: 2, Window: time.Minute},
	} {
		key := fmt.Sprintf("sluice:acl:%d:{%d}%s", i, id, algorithms.StateSuffix(l.Algorithm)) // as the handler names it
		if l.HasPeriod() {
			l.Periods = l.Calendar.PeriodsAt(time.Now())
		}
		if err := store.SetOverride(ctx, key, algorithms.Override{Events: 3}, time.Hour); err != nil {
			t.Fatalf("%s: SetOverride: %v", l, err)
		}
		req := algorithms.Request{Key: key, Limit: l, Cost: 1, Overrides: true, BanSeconds: 60, Settles: true}
		var ds []algorithms.Decision
		for j := range 3 { // the override's 3 events: later requests update the state the first wrote
			if l.Algorithm == algorithms.Concurrency {
				req.Slot, req.BanSeconds = fmt.Sprintf("slot-%d", j), 0
			}
			var err error
			if ds, err = store.Allow(ctx, []algorithms.Request{req}); err != nil || !ds[0].Allowed {
				t.Fatalf("%s: Allow %d: %+v, %v", l, j+1, ds, err)
			}
		}
		// a denial (and with it the ban), whose Retry-After sliding_log
		// reads from the newest entries
		denied := req
		denied.Cost = 2
		if denied.Slot != "" {
			denied.Slot = "slot-denied"
		}
		if dd, err := store.Allow(ctx, []algorithms.Request{denied}); err != nil || dd[0].Allowed {
			t.Fatalf("%s: Allow over the limit: %+v, %v, want a denial", l, dd, err)
		}
		s := algorithms.Settlement{Key: key, Limit: l, At: ds[0].At, Delta: -1, Slot: req.Slot}
		if req.Slot != "" {
			s.Delta = 0
		}
		if err := store.Settle(ctx, []algorithms.Settlement{s}); err != nil {
			t.Fatalf("%s: Settle: %v", l, err)
		}
		if _, err := store.Peek(ctx, []algorithms.Request{req}); err != nil {
			t.Fatalf("%s: Peek: %v", l, err)
		}
		if err := store.Reset(ctx, key); err != nil {
			t.Fatalf("%s: Reset: %v", l, err)
		}
		if err := store.ClearOverride(ctx, key); err != nil {
			t.Fatalf("%s: ClearOverride: %v", l, err)
		}
	}
	exerciseQuotaLeases(t, store, id)
}

// exerciseQuotaLeases runs what a leasing zone does on a key named as the
// handler names it (with its state suffix, so that its ban and override
// hang off the base), for each algorithm that leases: a cold key's
// request (no bookkeeping yet), a grant, one to another holder past the
// first's give-back time (which forgets it), a give-back, and a ban
// tripped with units out, by a zone that leases and by one that does not.
func exerciseQuotaLeases(t *testing.T, store *Store, id int64) {
	t.Helper()
	ctx := context.Background()
	for _, spec := range algorithms.Specs() {
		if !spec.Leases {
			continue
		}
		key := fmt.Sprintf("sluice:acl:lease:%s:{%d}%s", spec.Name, id, algorithms.StateSuffix(spec.Name))
		ask := func(units int64, holder string) []algorithms.Request {
			return []algorithms.Request{{Key: key, Limit: algorithms.Limit{Algorithm: spec.Name, Events: 100, Window: time.Minute}, Cost: 1, BanSeconds: 60,
				Quota: algorithms.QuotaAsk{For: time.Second, Units: units, Holder: holder}}}
		}
		now := time.Now()
		if ds, err := store.AllowAt(ctx, now, ask(0, "a")); err != nil || !ds[0].Allowed {
			t.Fatalf("%s: a cold key's leasing request: %+v, %v", spec.Name, ds, err)
		}
		if ds, err := store.AllowAt(ctx, now, ask(10, "a")); err != nil || ds[0].Quota.Units == 0 {
			t.Fatalf("%s: a leasing request: %+v, %v, want a grant", spec.Name, ds, err)
		}
		later := now.Add(algorithms.MaxQuotaLease + 2*time.Second) // "a" is stale: forgotten
		req := ask(10, "b")
		ds, err := store.AllowAt(ctx, later, req)
		if err != nil || ds[0].Quota.Units == 0 {
			t.Fatalf("%s: another holder's leasing request: %+v, %v, want a grant", spec.Name, ds, err)
		}
		if err := store.GiveBackAt(ctx, later, []algorithms.GiveBack{algorithms.GiveBackOf(req[0], ds[0], ds[0].Quota.Units)}); err != nil {
			t.Fatalf("%s: give-back: %v", spec.Name, err)
		}
		if ds, err := store.AllowAt(ctx, later, ask(5, "b")); err != nil || ds[0].Quota.Units == 0 {
			t.Fatalf("%s: a grant before the ban: %+v, %v", spec.Name, ds, err)
		}
		unleased := ask(0, "")
		unleased[0].Quota, unleased[0].Cost = algorithms.QuotaAsk{}, 100
		if ds, err := store.AllowAt(ctx, later, unleased); err != nil || !ds[0].BanStarted {
			t.Fatalf("%s: a ban tripped by a zone that does not lease: %+v, %v", spec.Name, ds, err)
		}
		tripped := ask(0, "b")
		tripped[0].Cost = 100
		if ds, err := store.AllowAt(ctx, later, tripped); err != nil || !ds[0].Banned {
			t.Fatalf("%s: a leasing request while banned: %+v, %v", spec.Name, ds, err)
		}
	}
}

// TestResetSubscriptionOnCluster: on a Cluster the subscription goes live
// (on the master of the channel's slot) and hears a reset published
// through another node.
func TestResetSubscriptionOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t)
	forgotten, ups := make(chan string, 4), make(chan struct{}, 4)
	sub := SubscribeResets(client, func(key string) { forgotten <- key }, nil, func() { ups <- struct{}{} })
	defer sub.Stop()
	select {
	case <-ups:
	case <-time.After(10 * time.Second):
		t.Fatal("no subscription on the Cluster")
	}
	key := fmt.Sprintf("acl:{%d}", rand.Int64())
	if err := New(cluster.Client(t), Options{}).Reset(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	select {
	case k := <-forgotten:
		if k != key {
			t.Errorf("forgot %q, want %q", k, key)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the reset did not reach the subscription")
	}
}
