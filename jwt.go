package sluice

import (
	"net/http"
	"strings"

	"github.com/sluicehq/caddy-sluice/jwtclaims"
)

// Placeholder prefixes of verified JWT claims: {jwt.<claim>} in keys, and
// {http.rate_limit.jwt.<claim>} for other handlers.
const (
	jwtPrefix         = "jwt."
	jwtExportedPrefix = "http.rate_limit.jwt."
)

// claimPlaceholders serves the claim placeholders of one request. The token
// is verified on the first lookup, once, however many zones use it.
type claimPlaceholders struct {
	verifier *jwtclaims.Verifier
	request  *http.Request
	claims   map[string]string
	verified bool
}

func (c *claimPlaceholders) lookup(key string) (any, bool) {
	claim, ok := strings.CutPrefix(key, jwtPrefix)
	if !ok {
		if claim, ok = strings.CutPrefix(key, jwtExportedPrefix); !ok {
			return nil, false
		}
	}
	if !c.verified {
		c.claims, c.verified = c.verifier.Claims(c.request), true
	}
	return c.claims[claim], true
}
