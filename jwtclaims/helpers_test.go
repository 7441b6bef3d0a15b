package jwtclaims

import (
	"encoding/json"
	"strings"
)

func jsonUnmarshal(s string, v any) error {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	return d.Decode(v)
}
