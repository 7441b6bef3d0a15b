package sluice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// adminDo runs one admin request and returns its status and body.
func adminDo(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	return adminDoOn(t, AdminAPI{}, method, path, body)
}

// adminDoOn is adminDo on a.
func adminDoOn(t *testing.T, a AdminAPI, method, path, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	w := httptest.NewRecorder()
	err := a.serve(w, req)
	if err != nil {
		var apiErr caddy.APIError
		if !errors.As(err, &apiErr) {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return apiErr.HTTPStatus, apiErr.Message
	}
	if w.Code == 0 {
		return http.StatusOK, w.Body.String()
	}
	return w.Code, w.Body.String()
}

// adminZone registers a zone on a memory store of its own.
func adminZone(t *testing.T, z *Zone, name string) (*Zone, *algorithms.MemoryStore) {
	t.Helper()
	if err := z.setup(name); err != nil {
		t.Fatal(err)
	}
	if err := z.validate(); err != nil {
		t.Fatal(err)
	}
	store := algorithms.NewMemoryStoreOf(1000)
	regs, err := registerZones(prometheus.NewRegistry(), []*Zone{z}, &stores{store: store}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unregisterZones(regs) })
	return z, store
}

func getKey(t *testing.T, zone, key string) keyState {
	t.Helper()
	code, body := adminDo(t, http.MethodGet, "/rate_limit/zones/"+zone+"/keys/"+key, "")
	if code != http.StatusOK {
		t.Fatalf("GET key: %d %s", code, body)
	}
	var s keyState
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAdminOverrides(t *testing.T) {
	id := rand.Int64()
	name := fmt.Sprintf("adm_ov_%d", id)
	plainName := fmt.Sprintf("adm_plain_%d", id)
	z, store := adminZone(t, &Zone{Key: "{k}", Algorithm: "token_bucket", MaxEvents: 2, Window: caddy.Duration(time.Minute), Overrides: true}, name)
	adminZone(t, &Zone{Key: "{k}", Algorithm: "fixed_window", MaxEvents: 2, Window: caddy.Duration(time.Minute)}, plainName)
	limitPath := "/rate_limit/zones/" + name + "/keys/a%2Fb/limit"

	_, body := adminDo(t, http.MethodGet, "/rate_limit/zones", "")
	if !strings.Contains(body, `"name":"`+name+`"`) || !strings.Contains(body, `"overrides":true`) {
		t.Errorf("zones listing: %s, want %s with \"overrides\":true", body, name)
	}
	// every zone lists its burst: the most one key takes at once
	if want := `"name":"` + plainName + `","algorithm":"fixed_window","events":2,"window":60,"burst":2,`; !strings.Contains(body, want) {
		t.Errorf("zones listing: %s, want %s", body, want)
	}
	if s := getKey(t, name, "a%2Fb"); s.Limit != 2 || s.Override {
		t.Errorf("before: got %+v, want limit 2, no override", s)
	}
	if code, msg := adminDo(t, http.MethodPut, limitPath, `{"events":5}`); code != http.StatusNoContent {
		t.Fatalf("PUT: %d %s", code, msg)
	}
	if s := getKey(t, name, "a%2Fb"); s.Limit != 5 || s.Remaining != 5 || !s.Override {
		t.Errorf("after PUT: got %+v, want limit 5, remaining 5, override", s)
	}
	// the store decides with it: 5 requests pass, a sixth does not
	req := algorithms.Request{Key: z.storeKey("a/b"), Limit: z.limit, Cost: 1, Overrides: true}
	for i := range 6 {
		ds := store.AllowAt(time.Now(), []algorithms.Request{req})
		if ds[0].Allowed != (i < 5) {
			t.Fatalf("request %d: allowed=%v", i+1, ds[0].Allowed)
		}
	}
	// DELETE of the key starts its count over, keeping the override
	if code, msg := adminDo(t, http.MethodDelete, "/rate_limit/zones/"+name+"/keys/a%2Fb", ""); code != http.StatusNoContent {
		t.Fatalf("DELETE key: %d %s", code, msg)
	}
	if s := getKey(t, name, "a%2Fb"); s.Limit != 5 || s.Remaining != 5 || !s.Override {
		t.Errorf("after DELETE of the key: got %+v, want limit 5, remaining 5, override kept", s)
	}
	if code, msg := adminDo(t, http.MethodPut, limitPath, `{"events":1,"burst":7,"expires_in":"1h"}`); code != http.StatusNoContent {
		t.Fatalf("PUT burst: %d %s", code, msg)
	}
	if s := getKey(t, name, "a%2Fb"); s.Limit != 7 || !s.Override {
		t.Errorf("after PUT burst: got %+v, want limit 7", s)
	}
	if code, msg := adminDo(t, http.MethodDelete, limitPath, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE limit: %d %s", code, msg)
	}
	if s := getKey(t, name, "a%2Fb"); s.Limit != 2 || s.Override {
		t.Errorf("after DELETE limit: got %+v, want the zone's limit 2, no override", s)
	}
	// expires_in ends it
	if code, msg := adminDo(t, http.MethodPut, limitPath, `{"events":9,"expires_in":"20ms"}`); code != http.StatusNoContent {
		t.Fatalf("PUT expiring: %d %s", code, msg)
	}
	if s := getKey(t, name, "a%2Fb"); s.Limit != 9 {
		t.Errorf("expiring override: got %+v, want limit 9", s)
	}
	time.Sleep(40 * time.Millisecond)
	if s := getKey(t, name, "a%2Fb"); s.Limit != 2 || s.Override {
		t.Errorf("after expires_in: got %+v, want limit 2, no override", s)
	}

	for _, tt := range []struct {
		method, path, body string
		code               int
		msg                string
	}{
		{http.MethodPut, limitPath, `{}`, 400, "events"},
		{http.MethodPut, limitPath, ``, 400, "body"},
		{http.MethodPut, limitPath, `{"events":0}`, 400, "events"},
		{http.MethodPut, limitPath, `{"events":1000000001}`, 400, "events"},
		{http.MethodPut, limitPath, `{"events":"5"}`, 400, "body"},
		{http.MethodPut, limitPath, `{"events":5,"burst":0,"extra":1}`, 400, "extra"},
		{http.MethodPut, limitPath, `{"events":5,"burst":-1}`, 400, "burst"},
		{http.MethodPut, limitPath, `{"events":5,"burst":1000000001}`, 400, "burst"},
		{http.MethodPut, limitPath, `{"events":5,"expires_in":"soon"}`, 400, "expires_in"},
		{http.MethodPut, limitPath, `{"events":5,"expires_in":"-1h"}`, 400, "expires_in"},
		{http.MethodPut, limitPath, `{"events":5,"expires_in":"367d"}`, 400, "expires_in"},
		{http.MethodPut, limitPath, `{"events":5,"expires_in":"2562047h47m16s"}`, 400, "expires_in"},
		{http.MethodPut, limitPath, `{"events":5}{"events":6}`, 400, "data after the JSON object"},
		{http.MethodPut, limitPath, `{"events":5} trailing`, 400, "data after the JSON object"},
		{http.MethodPut, limitPath, `{"events":5,"burst":-1}`, 400, "or 0 for none"},
		{http.MethodPost, limitPath, `{"events":5}`, 405, "method"},
		{http.MethodPut, "/rate_limit/zones/" + plainName + "/keys/a/limit", `{"events":5}`, 409, "overrides"},
		{http.MethodDelete, "/rate_limit/zones/" + plainName + "/keys/a/limit", ``, 409, "overrides"},
		{http.MethodPut, "/rate_limit/zones/nosuch_" + name + "/keys/a/limit", `{"events":5}`, 404, "unknown zone"},
		{http.MethodPut, "/rate_limit/zones/" + name + "/keys/a/other", `{"events":5}`, 404, "not found"},
	} {
		code, msg := adminDo(t, tt.method, tt.path, tt.body)
		if code != tt.code || !strings.Contains(msg, tt.msg) {
			t.Errorf("%s %s %s: got %d %q, want %d mentioning %q", tt.method, tt.path, tt.body, code, msg, tt.code, tt.msg)
		}
	}
	// the longest expires_in, as the longest ban, is honoured
	if code, msg := adminDo(t, http.MethodPut, limitPath, `{"events":9,"expires_in":"366d"}`+"\n"); code != http.StatusNoContent {
		t.Fatalf("PUT expires_in 366d: %d %s", code, msg)
	}
	if s := getKey(t, name, "a%2Fb"); s.Limit != 9 || !s.Override {
		t.Errorf("after PUT expires_in 366d: got %+v, want limit 9, override", s)
	}
	// burst only on token_bucket
	plainOv := fmt.Sprintf("adm_fw_%d", id)
	adminZone(t, &Zone{Key: "{k}", Algorithm: "fixed_window", MaxEvents: 2, Window: caddy.Duration(time.Minute), Overrides: true}, plainOv)
	if code, msg := adminDo(t, http.MethodPut, "/rate_limit/zones/"+plainOv+"/keys/a/limit", `{"events":5,"burst":6}`); code != 400 || !strings.Contains(msg, "token_bucket") {
		t.Errorf("burst on fixed_window: got %d %q, want 400 naming token_bucket", code, msg)
	}
}

// TestAdminMarksAnswers: every answer of the admin API carries its mark,
// errors too (Caddy writes them on the same ResponseWriter), so the CLI
// can tell it from any other server's.
func TestAdminMarksAnswers(t *testing.T) {
	name := fmt.Sprintf("adm_mark_%d", rand.Int64())
	adminZone(t, &Zone{Key: "{k}", Algorithm: "fixed_window", MaxEvents: 2, Window: caddy.Duration(time.Minute)}, name)
	for _, tt := range []struct{ method, path string }{
		{http.MethodGet, "/rate_limit/zones"},
		{http.MethodGet, "/rate_limit/zones/" + name + "/keys/k"},
		{http.MethodDelete, "/rate_limit/zones/" + name + "/keys/k"},
		{http.MethodGet, "/rate_limit/zones/" + name + "/top"},
		{http.MethodGet, "/rate_limit/zones/nosuch_" + name + "/keys/k"},
		{http.MethodPut, "/rate_limit/zones/" + name + "/keys/k/limit"},
	} {
		w := httptest.NewRecorder()
		_ = AdminAPI{}.serve(w, httptest.NewRequest(tt.method, tt.path, strings.NewReader("")))
		if got := w.Header().Get(adminMarkHeader); got != adminMarkValue {
			t.Errorf("%s %s: %s %q, want %q", tt.method, tt.path, adminMarkHeader, got, adminMarkValue)
		}
	}
}

// unitsOutStore stands for a store that keeps quota lease bookkeeping: a
// look (Peek) at a key of a zone that leases (Quota.For > 0) reports out
// units in leases not yet ended, as the stores fill Decision.Quota.Out.
type unitsOutStore struct {
	*algorithms.MemoryStore
	out int64
}

func (s unitsOutStore) Peek(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	ds, err := s.MemoryStore.Peek(ctx, reqs)
	for i := range ds {
		if reqs[i].Leases() {
			ds[i].Quota.Out = s.out
		}
	}
	return ds, err
}

// leasingZone registers zone name, leasing for lease (0: not leasing),
// on a store whose looks report out units in its leases.
func leasingZone(t *testing.T, name string, lease time.Duration, out int64) {
	t.Helper()
	z := &Zone{Key: "{k}", MaxEvents: 100, Window: caddy.Duration(time.Minute)}
	if err := z.setup(name); err != nil {
		t.Fatal(err)
	}
	z.quotaLease = lease
	regs, err := registerZones(prometheus.NewRegistry(), []*Zone{z}, &stores{store: unitsOutStore{algorithms.NewMemoryStoreOf(100), out}}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unregisterZones(regs) })
}

