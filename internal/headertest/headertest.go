// Package headertest parses rate-limit header fields for tests, with
// httpsfv: the unit tests and the integration tests read RateLimit and
// RateLimit-Policy with the same parser.
package headertest

import (
	"fmt"

	"github.com/dunglas/httpsfv"
)

// Member is one list member of RateLimit or RateLimit-Policy: a string
// item, the zone's name, with integer parameters.
type Member struct {
	Name   string
	Params []string // parameter names, in order
	Values map[string]int64
}

// ParseList parses the values of one field as a structured-field List of
// Members, in order.
func ParseList(values []string) ([]Member, error) {
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		return nil, fmt.Errorf("%q: not a structured-field List: %w", values, err)
	}
	members := make([]Member, 0, len(list))
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			return nil, fmt.Errorf("%q: member %#v, want an item", values, m)
		}
		name, ok := item.Value.(string)
		if !ok {
			return nil, fmt.Errorf("%q: member value %#v (%T), want a string", values, item.Value, item.Value)
		}
		member := Member{Name: name, Params: item.Params.Names(), Values: map[string]int64{}}
		for _, k := range member.Params {
			v, _ := item.Params.Get(k)
			n, ok := v.(int64)
			if !ok {
				return nil, fmt.Errorf("%q: member %q: %s=%#v (%T), want an integer", values, name, k, v, v)
			}
			member.Values[k] = n
		}
		members = append(members, member)
	}
	return members, nil
}
