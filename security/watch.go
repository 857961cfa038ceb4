package security

import (
	"context"
	"time"
)

// DefaultWatchInterval is how often Watch looks at the files.
const DefaultWatchInterval = 5 * time.Second

// Watch reloads the material whenever its files change, looking every
// interval (0: DefaultWatchInterval) until ctx ends, and calls onReload
// (if not nil) after each attempt with its outcome. A failed reload keeps
// the material in use; it is tried again at the next change.
func (c *Credentials) Watch(ctx context.Context, interval time.Duration, onReload func(changed bool, err error)) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	var tick func()
	tick = func() {
		if ctx.Err() != nil {
			return
		}
		if c.Changed() {
			changed, err := c.Reload()
			if err != nil {
				c.logger.Error("TLS material not reloaded; keeping the current one", "error", err)
			}
			if onReload != nil {
				onReload(changed, err)
			}
		}
		c.clock.AfterFunc(interval, tick)
	}
	c.clock.AfterFunc(interval, tick)
}
