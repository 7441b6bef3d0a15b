package jwtclaims

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

var errUnknownKID = errors.New("unknown key ID; the key set was refreshed less than 10s ago")

// newJWKS returns a key function over the JWK Set at url, refreshed every
// refresh until ctx ends, and at once on an unknown key ID but at most once
// per unknownKIDRefresh: a token with an unknown kid beyond that fails at
// once, never waits. A failed fetch keeps the last good set, including at
// start (the set is then empty until a fetch succeeds).
func newJWKS(ctx context.Context, url string, refresh time.Duration) (jwt.Keyfunc, error) {
	cached, err := jwkset.NewStorageFromHTTP(url, jwkset.HTTPClientStorageOptions{
		Ctx:                       ctx,
		HTTPTimeout:               jwksFetchTimeout,
		NoErrorReturnFirstHTTPReq: true,
		RefreshInterval:           refresh,
	})
	if err != nil {
		return nil, err
	}
	unknownKID := rate.NewLimiter(rate.Every(unknownKIDRefresh), 1)
	client, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs:          map[string]jwkset.Storage{url: cached},
		RateLimitWaitMax:  jwksFetchTimeout,
		RefreshUnknownKID: unknownKID,
	})
	if err != nil {
		return nil, err
	}
	kf, err := keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: client})
	if err != nil {
		return nil, fmt.Errorf("building key function: %w", err)
	}
	return func(token *jwt.Token) (any, error) {
		if kid, ok := token.Header["kid"].(string); ok && unknownKID.Tokens() < 1 {
			if _, err := cached.KeyRead(ctx, kid); errors.Is(err, jwkset.ErrKeyNotFound) {
				return nil, errUnknownKID
			}
		}
		return kf.Keyfunc(token)
	}, nil
}