// TestAdminQuotaLease: the zone listing says each zone's quota lease in
// force in seconds (0 when it does not lease), and GET of a key adds
// "leased", the units out in its quota leases, only when there are some
// and only for a zone that leases.
func TestAdminQuotaLease(t *testing.T) {
	id := rand.Int64()
	leasing, plain, none := fmt.Sprintf("adm_ql_%d", id), fmt.Sprintf("adm_ql_off_%d", id), fmt.Sprintf("adm_ql_none_%d", id)
	leasingZone(t, leasing, 250*time.Millisecond, 7)
	leasingZone(t, plain, 0, 7)
	leasingZone(t, none, time.Second, 0)

	_, body := adminDo(t, http.MethodGet, "/rate_limit/zones", "")
	var zones []map[string]any
	if err := json.Unmarshal([]byte(body), &zones); err != nil {
		t.Fatalf("zones listing %s: %v", body, err)
	}
	found := 0
	for _, z := range zones {
		want, ok := map[string]float64{leasing: 0.25, plain: 0, none: 1}[z["name"].(string)]
		if !ok {
			continue
		}
		found++
		if got, present := z["quota_lease"]; !present || got != want {
			t.Errorf("zone %s: quota_lease %v (present %v), want %v", z["name"], got, present, want)
		}
	}
	if found != 3 {
		t.Fatalf("zones listing %s: found %d of the 3 zones", body, found)
	}

	if s := getKey(t, leasing, "a"); s.Leased != 7 {
		t.Errorf("GET of a key of the leasing zone: %+v, want leased 7", s)
	}
	for _, name := range []string{plain, none} { // not leasing; leasing, none out
		if code, raw := adminDo(t, http.MethodGet, "/rate_limit/zones/"+name+"/keys/a", ""); code != http.StatusOK || strings.Contains(raw, "leased") {
			t.Errorf("GET of a key of zone %s: %d %s, want 200 without \"leased\"", name, code, raw)
		}
	}
}

