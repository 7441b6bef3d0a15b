package integration_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

func hs256(t *testing.T, secret string, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestJWTForgeryBuysNoBucket: tokens signed with a wrong key, each with a
// fresh sub, all land in the one empty-claim bucket.
func TestJWTForgeryBuysNoBucket(t *testing.T) {
	const limit = 5
	srv := redistest.Start(t)
	caddy := startCaddy(t, caddyConfig{Site: `	rate_limit {
` + exactRedis(srv) + `		jwt {
			secret right-secret
		}
		zone per_user {
			key {jwt.sub}
			algorithm sliding_log
			events 5
			window 1h
		}
	}
	respond "sub={http.rate_limit.jwt.sub}" 200`})
	client := newClient(4)

	admitted := 0
	for i := range 3 * limit {
		forged := hs256(t, "wrong-secret", jwt.MapClaims{"sub": fmt.Sprintf("attacker-%d", i)})
		resp := get(t, client, caddy.URL+"/", "Authorization", "Bearer "+forged)
		if resp.Status == http.StatusOK {
			admitted++
			if resp.Body != "sub=" {
				t.Errorf("forged token exposed claims: body %q", resp.Body)
			}
		}
	}
	if admitted > limit {
		t.Errorf("forged tokens admitted: got %d, want at most %d", admitted, limit)
	}

	// a genuine token has its own bucket, and its claims reach other handlers
	genuine := hs256(t, "right-secret", jwt.MapClaims{"sub": "alice"})
	resp := get(t, client, caddy.URL+"/", "Authorization", "Bearer "+genuine)
	if resp.Status != http.StatusOK || resp.Body != "sub=alice" {
		t.Errorf("genuine token: got %d %q, want 200 %q", resp.Status, resp.Body, "sub=alice")
	}
}

// jwksServer serves a JWK Set that the test can replace.
type jwksServer struct {
	mu    sync.Mutex
	body  []byte
	count int
}

func (s *jwksServer) fetches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

func (s *jwksServer) set(t *testing.T, kid string, key *rsa.PrivateKey) {
	t.Helper()
	jwk, err := jwkset.NewJWKFromKey(&key.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: jwkset.AlgRS256}})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{jwk.Marshal()}})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.body = body
	s.mu.Unlock()
}

func (s *jwksServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.body)
}

func rs256(t *testing.T, kid string, key *rsa.PrivateKey, sub string) string {
	t.Helper()
	token := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": sub})
	token.Header["kid"] = kid
	s, err := token.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestJWKSRotation: after the key set rotates, a token signed by the new
// key verifies without a restart (an unknown kid triggers a refresh).
func TestJWKSRotation(t *testing.T) {
	oldKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	newKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	keys := &jwksServer{}
	keys.set(t, "old", oldKey)
	jwks := httptest.NewServer(keys)
	defer jwks.Close()

	caddy := startCaddy(t, caddyConfig{Site: `	rate_limit {
		jwt {
			jwks_url ` + jwks.URL + `
			jwks_refresh 1h
		}
		zone per_user {
			key {jwt.sub}
			events 100
			window 1m
		}
	}
	respond "sub={http.rate_limit.jwt.sub}" 200`})
	client := newClient(1)
	sub := func(token string) string {
		t.Helper()
		return get(t, client, caddy.URL+"/", "Authorization", "Bearer "+token).Body
	}

	if got, want := sub(rs256(t, "old", oldKey, "alice")), "sub=alice"; got != want {
		t.Fatalf("old key before rotation: got %q, want %q", got, want)
	}
	keys.set(t, "new", newKey)
	if got, want := sub(rs256(t, "new", newKey, "bob")), "sub=bob"; got != want {
		t.Errorf("new key after rotation: got %q, want %q", got, want)
	}
	if got, want := sub(rs256(t, "old", oldKey, "alice")), "sub="; got != want {
		t.Errorf("old key after it left the set: got %q, want %q", got, want)
	}

	// a flood of unknown key IDs refreshes the set at most once per 10 s
	before := keys.fetches()
	for i := range 20 {
		sub(rs256(t, fmt.Sprintf("unknown-%d", i), newKey, "mallory"))
	}
	if got := keys.fetches() - before; got > 1 {
		t.Errorf("JWKS fetches during an unknown-kid flood: got %d, want at most 1", got)
	}
}

// TestJWTClaimsAreEachHandlersOwn: two rate_limit handlers in one route,
// the first trusting any token (insecure_skip_verify), the second
// verifying with its own secret, zone strict keyed by {jwt.sub}, events 1.
// Forged tokens with fresh subs pass the first and share the second's one
// empty-claim bucket: a forgery never buys a fresh bucket there. A genuine
// token has a bucket of its own.
func TestJWTClaimsAreEachHandlersOwn(t *testing.T) {
	srv := redistest.Start(t)
	caddy := startCaddy(t, caddyConfig{Site: `	route {
		rate_limit {
` + exactRedis(srv) + `			jwt {
				insecure_skip_verify
			}
			zone loose {
				key {jwt.sub}
				events 100
				window 1h
			}
		}
		rate_limit {
` + exactRedis(srv) + `			jwt {
				secret S
			}
			zone strict {
				key {jwt.sub}
				algorithm sliding_log
				events 1
				window 1h
			}
		}
		respond "sub={http.rate_limit.jwt.sub}" 200
	}`})
	client := newClient(4)

	const forgeries = 5
	var got []int
	for i := range forgeries {
		forged := hs256(t, "not-S", jwt.MapClaims{"sub": fmt.Sprintf("forged-%d", i)})
		got = append(got, get(t, client, caddy.URL+"/", "Authorization", "Bearer "+forged).Status)
	}
	if want := wantStatuses(1, forgeries-1, http.StatusTooManyRequests); !slices.Equal(got, want) {
		t.Errorf("forged tokens with fresh subs: got statuses %v, want %v (one empty-claim bucket in zone strict)", got, want)
	}
	genuine := hs256(t, "S", jwt.MapClaims{"sub": "alice"})
	if got := get(t, client, caddy.URL+"/", "Authorization", "Bearer "+genuine).Status; got != http.StatusOK {
		t.Errorf("genuine token: got status %d, want 200 (a bucket of its own)", got)
	}
}
