package security

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
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
	var badSum string
	var tick func()
	tick = func() {
		if ctx.Err() != nil {
			return
		}
		// Files that failed to load are tried again only once they change
		// again, not at every look.
		if sum := c.filesSum(); c.Changed() && sum != badSum {
			changed, err := c.Reload()
			badSum = ""
			if err != nil {
				badSum = sum
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

// filesSum fingerprints the files' contents as they are now ("" when one
// cannot be read).
func (c *Credentials) filesSum() string {
	h := sha256.New()
	for _, p := range []string{c.files.CA, c.files.Cert, c.files.Key} {
		b, err := os.ReadFile(p)
		if err != nil {
			return ""
		}
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
