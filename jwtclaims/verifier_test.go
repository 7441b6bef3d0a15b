package jwtclaims

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// writePEM writes key's PKIX public key to a file and returns its path.
func writePEM(t *testing.T, pub crypto.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func sign(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func verifier(t *testing.T, c Config) *Verifier {
	t.Helper()
	v, err := New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerify(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	otherRSA, _ := rsa.GenerateKey(rand.Reader, 2048)
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p521, _ := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	edPub, edKey, _ := ed25519.GenerateKey(rand.Reader)
	secret := "s3cret-s3cret-s3cret-s3cret-s3cret"
	now := time.Now()
	good := jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Hour).Unix()}

	hmac := verifier(t, Config{Secret: secret})
	rsaV := verifier(t, Config{PublicKey: writePEM(t, &rsaKey.PublicKey)})
	rsaPEM, _ := os.ReadFile(writePEM(t, &rsaKey.PublicKey))
	strict := verifier(t, Config{Secret: secret, Issuer: "https://issuer", Audience: "api"})

	tests := []struct {
		name  string
		v     *Verifier
		token string
		want  string // sub, "" for no claims
	}{
		{"HS256", hmac, sign(t, jwt.SigningMethodHS256, []byte(secret), good), "alice"},
		{"HS384", hmac, sign(t, jwt.SigningMethodHS384, []byte(secret), good), "alice"},
		{"HS512", hmac, sign(t, jwt.SigningMethodHS512, []byte(secret), good), "alice"},
		{"RS256", rsaV, sign(t, jwt.SigningMethodRS256, rsaKey, good), "alice"},
		{"RS512", rsaV, sign(t, jwt.SigningMethodRS512, rsaKey, good), "alice"},
		{"PS256", rsaV, sign(t, jwt.SigningMethodPS256, rsaKey, good), "alice"},
		{"ES256", verifier(t, Config{PublicKey: writePEM(t, &p256.PublicKey)}), sign(t, jwt.SigningMethodES256, p256, good), "alice"},
		{"ES384", verifier(t, Config{PublicKey: writePEM(t, &p384.PublicKey)}), sign(t, jwt.SigningMethodES384, p384, good), "alice"},
		{"ES512", verifier(t, Config{PublicKey: writePEM(t, &p521.PublicKey)}), sign(t, jwt.SigningMethodES512, p521, good), "alice"},
		{"EdDSA", verifier(t, Config{PublicKey: writePEM(t, edPub)}), sign(t, jwt.SigningMethodEdDSA, edKey, good), "alice"},
		{"wrong secret", hmac, sign(t, jwt.SigningMethodHS256, []byte("another secret"), good), ""},
		{"wrong RSA key", rsaV, sign(t, jwt.SigningMethodRS256, otherRSA, good), ""},
		{"HS256 keyed with the RSA public key", rsaV, sign(t, jwt.SigningMethodHS256, rsaPEM, good), ""},
		{"ES256 on an RSA key", rsaV, sign(t, jwt.SigningMethodES256, p256, good), ""},
		{"none", hmac, sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good), ""},
		{"expired", hmac, sign(t, jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "alice", "exp": now.Add(-time.Minute).Unix()}), ""},
		{"expired seconds ago (no leeway)", hmac, sign(t, jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "alice", "exp": now.Add(-2 * time.Second).Unix()}), ""},
		{"not yet valid", hmac, sign(t, jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "alice", "nbf": now.Add(time.Minute).Unix()}), ""},
		{"right iss and aud", strict, sign(t, jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "alice", "iss": "https://issuer", "aud": []string{"web", "api"}}), "alice"},
		{"wrong iss", strict, sign(t, jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "alice", "iss": "https://evil", "aud": "api"}), ""},
		{"wrong aud", strict, sign(t, jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "alice", "iss": "https://issuer", "aud": "web"}), ""},
		{"missing iss", strict, sign(t, jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "alice", "aud": "api"}), ""},
		{"garbage", hmac, "not.a.token", ""},
		{"empty", hmac, "", ""},
		{"huge", hmac, sign(t, jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "alice", "pad": strings.Repeat("x", MaxTokenBytes)}), ""},
		{"unverified, insecure_skip_verify", verifier(t, Config{InsecureSkipVerify: true}), sign(t, jwt.SigningMethodHS256, []byte("anything"), good), "alice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.v.Verify(tt.token)["sub"]; got != tt.want {
				t.Errorf("sub: got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFlatten(t *testing.T) {
	v := verifier(t, Config{Secret: "k"})
	token := `{"sub":"u1","org":{"id":42,"plan":{"tier":"gold"}},"n":1e3,"f":1.5,"admin":true,"roles":["a","b"],"nil":null}`
	claims := jwt.MapClaims{}
	if err := jsonUnmarshal(token, &claims); err != nil {
		t.Fatal(err)
	}
	flat := v.Verify(sign(t, jwt.SigningMethodHS256, []byte("k"), claims))
	want := map[string]string{
		"sub": "u1", "org.id": "42", "org.plan.tier": "gold", "n": "1000", "f": "1.5",
		"admin": "true", "roles": "a,b", "nil": "",
	}
	for k, w := range want {
		if got := flat[k]; got != w {
			t.Errorf("%s: got %q, want %q", k, got, w)
		}
	}
}

func TestTokenSources(t *testing.T) {
	tok := sign(t, jwt.SigningMethodHS256, []byte("k"), jwt.MapClaims{"sub": "bob"})
	tests := []struct {
		name   string
		config Config
		setup  func(r *httptest.ResponseRecorder) string // unused
		url    string
		header [2]string
	}{
		{"default bearer", Config{Secret: "k"}, nil, "/", [2]string{"Authorization", "Bearer " + tok}},
		{"custom header, bare", Config{Secret: "k", FromHeader: "X-Token"}, nil, "/", [2]string{"X-Token", tok}},
		{"query", Config{Secret: "k", FromQuery: "access_token"}, nil, "/?access_token=" + tok, [2]string{}},
		{"cookie", Config{Secret: "k", FromCookie: "session"}, nil, "/", [2]string{"Cookie", "session=" + tok}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", tt.url, nil)
			if tt.header[0] != "" {
				r.Header.Set(tt.header[0], tt.header[1])
			}
			if got := verifier(t, tt.config).Claims(r)["sub"]; got != "bob" {
				t.Errorf("sub: got %q, want bob", got)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		config  Config
		wantErr string
	}{
		{Config{}, "exactly one"},
		{Config{Secret: "a", JWKSURL: "https://x/jwks"}, "exactly one"},
		{Config{Secret: "a", InsecureSkipVerify: true}, "insecure_skip_verify"},
		{Config{JWKSURL: "ftp://x/jwks"}, "jwks_url"},
		{Config{JWKSURL: "/relative"}, "jwks_url"},
		{Config{Secret: "a", FromHeader: "A", FromQuery: "b"}, "from"},
	}
	for _, tt := range tests {
		err := tt.config.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%+v: got %v, want an error about %s", tt.config, err, tt.wantErr)
		}
	}
	for _, bad := range []string{"missing.pem", "notpem"} {
		path := filepath.Join(t.TempDir(), bad)
		if bad == "notpem" {
			_ = os.WriteFile(path, []byte("hello"), 0o600)
		}
		if _, err := New(context.Background(), Config{PublicKey: path}); err == nil || !strings.Contains(err.Error(), "public_key") {
			t.Errorf("public_key %s: got %v, want an error naming public_key", bad, err)
		}
	}
}

// FuzzVerify: no token, however malformed, panics the verifier.
func FuzzVerify(f *testing.F) {
	v, err := New(context.Background(), Config{Secret: "k"})
	if err != nil {
		f.Fatal(err)
	}
	unverified, _ := New(context.Background(), Config{InsecureSkipVerify: true})
	f.Add("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln")
	f.Add("a.b.c")
	f.Add(`{"alg":"none"}..`)
	f.Fuzz(func(t *testing.T, token string) {
		v.Verify(token)
		unverified.Verify(token)
	})
}