// TestAdminLeasedOnRedis: on a real Redis, GET of a hot key shows the
// units its quota leases hold ("leased"), once its demand has lasted long
// enough to lease.
func TestAdminLeasedOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	zone := uniqueZone("adm_leased")
	h := newHandler(t, rateLimit(block("redis", "url "+srv.URL()), zoneCfg(zone, "key static", "events 100000", "window 1h")))
	var leased int64
	for deadline := time.Now().Add(10 * time.Second); leased == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no units leased in 10 s of a steady stream")
		}
		if res := serve(t, h, reqOpts{}); !res.allowed() {
			t.Fatalf("request refused under the limit (err %v)", res.err)
		}
		leased = getKey(t, zone, "static").Leased
	}
	if leased < 2 {
		t.Errorf("leased %d, want a lease's units (at least 2)", leased)
	}
}

// TestAdminAudit: every change through the admin API (an override set or
// cleared, a key reset, a ban lifted) is one audit line at info naming the
// zone, the key's hash, the change, and the key itself only where the
// zone's handler has log_key; a look or a refused change logs none.
func TestAdminAudit(t *testing.T) {
	name := fmt.Sprintf("adm_audit_%d", rand.Int64())
	z, store := adminZone(t, &Zone{Key: "{k}", Algorithm: "fixed_window", MaxEvents: 1, Window: caddy.Duration(time.Minute),
		Overrides: true, Ban: caddy.Duration(time.Hour)}, name)
	core, logs := observer.New(zapcore.InfoLevel)
	a := AdminAPI{logger: zap.New(core)}
	const key = "secret/key"
	keyPath := "/rate_limit/zones/" + name + "/keys/secret%2Fkey"
	hash := keyHash(z.storeKey(key))
	do := func(method, path, body string, want int) {
		t.Helper()
		if code, got := adminDoOn(t, a, method, path, body); code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, code, got, want)
		}
	}
	trip := func() {
		t.Helper()
		req := []algorithms.Request{{Key: z.storeKey(key), Limit: z.limit, Cost: 1, Overrides: true, BanSeconds: z.banSeconds(false)}}
		for range 2 {
			if _, err := store.Allow(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		}
	}
	do(http.MethodGet, keyPath, "", http.StatusOK)
	do(http.MethodPut, keyPath+"/limit", `{"events":5}x`, http.StatusBadRequest)
	if n := logs.Len(); n != 0 {
		t.Fatalf("a look and a refused change: %d lines, want none: %v", n, logs.All())
	}
	do(http.MethodPut, keyPath+"/limit", `{"events":5,"expires_in":"1h"}`, http.StatusNoContent)
	do(http.MethodDelete, keyPath+"/limit", "", http.StatusNoContent)
	trip()
	do(http.MethodDelete, keyPath, "", http.StatusNoContent)
	do(http.MethodDelete, keyPath, "", http.StatusNoContent)
	reg, _ := lookupZone(name)
	reg.logKey = true // as a handler with log_key registers it
	do(http.MethodDelete, keyPath+"/limit", "", http.StatusNoContent)

	want := []map[string]any{
		{"change": "override set", "events": int64(5), "expires_in": 3600.0},
		{"change": "override cleared"},
		{"change": "reset", "ban_lifted": true},
		{"change": "reset", "ban_lifted": false},
		{"change": "override cleared", "key": key},
	}
	lines := logs.All()
	if len(lines) != len(want) {
		t.Fatalf("audit lines: got %d, want %d: %v", len(lines), len(want), lines)
	}
	for i, w := range want {
		got := lines[i].ContextMap()
		if lines[i].Level != zapcore.InfoLevel || lines[i].Message != "rate limit key changed through the admin API" {
			t.Errorf("line %d: %v %q", i, lines[i].Level, lines[i].Message)
		}
		w["zone"], w["key_hash"] = name, hash
		if len(got) != len(w) {
			t.Errorf("line %d: fields %v, want %v", i, got, w)
			continue
		}
		for k, v := range w {
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %v (all: %v)", i, k, got[k], v, got)
			}
		}
	}
}

