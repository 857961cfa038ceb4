package lease

import (
	"sync"

	"github.com/baton-dev/baton/internal/clock"
)

// monitor runs CheckNow every MonitorInterval on the Clock. It uses the
// clock's AfterFunc rather than a goroutine with a ticker, so a Manual clock
// drives it deterministically and a stopped monitor leaves nothing behind.
type monitor struct {
	mu      sync.Mutex
	running bool
	// gen tells a callback from a stopped monitor (one that had already
	// fired when Stop ran) from the current one after a restart.
	gen   uint64
	timer clock.Timer
	// passes counts this generation's callbacks inside a pass, so Stop can
	// wait for them. Each Start makes a new one, so a WaitGroup is never
	// reused while a Stop may still be waiting on it.
	passes *sync.WaitGroup
}

// Start starts the monitor; it is a no-op if it is running. The first pass
// runs MonitorInterval from now, and each next one MonitorInterval after the
// previous pass ends, so a slow OnExpire never makes passes pile up.
func (m *Manager) Start() {
	m.mon.mu.Lock()
	defer m.mon.mu.Unlock()
	if m.mon.running {
		return
	}
	m.mon.running = true
	m.mon.gen++
	m.mon.passes = new(sync.WaitGroup)
	m.armLocked(m.mon.gen, m.mon.passes)
}

// Stop stops the monitor and waits for a pass in progress, so no OnExpire
// call happens after it returns. It is a no-op if the monitor is not running.
// It must not be called from OnExpire.
func (m *Manager) Stop() {
	m.mon.mu.Lock()
	if !m.mon.running {
		m.mon.mu.Unlock()
		return
	}
	m.mon.running = false
	m.mon.timer.Stop()
	m.mon.timer = nil
	passes := m.mon.passes
	m.mon.mu.Unlock()
	// No pass of this generation can begin now, so Wait sees every Add.
	passes.Wait()
}

func (m *Manager) armLocked(gen uint64, passes *sync.WaitGroup) {
	m.mon.timer = m.cfg.Clock.AfterFunc(m.interval, func() { m.tick(gen, passes) })
}

func (m *Manager) tick(gen uint64, passes *sync.WaitGroup) {
	m.mon.mu.Lock()
	if !m.mon.running || m.mon.gen != gen {
		m.mon.mu.Unlock()
		return
	}
	passes.Add(1)
	m.mon.mu.Unlock()

	m.CheckNow()

	m.mon.mu.Lock()
	if m.mon.running && m.mon.gen == gen {
		m.armLocked(gen, passes)
	}
	m.mon.mu.Unlock()
	passes.Done()
}
