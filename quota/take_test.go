package quota

import "testing"

func TestQuotaLeasesServeOnlyTheirLimit(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	f.warm(t, leasing("k", 100_000))
	left := f.left("k")
	before := f.store.requests.Load()
	if d := f.allow(t, leasing("k", 50_000))[0]; d.Leased || f.store.requests.Load() != before+1 {
		t.Error("a request of another limit was admitted from the lease")
	}
	if got := f.left("k"); got != left {
		t.Errorf("units left %d, want %d: a request of another limit took some", got, left)
	}
}

func TestQuotaLeasesAllOrNothing(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	ip1, ip2, static := leasing("ip1", 100_000), leasing("ip2", 100_000), leasing("static", 100_000)
	ds := f.warm(t, ip1, static)
	if ds[1].Quota.Units == 0 {
		t.Fatalf("a grant for one zone only: %+v", ds)
	}
	left := f.left("static")
	before := f.store.requests.Load()
	ds = f.allow(t, ip2, static) // ip2 holds no lease
	if ds[0].Leased || ds[1].Leased || f.store.requests.Load() != before+1 {
		t.Errorf("a request with a zone without a lease was decided in process: %+v", ds)
	}
	if got := f.left("static"); got != left {
		t.Errorf("static's lease has %d left, want %d: a request not admitted from it took units", got, left)
	}
	before = f.store.requests.Load()
	ds = f.allow(t, ip1, static)
	if !ds[0].Leased || !ds[1].Leased || f.store.requests.Load() != before {
		t.Errorf("a request with leases in every zone was not decided in process: %+v", ds)
	}
	big := ip1
	big.Cost = f.left("ip1") + 1
	static.Cost = 1
	before = f.store.requests.Load()
	leftStatic := f.left("static")
	if ds = f.allow(t, static, big); ds[0].Leased || f.store.requests.Load() != before+1 { // static's lease could serve, big's cannot
		t.Errorf("a cost above one zone's lease was decided in process: %+v", ds)
	}
	if got, want := f.left("static"), leftStatic+ds[0].Quota.Units; got != want { // its lease, and the new grant
		t.Errorf("static's leases have %d left, want %d", got, want)
	}
}