// listingZone registers a zone on a memory store of its own that lists
// its overrides, and returns its registration.
func listingZone(t *testing.T, z *Zone, name string) *registration {
	t.Helper()
	if err := z.setup(name); err != nil {
		t.Fatal(err)
	}
	if err := z.validate(); err != nil {
		t.Fatal(err)
	}
	store := algorithms.NewMemoryStoreOf(1000)
	regs, err := registerZones(prometheus.NewRegistry(), []*Zone{z}, &stores{kind: "memory", store: store, lister: store}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unregisterZones(regs) })
	return regs[0]
}

// getOverrides runs GET …/overrides with query and decodes its answer.
func getOverrides(t *testing.T, zone, query string) overrideList {
	t.Helper()
	code, body := adminDo(t, http.MethodGet, "/rate_limit/zones/"+zone+"/overrides"+query, "")
	if code != http.StatusOK {
		t.Fatalf("GET overrides%s: %d %s", query, code, body)
	}
	var l overrideList
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("GET overrides%s: %v: %s", query, err, body)
	}
	return l
}

// allOverrides follows the pages of n from the first to the last.
func allOverrides(t *testing.T, zone string, n int) ([]overrideEntry, int) {
	t.Helper()
	var all []overrideEntry
	query, pages := fmt.Sprintf("?n=%d", n), 0
	for {
		l := getOverrides(t, zone, query)
		pages++
		if l.Zone != zone || len(l.Overrides) > n {
			t.Fatalf("page %d: zone %q, %d overrides (n=%d)", pages, l.Zone, len(l.Overrides), n)
		}
		all = append(all, l.Overrides...)
		if l.Next == "" || pages > 50 {
			return all, pages
		}
		query = fmt.Sprintf("?n=%d&after=%s", n, url.QueryEscape(l.Next))
	}
}

