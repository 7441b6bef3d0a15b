package integration_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// problemJSON is an RFC 9457 problem body of a rejection.
type problemJSON struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies"`
}

// TestProblemDetailsAndPK runs a real Caddy on a real Redis: with
// problem_details the rejection is an application/problem+json body from
// the handler, with every header and pk, unless the site has
// handle_errors, which then shapes it, answering {http.rate_limit.problem}
// (with problem_details or without). pk is stable for one key, differs for
// two, and names the key's bucket in Redis.
func TestProblemDetailsAndPK(t *testing.T) {
	srv := redistest.Start(t)
	site := fmt.Sprintf(`	handle /problem {
		rate_limit {
%s			headers ietf legacy pk
			problem_details
			zone pdapi {
				key {http.request.header.X-Key}
				algorithm sliding_log
				events 2
				window 1m
			}
		}
		respond "ok" 200
	}
	handle /own {
		rate_limit {
%s			headers ietf pk
			zone pdown {
				key {http.request.header.X-Key}
				algorithm sliding_log
				events 1
				window 1m
			}
		}
		respond "ok" 200
	}`, exactRedis(srv), exactRedis(srv))
	const errorRoute = `
	handle_errors 429 {
		header Content-Type application/problem+json
		header X-Shaped-By handle_errors
		respond {http.rate_limit.problem}
	}`
	caddy := startCaddy(t, caddyConfig{Site: site})
	shaped := startCaddy(t, caddyConfig{Site: site + errorRoute})
	client := newClient(1)

	t.Run("problem_details", func(t *testing.T) {
		pks := map[string][]byte{}
		for _, key := range []string{"alice-secret", "bob-secret"} {
			var resp response
			for i := range 3 {
				resp = get(t, client, caddy.URL+"/problem", "X-Key", key)
				if got, want := resp.Status, []int{200, 200, 429}[i]; got != want {
					t.Fatalf("%s request %d: status %d, want %d (body %q)", key, i+1, got, want, resp.Body)
				}
				pk := memberPK(t, resp.Header, "pdapi")
				if prev, ok := pks[key]; ok && string(prev) != string(pk) {
					t.Errorf("%s request %d: pk %x, want %x as before (stable for one key)", key, i+1, pk, prev)
				}
				pks[key] = pk
			}
			if resp.Header.Get("X-Shaped-By") != "" {
				t.Errorf("%s: X-Shaped-By %q: handle_errors ran, want the handler's own answer", key, resp.Header.Get("X-Shaped-By"))
			}
			checkProblemResponse(t, resp, "pdapi", key)
			for _, f := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
				if resp.Header.Get(f) == "" {
					t.Errorf("%s: %s missing on the 429", key, f)
				}
			}
		}
		if string(pks["alice-secret"]) == string(pks["bob-secret"]) {
			t.Errorf("pk %x for two keys, want different ones", pks["alice-secret"])
		}
		rdb := srv.Client(t)
		for key, pk := range pks {
			// the key's state lives at the hash tag, with its format's suffix
			pattern := "sluice:pdapi:{" + base64.RawStdEncoding.EncodeToString(pk) + "}*"
			if keys, err := rdb.Keys(context.Background(), pattern).Result(); err != nil || len(keys) != 1 {
				t.Errorf("%s: KEYS %s = %q, %v; want one key (pk names the bucket)", key, pattern, keys, err)
			}
		}
	})

	t.Run("handle_errors", func(t *testing.T) {
		if got := get(t, client, shaped.URL+"/own", "X-Key", "carol-secret"); got.Status != http.StatusOK {
			t.Fatalf("first request: status %d, want 200", got.Status)
		}
		resp := get(t, client, shaped.URL+"/own", "X-Key", "carol-secret")
		if got, want := resp.Status, http.StatusTooManyRequests; got != want {
			t.Fatalf("second request: status %d, want %d", got, want)
		}
		if got, want := resp.Header.Get("X-Shaped-By"), "handle_errors"; got != want {
			t.Errorf("X-Shaped-By = %q, want %q", got, want)
		}
		memberPK(t, resp.Header, "pdown")
		checkProblemResponse(t, resp, "pdown", "carol-secret")
	})

	// with problem_details too, a site's handle_errors shapes the rejection
	t.Run("handle_errors with problem_details", func(t *testing.T) {
		var resp response
		for i := range 3 {
			resp = get(t, client, shaped.URL+"/problem", "X-Key", "dave-secret")
			if got, want := resp.Status, []int{200, 200, 429}[i]; got != want {
				t.Fatalf("request %d: status %d, want %d", i+1, got, want)
			}
		}
		if got, want := resp.Header.Get("X-Shaped-By"), "handle_errors"; got != want {
			t.Errorf("X-Shaped-By = %q, want %q (the error route reached)", got, want)
		}
		checkProblemResponse(t, resp, "pdapi", "dave-secret")
	})
}

