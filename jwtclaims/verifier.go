package jwtclaims

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// Verifier turns a request's token into its verified claims.
type Verifier struct {
	config  Config
	parser  *jwt.Parser
	keyfunc jwt.Keyfunc
}

// New builds a verifier: it reads the public key or starts the JWKS
// refresh, which runs until ctx ends. It does not check c: Validate does,
// once (Caddy runs it after Provision); a verifier of an invalid config
// verifies no token.
func New(ctx context.Context, c Config) (*Verifier, error) {
	if c.FromHeader == "" && c.FromCookie == "" && c.FromQuery == "" {
		c.FromHeader = defaultHeader
	}
	keyfunc, methods, err := c.keys(ctx)
	if err != nil {
		return nil, err
	}
	opts := []jwt.ParserOption{jwt.WithJSONNumber(), jwt.WithValidMethods(methods)}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	return &Verifier{config: c, parser: jwt.NewParser(opts...), keyfunc: keyfunc}, nil
}

// Claims returns the verified claims of r's token, flattened (see
// Flatten); nil when there is no token or it does not verify.
func (v *Verifier) Claims(r *http.Request) map[string]string {
	return v.Verify(v.token(r))
}

// Verify returns the verified, flattened claims of a raw token; nil when it
// does not verify or is larger than MaxTokenBytes.
func (v *Verifier) Verify(raw string) map[string]string {
	if raw == "" || len(raw) > MaxTokenBytes {
		return nil
	}
	claims := jwt.MapClaims{}
	var err error
	if v.config.InsecureSkipVerify {
		_, _, err = v.parser.ParseUnverified(raw, claims)
	} else {
		_, err = v.parser.ParseWithClaims(raw, claims, v.keyfunc)
	}
	if err != nil {
		return nil
	}
	return Flatten(claims)
}

func (v *Verifier) token(r *http.Request) string {
	switch {
	case v.config.FromCookie != "":
		c, err := r.Cookie(v.config.FromCookie)
		if err != nil {
			return ""
		}
		return c.Value
	case v.config.FromQuery != "":
		return r.URL.Query().Get(v.config.FromQuery)
	}
	h := r.Header.Get(v.config.FromHeader)
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return h
}

// Flatten renders claims as strings keyed by their dotted path: nested
// objects by dots ("org.id"), numbers as written in the token, booleans as
// true/false, arrays joined by commas; null is "".
//
// When two claims flatten to one path, the one nested less wins: a claim
// named "org.id" beats {"org":{"id":…}}; between equally nested ones, the
// first in byte order of the names on their way. Deterministic, so one token
// always yields one key.
func Flatten(claims map[string]any) map[string]string {
	flat := make(map[string]string, len(claims))
	depths := make(map[string]int, len(claims))
	flatten("", 0, claims, flat, depths)
	return flat
}

func flatten(prefix string, depth int, obj map[string]any, flat map[string]string, depths map[string]int) {
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if nested, ok := obj[k].(map[string]any); ok {
			flatten(prefix+k+".", depth+1, nested, flat, depths)
			continue
		}
		path := prefix + k
		if d, taken := depths[path]; taken && d <= depth {
			continue
		}
		flat[path], depths[path] = render(obj[k]), depth
	}
}

func render(val any) string {
	switch v := val.(type) {
	case string:
		return v
	case json.Number:
		return canonicalNumber(v)
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return ""
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = render(e)
		}
		return strings.Join(parts, ",")
	default: // objects inside arrays
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// canonicalNumber renders 1000, 1e3 and 1000.0 alike: integers in decimal,
// other numbers in the shortest form that round-trips.
func canonicalNumber(n json.Number) string {
	if i, err := n.Int64(); err == nil {
		return strconv.FormatInt(i, 10)
	}
	f, err := n.Float64()
	if err != nil {
		return n.String()
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
