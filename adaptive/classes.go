package adaptive

// reserveScale is the precision a reserve is kept at (parts per million),
// so that a class's share is exact integer arithmetic: floor(10 × 0.8) is
// 8, never 7 from a float that fell just short.
const reserveScale = 1_000_000

// Share is what class (0 the most important, n the number of classes)
// may use of limit: floor(limit × (1 − reserve × class/(n−1))), reserve a
// fraction from 0 to 1. With one class (or none) the share is the limit:
// reserve does not apply. A class past the last is the last.
func Share(limit, class, n int, reserve float64) int {
	if n < 2 || class <= 0 || limit <= 0 {
		return max(limit, 0)
	}
	class = min(class, n-1)
	r := int64(reserve*reserveScale + 0.5)
	r = min(max(r, 0), reserveScale)
	den := int64(reserveScale) * int64(n-1)
	num := int64(limit) * (den - r*int64(class))
	return int(num / den)
}
