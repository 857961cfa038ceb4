package lease_test

import (
	"fmt"
	"time"

	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/internal/clock"
)

func Example() {
	c := clock.NewManual(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := lease.DefaultConfig()
	cfg.Clock = c
	cfg.OnExpire = func(in lease.Info) {
		// In the cluster: replicate the expiry, start a ServerCrashProcedure.
		fmt.Println("expired:", in.Holder, in.Entities)
	}
	m, err := lease.New(cfg)
	if err != nil {
		panic(err)
	}
	m.Start()
	defer m.Stop()

	m.Grant("rs1,16020,1", "region-a")
	m.Grant("rs2,16020,1", "region-b")
	c.Advance(7 * time.Second) // past the 6 s soft limit
	fmt.Println("rs1:", m.State("rs1,16020,1"))
	_ = m.Renew("rs2,16020,1")
	fmt.Println("rs2:", m.State("rs2,16020,1"))
	c.Advance(9 * time.Second) // rs1 past the 15 s hard limit; the monitor runs
	_, held := m.HolderOf("region-a")
	fmt.Println("region-a still held:", held)
	// Output:
	// rs1: suspect
	// rs2: live
	// expired: rs1,16020,1 [region-a]
	// region-a still held: false
}
