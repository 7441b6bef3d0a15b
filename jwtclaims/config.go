// Package jwtclaims verifies a request's JSON Web Token and exposes its
// claims to rate-limit keys as {jwt.<claim>}. Claims come only from a token
// whose signature, exp/nbf, issuer and audience verified: a missing, expired
// or forged token yields no claims, so minting a token per request never
// buys a fresh bucket.
package jwtclaims

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/caddy-sluice/internal/envexpand"
)

// Defaults and bounds.
const (
	defaultHeader      = "Authorization"
	defaultJWKSRefresh = time.Hour
	// MaxTokenBytes is the largest token parsed; larger ones yield no
	// claims unparsed.
	MaxTokenBytes = 8 << 10
	// unknownKIDRefresh is the least time between two JWKS fetches caused
	// by tokens whose key ID is not in the set.
	unknownKIDRefresh = 10 * time.Second
	jwksFetchTimeout  = 5 * time.Second
)

// Config is where a request's token comes from and how it is verified.
// Exactly one of Secret, PublicKey and JWKSURL is required, unless
// InsecureSkipVerify is set alone.
type Config struct {
	// FromHeader, FromCookie and FromQuery name where the token is; at most
	// one. Default: the Authorization header. A "Bearer " prefix is removed.
	FromHeader string `json:"from_header,omitempty"`
	FromCookie string `json:"from_cookie,omitempty"`
	FromQuery  string `json:"from_query,omitempty"`

	// Secret is the HMAC key (HS256, HS384, HS512): the raw bytes of the
	// string. {env.JWT_SECRET} works.
	Secret string `json:"secret,omitempty"`

	// PublicKey is a PEM file: a PKIX "PUBLIC KEY", a PKCS#1 "RSA PUBLIC
	// KEY" or a certificate. Its type pins the algorithms: RSA → RS*/PS*,
	// ECDSA → the ES* of its curve, Ed25519 → EdDSA.
	PublicKey string `json:"public_key,omitempty"`

	// JWKSURL is an http(s) URL of a JSON Web Key Set. Keys are fetched at
	// start, refreshed every JWKSRefresh and at once on an unknown key ID
	// (at most once per 10 s); a failed fetch keeps the last good set.
	JWKSURL     string         `json:"jwks_url,omitempty"`
	JWKSRefresh caddy.Duration `json:"jwks_refresh,omitempty"`

	// Issuer and Audience, when set, must match the token's iss and aud.
	Issuer   string `json:"issuer,omitempty"`
	Audience string `json:"audience,omitempty"`

	// InsecureSkipVerify trusts claims without verifying anything. Only
	// behind a gateway that has verified the token.
	InsecureSkipVerify bool `json:"insecure_skip_verify,omitempty"`
}

// Expanded returns c with the {env.*} placeholders ({env.JWT_SECRET}) in
// its secret, key file and URL replaced. Only those: any other {…} in a
// secret is part of the secret.
func (c Config) Expanded() Config {
	c.Secret = envexpand.Expand(c.Secret)
	c.PublicKey = envexpand.Expand(c.PublicKey)
	c.JWKSURL = envexpand.Expand(c.JWKSURL)
	return c
}

// Validate checks the configuration without reading files or the network.
func (c *Config) Validate() error {
	sources := 0
	for _, s := range []string{c.FromHeader, c.FromCookie, c.FromQuery} {
		if s != "" {
			sources++
		}
	}
	if sources > 1 {
		return fmt.Errorf("jwt: from: give one of header, cookie or query")
	}
	keys := 0
	for _, s := range []string{c.Secret, c.PublicKey, c.JWKSURL} {
		if s != "" {
			keys++
		}
	}
	switch {
	case c.InsecureSkipVerify && keys > 0:
		return fmt.Errorf("jwt: insecure_skip_verify excludes secret, public_key and jwks_url")
	case !c.InsecureSkipVerify && keys != 1:
		return fmt.Errorf("jwt: give exactly one of secret, public_key or jwks_url (or insecure_skip_verify)")
	}
	if c.JWKSURL != "" {
		u, err := url.Parse(c.JWKSURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("jwt: jwks_url: want an http(s) URL, got %q", c.JWKSURL)
		}
	}
	if c.JWKSRefresh < 0 {
		return fmt.Errorf("jwt: jwks_refresh must be positive")
	}
	return nil
}

// keys returns the function that finds a token's key and the algorithms it
// may use. ctx ends the JWKS refresh.
func (c *Config) keys(ctx context.Context) (jwt.Keyfunc, []string, error) {
	switch {
	case c.Secret != "":
		secret := []byte(c.Secret)
		return func(*jwt.Token) (any, error) { return secret, nil }, []string{"HS256", "HS384", "HS512"}, nil
	case c.PublicKey != "":
		key, methods, err := loadPublicKey(c.PublicKey)
		if err != nil {
			return nil, nil, fmt.Errorf("jwt: public_key: %w", err)
		}
		return func(*jwt.Token) (any, error) { return key, nil }, methods, nil
	case c.JWKSURL != "":
		refresh := time.Duration(c.JWKSRefresh)
		if refresh == 0 {
			refresh = defaultJWKSRefresh
		}
		kf, err := newJWKS(ctx, c.JWKSURL, refresh)
		if err != nil {
			return nil, nil, fmt.Errorf("jwt: jwks_url: %w", err)
		}
		return kf, asymmetricMethods, nil
	}
	return nil, nil, nil
}

var asymmetricMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// loadPublicKey reads a PEM public key or certificate and the algorithms
// its type allows.
func loadPublicKey(path string) (crypto.PublicKey, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, nil, fmt.Errorf("%s: no PEM block", path)
	}
	var key any
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	default:
		return nil, nil, fmt.Errorf("%s: unsupported PEM block %q", path, block.Type)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	methods, err := methodsFor(key)
	return key, methods, err
}

// methodsFor pins the algorithms to the key type, so that no token can
// choose "none" or an HMAC keyed with the public key.
func methodsFor(key any) ([]string, error) {
	switch k := key.(type) {
	case *rsa.PublicKey:
		return []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}, nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return []string{"ES256"}, nil
		case elliptic.P384():
			return []string{"ES384"}, nil
		case elliptic.P521():
			return []string{"ES512"}, nil
		}
	case ed25519.PublicKey:
		return []string{"EdDSA"}, nil
	}
	return nil, fmt.Errorf("unsupported key type %T", key)
}
