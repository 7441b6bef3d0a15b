package algorithms

// QuotaKeys is the number of keys whose quota lease bookkeeping is held,
// expired or not: for the tests of its bound, in package algorithms_test.
func (m *MemoryStore) QuotaKeys() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.quota.byKey)
		sh.mu.Unlock()
	}
	return n
}