// checkProblemResponse checks a 429 problem response of zone: content
// type, every body member, Retry-After and the RateLimit fields; key must
// not appear in the body.
func checkProblemResponse(t *testing.T, resp response, zone, key string) {
	t.Helper()
	if got, want := resp.Header.Get("Content-Type"), "application/problem+json"; got != want {
		t.Errorf("Content-Type = %q, want %q", got, want)
	}
	var p problemJSON
	dec := json.NewDecoder(strings.NewReader(resp.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem body %q: %v", resp.Body, err)
	}
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || retry < 1 {
		t.Errorf("Retry-After = %q, want integer seconds ≥ 1", resp.Header.Get("Retry-After"))
	}
	want := problemJSON{
		Type:     "https://iana.org/assignments/http-problem-types#quota-exceeded",
		Title:    "Quota Exceeded",
		Status:   http.StatusTooManyRequests,
		Detail:   fmt.Sprintf("Quota exceeded in zone %s; retry in %d seconds.", zone, retry),
		Violated: []string{zone},
	}
	if p.Type != want.Type || p.Title != want.Title || p.Status != want.Status || p.Detail != want.Detail || !slices.Equal(p.Violated, want.Violated) {
		t.Errorf("problem = %+v, want %+v", p, want)
	}
	if strings.Contains(resp.Body, key) {
		t.Errorf("problem body %q leaks the key %q", resp.Body, key)
	}
	policy, err := httpsfv.UnmarshalList(resp.Header.Values("RateLimit-Policy"))
	if err != nil || len(policy) != 1 {
		t.Fatalf("RateLimit-Policy %q: %v, %d members; want 1", resp.Header.Values("RateLimit-Policy"), err, len(policy))
	}
	if item, ok := policy[0].(httpsfv.Item); !ok || item.Value != zone {
		t.Errorf("RateLimit-Policy member %v, want %q (as violated-policies)", policy[0], zone)
	}
}

// memberPK is the pk of zone's member of the RateLimit field, parsed as
// an RFC 8941 list; it fails when the member or its byte-sequence pk is
// missing.
func memberPK(t *testing.T, h http.Header, zone string) []byte {
	t.Helper()
	list, err := httpsfv.UnmarshalList(h.Values("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q: %v", h.Values("RateLimit"), err)
	}
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok || item.Value != zone {
			continue
		}
		v, ok := item.Params.Get("pk")
		if !ok {
			t.Fatalf("RateLimit %q: %s has no pk", h.Values("RateLimit"), zone)
		}
		pk, ok := v.([]byte)
		if !ok || len(pk) != 16 {
			t.Fatalf("RateLimit %q: pk of %s is %T %v, want 16 bytes", h.Values("RateLimit"), zone, v, v)
		}
		return pk
	}
	t.Fatalf("RateLimit %q: no member %s", h.Values("RateLimit"), zone)
	return nil
}
