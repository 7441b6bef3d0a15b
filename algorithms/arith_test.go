package algorithms

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestMulDiv: mulDiv and ceilMulDiv are exact where a×b passes int64, and
// saturate at math.MaxInt64 where the quotient would.
func TestMulDiv(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		a, b, c := rng.Int64N(1<<50), rng.Int64N(1<<40), 1+rng.Int64N(1<<45)
		prod := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
		q, r := new(big.Int).QuoRem(prod, big.NewInt(c), new(big.Int))
		wantQ, wantR := q.Int64(), r.Int64()
		if !q.IsInt64() {
			wantQ, wantR = math.MaxInt64, 0
		}
		if gotQ, gotR := mulDiv(a, b, c); gotQ != wantQ || gotR != wantR {
			t.Fatalf("mulDiv(%d, %d, %d): got %d r %d, want %d r %d", a, b, c, gotQ, gotR, wantQ, wantR)
		}
		wantCeil := wantQ
		if wantR > 0 && wantCeil < math.MaxInt64 {
			wantCeil++
		}
		if got := ceilMulDiv(a, b, c); got != wantCeil {
			t.Fatalf("ceilMulDiv(%d, %d, %d): got %d, want %d", a, b, c, got, wantCeil)
		}
	}
	if q, _ := mulDiv(math.MaxInt64, math.MaxInt64, 1); q != math.MaxInt64 {
		t.Errorf("mulDiv(max, max, 1): got %d, want saturated at %d", q, int64(math.MaxInt64))
	}
}
