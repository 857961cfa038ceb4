package security

import (
	"context"
	"crypto/sha256"
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
	// badSum fingerprints the files that last failed to load (or the
	// error reading them): they are tried again only once they change
	// again, not at every look.
	var badSum [sha256.Size]byte
	var tick func()
	tick = func() {
		if ctx.Err() != nil {
			return
		}
		// One read of the files a look, whatever it finds.
		raw, err := c.readFiles()
		if err != nil || !c.isLoaded(raw) {
			sum := fingerprint(raw, err)
			if sum != badSum {
				changed := false
				if err == nil {
					changed, err = c.reloadFrom(raw)
				}
				badSum = [sha256.Size]byte{}
				if err != nil {
					badSum = sum
					c.logger.Error("TLS material not reloaded; keeping the current one", "error", err)
				}
				if onReload != nil {
					onReload(changed, err)
				}
			}
		}
		c.clock.AfterFunc(interval, tick)
	}
	c.clock.AfterFunc(interval, tick)
}

// fingerprint identifies files' contents, or the error reading them.
func fingerprint(raw [3][]byte, err error) [sha256.Size]byte {
	h := sha256.New()
	if err != nil {
		h.Write([]byte(err.Error()))
	}
	for _, b := range raw {
		h.Write(b)
		h.Write([]byte{0})
	}
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}
