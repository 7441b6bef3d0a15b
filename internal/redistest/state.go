package redistest

import (
	"encoding/binary"
	"math"
)

// PackedDoubles is vs as little-endian doubles, as the decide code's
// struct '<d…' stores a state: what a test writes to preset one, or
// compares a stored one with.
func PackedDoubles(vs ...int64) string {
	b := make([]byte, 0, 8*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return string(b)
}