// TestAdminOverridesListed: GET …/overrides lists a zone's overrides in
// force, by key hash as top shows keys, a page at a time: each key's
// events, burst (token_bucket only), seconds left (none for an override
// until cleared) and, only with the handler's log_key, the key as it was
// set while log_key was on; a cleared override is gone; an unknown zone
// is 404, a zone without overrides 409 naming the option.
func TestAdminOverridesListed(t *testing.T) {
	id := rand.Int64()
	name := fmt.Sprintf("adm_list_%d", id)
	reg := listingZone(t, &Zone{Key: "{k}", Algorithm: "token_bucket", MaxEvents: 2, Window: caddy.Duration(time.Minute), Overrides: true}, name)
	put := func(key, body string) {
		t.Helper()
		if code, msg := adminDo(t, http.MethodPut, "/rate_limit/zones/"+name+"/keys/"+url.PathEscape(key)+"/limit", body); code != http.StatusNoContent {
			t.Fatalf("PUT %s: %d %s", key, code, msg)
		}
	}
	keys := []string{"a/b", "c", "d", "e", "f"}
	for i, k := range keys {
		reg.logKey = i >= 3 // d and e, f set with log_key: kept
		switch i {
		case 1:
			put(k, `{"events":7,"burst":9,"expires_in":"1h"}`)
		default:
			put(k, fmt.Sprintf(`{"events":%d}`, 10+i))
		}
	}
	put("gone", `{"events":3}`)
	if code, msg := adminDo(t, http.MethodDelete, "/rate_limit/zones/"+name+"/keys/gone/limit", ""); code != http.StatusNoContent {
		t.Fatalf("DELETE gone: %d %s", code, msg)
	}
	byHash := map[string]string{}
	var want []string
	for _, k := range keys {
		h := keyHash(reg.zone.storeKey(k))
		byHash[h] = k
		want = append(want, h)
	}
	slices.Sort(want)

	reg.logKey = true
	for _, n := range []int{1, 2, 100} {
		all, pages := allOverrides(t, name, n)
		got := make([]string, len(all))
		for i, e := range all {
			got[i] = e.KeyHash
		}
		if !slices.Equal(got, want) {
			t.Fatalf("n=%d: hashes %v, want %v", n, got, want)
		}
		if wantPages := (len(want) + n - 1) / n; pages != wantPages {
			t.Errorf("n=%d: %d pages, want %d", n, pages, wantPages)
		}
	}
	all, _ := allOverrides(t, name, 100)
	for _, e := range all {
		k := byHash[e.KeyHash]
		i := slices.Index(keys, k)
		wantKey := ""
		if i >= 3 {
			wantKey = k
		}
		if e.Key != wantKey {
			t.Errorf("%s: key %q, want %q (kept only when set with log_key)", k, e.Key, wantKey)
		}
		switch {
		case k == "c":
			if e.Events != 7 || e.Burst != 9 || e.ExpiresInSeconds == nil || *e.ExpiresInSeconds != 3600 {
				t.Errorf("c: %+v, want events 7, burst 9, expires_in_seconds 3600", e)
			}
		case e.Events != int64(10+i) || e.Burst != int64(10+i) || e.ExpiresInSeconds != nil:
			t.Errorf("%s: %+v, want events and burst %d, no expiry", k, e, 10+i)
		}
	}
	// without log_key now, no key shows, kept or not
	reg.logKey = false
	_, body := adminDo(t, http.MethodGet, "/rate_limit/zones/"+name+"/overrides", "")
	if strings.Contains(body, `"key":`) {
		t.Errorf("without log_key: %s, want no raw key", body)
	}
	// a cursor with a + sent unescaped (a space once decoded) reads as the hash
	for _, h := range want[:len(want)-1] {
		if !strings.Contains(h, "+") {
			continue
		}
		l := getOverrides(t, name, "?n=1&after="+h)
		if i := slices.Index(want, h); len(l.Overrides) != 1 || l.Overrides[0].KeyHash != want[i+1] {
			t.Errorf("after=%s unescaped: %+v, want %s", h, l, want[i+1])
		}
	}

	// burst shows on token_bucket only
	fw := fmt.Sprintf("adm_list_fw_%d", id)
	listingZone(t, &Zone{Key: "{k}", Algorithm: "fixed_window", MaxEvents: 2, Window: caddy.Duration(time.Minute), Overrides: true}, fw)
	if code, msg := adminDo(t, http.MethodPut, "/rate_limit/zones/"+fw+"/keys/x/limit", `{"events":4}`); code != http.StatusNoContent {
		t.Fatalf("PUT fixed_window: %d %s", code, msg)
	}
	if _, body := adminDo(t, http.MethodGet, "/rate_limit/zones/"+fw+"/overrides", ""); !strings.Contains(body, `"events":4`) || strings.Contains(body, "burst") {
		t.Errorf("fixed_window listing: %s, want events 4 and no burst", body)
	}

	plain := fmt.Sprintf("adm_list_plain_%d", id)
	listingZone(t, &Zone{Key: "{k}", Algorithm: "fixed_window", MaxEvents: 2, Window: caddy.Duration(time.Minute)}, plain)
	for _, tt := range []struct {
		method, path string
		code         int
		msg          string
	}{
		{http.MethodGet, "/rate_limit/zones/nosuch_" + name + "/overrides", 404, "unknown zone"},
		{http.MethodGet, "/rate_limit/zones/" + plain + "/overrides", 409, "`overrides`"},
		{http.MethodGet, "/rate_limit/zones/" + name + "/overrides?n=0", 400, "n:"},
		{http.MethodGet, "/rate_limit/zones/" + name + "/overrides?n=1001", 400, "n:"},
		{http.MethodGet, "/rate_limit/zones/" + name + "/overrides?n=x", 400, "n:"},
		{http.MethodGet, "/rate_limit/zones/" + name + "/overrides?after=abc", 400, "after"},
		{http.MethodPost, "/rate_limit/zones/" + name + "/overrides", 405, "GET"},
	} {
		if code, msg := adminDo(t, tt.method, tt.path, ""); code != tt.code || !strings.Contains(msg, tt.msg) {
			t.Errorf("%s %s: %d %q, want %d mentioning %q", tt.method, tt.path, code, msg, tt.code, tt.msg)
		}
	}
}

