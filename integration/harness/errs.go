package harness

import "syscall"

// Error-returning variants of the fault calls, for nemesis goroutines
// (off the test goroutine, where t.Fatal must not be called).

// PauseErr is Pause returning an error.
func (c *Cluster) PauseErr(id string) error { return c.Node(id).pause() }

// ResumeErr is Resume returning an error.
func (c *Cluster) ResumeErr(id string) error { return c.Node(id).signal(syscall.SIGCONT) }

// KillRSErr is KillRS returning an error.
func (c *Cluster) KillRSErr(id string) error { return c.RegionServer(id).kill() }

// RestartRSErr is RestartRS returning an error.
func (c *Cluster) RestartRSErr(id string) error {
	s := c.RegionServer(id)
	return s.run(s.ID, c.opts.Binary, s.args, s.env, s.LogPath)
}

// PauseRSErr is PauseRS returning an error.
func (c *Cluster) PauseRSErr(id string) error { return c.RegionServer(id).pause() }

// ResumeRSErr is ResumeRS returning an error.
func (c *Cluster) ResumeRSErr(id string) error { return c.RegionServer(id).signal(syscall.SIGCONT) }
