package main

import (
	"os"
	"os/user"
	"strconv"
)

// lookupUser is os/user.Current, a variable for tests.
var lookupUser = user.Current

// userName is who runs the command, for the records that name a caller
// (a lock's holder, a repair's caller): $USER, else the OS's account of
// the process's user (cron, systemd units and containers often set no
// $USER), else its uid.
func (c *cli) userName() string {
	if u := c.getenv("USER"); u != "" {
		return u
	}
	if u, err := lookupUser(); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid" + strconv.Itoa(os.Getuid())
}