// TestAdminOverridesListedOnRedis: a handler on Redis lists the overrides
// the admin API set, from the index in Redis, with the key where the
// handler has log_key.
func TestAdminOverridesListedOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	zone := uniqueZone("adm_list_redis")
	newHandler(t, rateLimit(block("redis", "url "+srv.URL()), zoneCfg(zone, "key {http.request.remote.host}", "events 5", "window 1m", "overrides")))
	reg, ok := lookupZone(zone)
	if !ok {
		t.Fatal("zone not registered")
	}
	reg.logKey = true // as a handler with log_key registers it
	for i, k := range []string{"203.0.113.7", "198.51.100.1"} {
		if code, msg := adminDo(t, http.MethodPut, "/rate_limit/zones/"+zone+"/keys/"+k+"/limit", fmt.Sprintf(`{"events":%d,"expires_in":"10m"}`, 10+i)); code != http.StatusNoContent {
			t.Fatalf("PUT %s: %d %s", k, code, msg)
		}
	}
	all, pages := allOverrides(t, zone, 1)
	if len(all) != 2 || pages != 2 {
		t.Fatalf("listed %+v in %d pages, want 2 in 2", all, pages)
	}
	for _, e := range all {
		if e.KeyHash != keyHash(reg.zone.storeKey(e.Key)) || e.ExpiresInSeconds == nil || *e.ExpiresInSeconds != 600 || e.Burst != 0 {
			t.Errorf("%+v: want the hash of its key, 600 s left, no burst", e)
		}
	}
	n, err := srv.Client(t).ZCard(t.Context(), reg.zone.keyPrefix+"overrides").Result()
	if err != nil || n != 2 {
		t.Errorf("the zone's index in Redis holds %d, %v; want 2", n, err)
	}
}

