package sluice

import (
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Tests of JWT claims in keys, through the handler.

func TestServeHTTPJWT(t *testing.T) {
	const secret = "k-handler-test-secret"
	token := func(t *testing.T, key, sub string) string {
		t.Helper()
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": sub,
			"exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString([]byte(key))
		if err != nil {
			t.Fatalf("signing: %v", err)
		}
		return s
	}
	zone := uniqueZone("jwt")
	h := newHandler(t, rateLimit(
		block("jwt", "secret "+secret),
		zoneCfg(zone, "key {jwt.sub}", "algorithm sliding_log", "events 1", "window 1h"),
	))
	tests := []struct {
		name    string
		token   string // "" for no Authorization header
		allowed bool
		sub     string // want {http.rate_limit.jwt.sub}
	}{
		{"alice", token(t, secret, "alice"), true, "alice"},
		{"bob, own bucket", token(t, secret, "bob"), true, "bob"},
		{"alice again", token(t, secret, "alice"), false, "alice"},
		{"forged carol", token(t, "wrong", "carol"), true, ""},
		{"forged dave shares the empty bucket", token(t, "wrong", "dave"), false, ""},
		{"no token shares the empty bucket", "", false, ""},
		{"bob again", token(t, secret, "bob"), false, "bob"},
	}
	for _, tt := range tests {
		o := reqOpts{remote: "192.0.2.7:1", headers: map[string]string{}}
		if tt.token != "" {
			o.headers["Authorization"] = "Bearer " + tt.token
		}
		res := serve(t, h, o)
		if got := res.allowed(); got != tt.allowed {
			t.Errorf("%s: allowed = %v (err %v), want %v", tt.name, got, res.err, tt.allowed)
		}
		if got := res.repl.ReplaceAll("{http.rate_limit.jwt.sub}", ""); got != tt.sub {
			t.Errorf("%s: {http.rate_limit.jwt.sub} = %q, want %q", tt.name, got, tt.sub)
		}
	}
}

// TestServeHTTPJWTOwnClaims: two handlers in one route, the first
// trusting any token (insecure_skip_verify), the second verifying with its
// own secret. The second's {jwt.sub} comes
// from its own verifier only: forged tokens with fresh subs share its one
// empty-claim bucket, and a genuine token gets a bucket of its own. Other
// handlers still read the first's claims as {http.rate_limit.jwt.sub}.
func TestServeHTTPJWTOwnClaims(t *testing.T) {
	const secret = "k-own-claims-secret"
	sign := func(t *testing.T, key, sub string) string {
		t.Helper()
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub}).SignedString([]byte(key))
		if err != nil {
			t.Fatalf("signing: %v", err)
		}
		return s
	}
	tests := []struct {
		name      string
		secondJWT string // the second handler's jwt block
		key       string // the strict zone's key
		genuine   bool   // a genuine token gets a bucket of its own
	}{
		{"second verifies with its own secret", block("jwt", "secret "+secret), "{jwt.sub}", true},
		// a second with no jwt block may not name {jwt.sub}: always empty,
		// it is refused (TestClaimsWithoutJWTBlock)
		// a handler that verifies answers the shared prefix from its own
		// verifier too: the first handler's unverified claims never key it
		{"second verifies, keyed by the shared prefix", block("jwt", "secret "+secret), "{http.rate_limit.jwt.sub}", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := newHandler(t, rateLimit(
				block("jwt", "insecure_skip_verify"),
				zoneCfg(uniqueZone("loose"), "key {jwt.sub}", "events 100", "window 1h"),
			))
			strict := uniqueZone("strict")
			second := newHandler(t, rateLimit(tt.secondJWT,
				zoneCfg(strict, "key "+tt.key, "algorithm sliding_log", "events 1", "window 1h"),
			))
			const forgeries = 5
			admitted := 0
			for i := range forgeries {
				sub := fmt.Sprintf("forged-%d", i)
				res := serveChain(t, first, second, "Bearer "+sign(t, "wrong-secret", sub))
				if res.allowed() {
					admitted++
				}
				if got, want := res.repl.ReplaceAll("{http.rate_limit.jwt.sub}", ""), sub; got != want {
					t.Errorf("forgery %d: {http.rate_limit.jwt.sub} = %q, want %q (the first handler's claims)", i, got, want)
				}
			}
			if got, want := admitted, 1; got != want {
				t.Errorf("forged tokens with fresh subs admitted by zone %s: got %d, want %d (one shared empty-claim bucket)", strict, got, want)
			}
			res := serveChain(t, first, second, "Bearer "+sign(t, secret, "alice"))
			if got := res.allowed(); got != tt.genuine {
				t.Errorf("genuine token: allowed = %v (err %v), want %v", got, res.err, tt.genuine)
			}
		})
	}
}

// serveChain runs first, then second, then a next handler that answers
// 200, on one GET request with the Authorization header auth, as two
// rate_limit handlers in one Caddy route run.
func serveChain(t *testing.T, first, second *Handler, auth string) result {
	t.Helper()
	return serveStack(t, reqOpts{headers: map[string]string{"Authorization": auth}}, first, second)
}

// TestServeHTTPJWTOwnClaimsInMatchers: a zone's matchers read {jwt.*}
// from the handler's own verifier too. The second handler limits every
// plan but a verified "enterprise": a forged token claiming enterprise,
// which the first handler (insecure_skip_verify) takes at its word, is
// limited like any other.
func TestServeHTTPJWTOwnClaimsInMatchers(t *testing.T) {
	const secret = "k-own-claims-matcher-secret"
	sign := func(t *testing.T, key string) string {
		t.Helper()
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"plan": "enterprise"}).SignedString([]byte(key))
		if err != nil {
			t.Fatalf("signing: %v", err)
		}
		return s
	}
	first := newHandler(t, rateLimit(
		block("jwt", "insecure_skip_verify"),
		zoneCfg(uniqueZone("loose"), "key {jwt.plan}", "events 100", "window 1h"),
	))
	second := newHandler(t, rateLimit(
		block("jwt", "secret "+secret),
		zoneCfg(uniqueZone("not-enterprise"), `match {
			expression {jwt.plan} != "enterprise"
		}`, "key static", "algorithm sliding_log", "events 1", "window 1h"),
	))
	tests := []struct {
		name    string
		token   string
		allowed bool
	}{
		{"forged enterprise, first", sign(t, "wrong-secret"), true},
		{"forged enterprise, limited", sign(t, "wrong-secret"), false},
		{"verified enterprise, not limited", sign(t, secret), true},
	}
	for _, tt := range tests {
		res := serveChain(t, first, second, "Bearer "+tt.token)
		if got := res.allowed(); got != tt.allowed {
			t.Errorf("%s: allowed = %v (err %v), want %v", tt.name, got, res.err, tt.allowed)
		}
	}
}
