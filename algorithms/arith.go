package algorithms

// The exact integer arithmetic the Go twins share with prelude.lua.

import (
	"math"
	"math/bits"
)

// maxTime caps every duration an algorithm reports or stores, in µs (2^52,
// about 142 years): a token bucket of 10^9 refilled once a year takes
// longer than that to drain, and the scripts' doubles are exact below 2^53.
const maxTime = 1 << 52

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// mulDiv is floor(a×b/c) and a×b mod c, exactly, for a, b ≥ 0 and c > 0;
// the quotient saturates at math.MaxInt64. prelude.lua's mul_div is its
// twin: these products (events × window and the like) reach 2^75.
func mulDiv(a, b, c int64) (q, r int64) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64, 0
	}
	uq, ur := bits.Div64(hi, lo, uint64(c))
	if uq > math.MaxInt64 {
		return math.MaxInt64, 0
	}
	return int64(uq), int64(ur)
}

// ceilMulDiv is ceil(a×b/c), exactly; it saturates as mulDiv does.
func ceilMulDiv(a, b, c int64) int64 {
	q, r := mulDiv(a, b, c)
	if r > 0 && q < math.MaxInt64 {
		q++
	}
	return q
}
