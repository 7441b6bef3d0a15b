package quota

import "time"

// The sweep: leases end as their time passes, in the background on the
// real clock (while some are held), else when the caller calls Sweep.

// startSweep starts the background sweep unless it runs (or q sweeps
// only when told, on a clock of its own): it runs while leases are held.
func (q *Leases) startSweep() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.autoSweep || q.sweeping || q.closed.Load() {
		return
	}
	q.sweeping = true
	q.sweeper.Add(1)
	go q.sweepLoop()
}

// sweepLoop ends leases as their time passes, until none is held or q
// closes.
func (q *Leases) sweepLoop() {
	defer q.sweeper.Done()
	timer := time.NewTimer(quotaSweepMin)
	defer timer.Stop()
	for {
		select {
		case <-q.stop:
			return
		case <-timer.C:
		}
		next := q.Sweep()
		q.mu.Lock()
		if q.held.Load() == 0 || q.closed.Load() {
			q.sweeping = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		timer.Reset(min(max(next.Sub(q.now()), quotaSweepMin), quotaSweepMax))
	}
}

// Sweep ends the leases whose time has passed, gives back their unused
// units, and returns the earliest end of those left (zero: none). The
// background sweep calls it; with a clock of its own (NewLeasesOf),
// the caller does.
func (q *Leases) Sweep() time.Time {
	now := q.now()
	var ended []*quotaLease
	var next time.Time
	for s := range q.shards {
		sh := &q.shards[s]
		sh.mu.Lock()
		for j := 0; j < len(sh.held); {
			k := &sh.slots[sh.held[j]]
			kept := k.leases[:0]
			for _, l := range k.leases {
				if now.Before(l.end) {
					kept = append(kept, l)
					if next.IsZero() || l.end.Before(next) {
						next = l.end
					}
				} else {
					ended = append(ended, l)
				}
			}
			clear(k.leases[len(kept):])
			sh.setLeases(k, kept)
			if len(kept) > 0 {
				j++
			} // else its place in held went to the last
		}
		sh.mu.Unlock()
	}
	q.held.Add(-int64(len(ended)))
	q.giveBack(ended)
	return next
}