// TestAdminLogKeyFromHandler: a handler's log_key reaches the admin API
// through its registration, so its overrides listing shows the raw key
// (the field was never set from the handler: only hashes showed).
func TestAdminLogKeyFromHandler(t *testing.T) {
	for _, logKey := range []bool{true, false} {
		t.Run(fmt.Sprint("log_key=", logKey), func(t *testing.T) {
			zone := uniqueZone("adm_logkey")
			lines := []string{zoneCfg(zone, "key {http.request.header.X-Key}", "events 5", "window 1m", "overrides")}
			if logKey {
				lines = append([]string{"log_key"}, lines...)
			}
			newHandler(t, rateLimit(lines...))
			if code, msg := adminDo(t, http.MethodPut, "/rate_limit/zones/"+zone+"/keys/tenant-7/limit", `{"events":9}`); code != http.StatusNoContent {
				t.Fatalf("PUT: %d %s", code, msg)
			}
			code, body := adminDo(t, http.MethodGet, "/rate_limit/zones/"+zone+"/overrides", "")
			if code != http.StatusOK {
				t.Fatalf("GET overrides: %d %s", code, body)
			}
			if got := strings.Contains(body, `"tenant-7"`); got != logKey {
				t.Errorf("listing %s: raw key shown %v, want %v", body, got, logKey)
			}
		})
	}
}

