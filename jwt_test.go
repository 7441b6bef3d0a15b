package sluice

import (
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
