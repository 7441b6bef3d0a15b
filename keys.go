package sluice

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/netip"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// A zone's key: its template expanded from a request's placeholders
// (checkBraces checks a template's braces at provision), grouped by
// network, then hashed into the store key under the zone's prefix.

// hashedKeyBytes is how much of the SHA-256 of a key is kept: 128 bits,
// so no client can aim a key at another's bucket.
const hashedKeyBytes = 16

// hashTagLen is the length of the hash in a store key: hashedKeyBytes in
// unpadded standard base64.
const hashTagLen = (hashedKeyBytes*8 + 5) / 6

// ipPlaceholders are the placeholders that ipv4_prefix and ipv6_prefix
// group by network ({client_ip} and {remote_host} in a Caddyfile).
var ipPlaceholders = map[string]bool{
	"http.vars.client_ip":      true,
	"http.request.remote.host": true,
	"client_ip":                true,
	"remote_host":              true,
}

// expand fills the zone's key template for one request. Unknown and empty
// placeholders expand to "".
func (z *Zone) expand(repl *caddy.Replacer) string {
	if z.IPv4Prefix == 0 && z.IPv6Prefix == 0 {
		if z.keyVar != "" { // one placeholder: its value, as ReplaceAll gives it, without a copy
			val, _ := repl.Get(z.keyVar)
			return caddy.ToString(val)
		}
		return repl.ReplaceAll(z.Key, "")
	}
	key, _ := repl.ReplaceFunc(z.Key, func(variable string, val any) (any, error) {
		if !ipPlaceholders[variable] {
			return val, nil
		}
		return z.network(val), nil
	})
	return key
}

// singlePlaceholder is the variable of a key template that is exactly one
// placeholder, such as "{http.request.header.X-Key}", or "" otherwise. Such
// a key expands to the variable's value (unknown: ""), which is what
// Replacer.ReplaceAll returns for it, minus ReplaceAll's copy. Templates
// with escapes or {file.*} (memoized by ReplaceAll) take the general path.
func singlePlaceholder(template string) string {
	if len(template) < 3 || template[0] != '{' || template[len(template)-1] != '}' {
		return ""
	}
	name := template[1 : len(template)-1]
	if strings.ContainsAny(name, "{}\\") || strings.HasPrefix(name, "file.") {
		return ""
	}
	return name
}

// network is the client network of address val, or val itself when it is
// not an address or its family has no prefix set.
func (z *Zone) network(val any) any {
	s, ok := val.(string)
	if !ok {
		return val
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return val
	}
	bits := z.IPv6Prefix
	if addr.Unmap().Is4() {
		addr, bits = addr.Unmap(), z.IPv4Prefix
	}
	if bits == 0 {
		return val
	}
	prefix, err := addr.Prefix(bits)
	if err != nil {
		return val
	}
	return prefix.String()
}

// storeKey is the Redis key of an expanded key: the zone's prefix, then a
// hash of the algorithm and the key inside a Redis Cluster hash tag. Client
// input thus never reaches Redis raw, cannot choose a slot or another zone,
// and never makes a key longer than the prefix plus 28 bytes. The algorithm
// is hashed in (and for fixed_window its calendar period and time zone,
// if any) so that changing it starts from fresh state instead of
// misreading the old one; the version of its state format follows the tag
// (algorithms.StateSuffix), so that a release with a new format neither
// misreads the previous release's state nor has its own misread.
func (z *Zone) storeKey(expanded string) string {
	var stack [128]byte
	return string(z.appendStoreKey(stack[:0], expanded))
}

// appendStoreKey appends the store key of expanded to buf: match builds
// the keys of all its zones in one buffer, and so one string.
func (z *Zone) appendStoreKey(buf []byte, expanded string) []byte {
	var stack [128]byte
	material := append(stack[:0], z.limit.Algorithm...)
	if z.limit.HasPeriod() { // its state is never a window's, nor another period's
		material = append(append(material, '@'), z.limit.Calendar.Period.String()...)
		material = append(append(material, '@'), z.timeZoneName()...)
	}
	material = append(append(material, 0), expanded...)
	sum := sha256.Sum256(material)
	var tag [hashTagLen]byte
	base64.RawStdEncoding.Encode(tag[:], sum[:hashedKeyBytes])
	buf = append(append(buf, z.keyPrefix...), '{')
	buf = append(append(buf, tag[:]...), '}')
	return append(buf, algorithms.StateSuffix(z.limit.Algorithm)...)
}

// storePrefix is the store's key_prefix this zone's keys start with
// (keyPrefix without the zone's name): where its top offenders are kept.
func (z *Zone) storePrefix() string {
	return strings.TrimSuffix(z.keyPrefix, z.name+":")
}

// checkBraces fails when the braces of template, an option's value, do
// not pair as Caddy's replacer reads them: an unclosed "{" or a "}" that
// closes nothing is taken as text (the placeholder never expands), and a
// "{" inside a placeholder makes one unknown placeholder, always empty.
// A brace escaped as \{ or \} is text, as Caddy reads it.
func checkBraces(option, template string) error {
	open := -1
	for i := 0; i < len(template); i++ {
		switch c := template[i]; {
		case c == '\\' && i+1 < len(template) && (template[i+1] == '{' || template[i+1] == '}'):
			i++
		case c == '{' && open >= 0:
			return fmt.Errorf("%s: %q opens a placeholder inside another in %q; escape a literal brace as \\{", option, template[open:i+1], template)
		case c == '{':
			open = i
		case c == '}' && open < 0:
			return fmt.Errorf("%s: a } closes no placeholder in %q; escape a literal brace as \\}", option, template)
		case c == '}':
			open = -1
		}
	}
	if open >= 0 {
		return fmt.Errorf("%s: %q is never closed: Caddy would read it as text, not a placeholder; add the }, or escape a literal brace as \\{", option, template[open:])
	}
	return nil
}

// timeZoneName is a period zone's time zone ("" without a period).
func (z *Zone) timeZoneName() string {
	if !z.limit.HasPeriod() {
		return ""
	}
	return z.limit.Calendar.Location.String()
}