// TestAdminAdaptiveZone: the zones listing shows an adaptive zone with
// its limit, in flight and baseline (none learned yet); its keys, top
// offenders and overrides are 409, as it has none in a store.
func TestAdminAdaptiveZone(t *testing.T) {
	zone := uniqueZone("adm_shed")
	h := shedHandler(t, zone, 7)
	release := make(chan struct{})
	held := start(h, t.Context(), nil, release, ok200)
	<-held.entered
	_, body := adminDo(t, http.MethodGet, "/rate_limit/zones", "")
	var zones []map[string]any
	if err := json.Unmarshal([]byte(body), &zones); err != nil {
		t.Fatalf("zones listing %s: %v", body, err)
	}
	var got map[string]any
	for _, z := range zones {
		if z["name"] == zone {
			got = z
		}
	}
	if got == nil {
		t.Fatalf("zones listing %s: no zone %s", body, zone)
	}
	if got["algorithm"] != "adaptive" || got["events"] != 7.0 || got["backend"] != "memory" {
		t.Errorf("zone %s: %v, want algorithm adaptive, events 7, backend memory", zone, got)
	}
	want := map[string]any{"limit": 7.0, "in_flight": 1.0, "baseline_seconds": 0.0}
	if a, _ := got["adaptive"].(map[string]any); fmt.Sprint(a) != fmt.Sprint(want) {
		t.Errorf("zone %s: adaptive %v, want %v", zone, got["adaptive"], want)
	}
	close(release)
	<-held.done
	for _, path := range []string{"/keys/a", "/keys/a/limit", "/top", "/overrides"} {
		if code, msg := adminDo(t, http.MethodGet, "/rate_limit/zones/"+zone+path, ""); code != http.StatusConflict || !strings.Contains(msg, "adaptive") {
			t.Errorf("GET …%s of an adaptive zone: %d %s, want 409 saying it is adaptive", path, code, msg)
		}
	}
}

// TestZonesAgreeAdaptive: a zone name is one zone's: an adaptive zone
// and a concurrency zone of one name disagree, as do adaptive zones of
// other ceilings or tuning.
func TestZonesAgreeAdaptive(t *testing.T) {
	mk := func(z *Zone) *Zone {
		if z.Algorithm == "" {
			z.Algorithm = algorithmAdaptive
		}
		z.Key = "static"
		if err := z.setup("agree_shed"); err != nil {
			t.Fatal(err)
		}
		return z
	}
	base := func() *Zone { return mk(&Zone{MaxEvents: 10, Adaptive: &AdaptiveConfig{Min: 2}}) }
	if err := agree(base(), base()); err != nil {
		t.Errorf("same: %v", err)
	}
	for _, tt := range []struct {
		name   string
		other  *Zone
		option string
	}{
		{"concurrency", mk(&Zone{Algorithm: "concurrency", MaxEvents: 10}), "algorithm"},
		{"events", mk(&Zone{MaxEvents: 20, Adaptive: &AdaptiveConfig{Min: 2}}), "limit events 20 here"},
		{"min", mk(&Zone{MaxEvents: 10, Adaptive: &AdaptiveConfig{Min: 3}}), "adaptive min 3 here"},
	} {
		if err := agree(tt.other, base()); err == nil || !strings.Contains(err.Error(), tt.option) {
			t.Errorf("%s: %v, want an error naming %q", tt.name, err, tt.option)
		}
	}
}
