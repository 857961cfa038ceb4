package main

import (
	"context"
	"fmt"

	"github.com/baton-dev/baton/cluster/client"
)

var nsUsage = `usage: baton ns <command> [flags]

commands:
  create NAME [--wait]   create a namespace
  delete NAME [--wait]   delete a namespace (it must hold no tables)
  get NAME [--stale]     show one namespace (exit 1, NOT_FOUND, if there is none)
  list [--stale]         list the namespaces

Reads are linearizable: they reflect every write acknowledged before them.
--stale lets the first node reached answer from its own state, which may
lag; every read says on stderr (and in --json under "read") which node
served it, at which applied index and consistency.
` + fmt.Sprintf(clientFlagsNote, "ns")

func init() {
	topLevel.add(topCommand{
		name: "ns", rank: 50, run: (*cli).ns,
		summary: `create NAME, delete NAME, list`,
	})
}

func (c *cli) ns(args []string) int {
	return c.subcommands("ns", nsUsage, args, map[string]func([]string) int{
		"create": func(a []string) int { return c.nsChange("create", (*client.Client).CreateNamespace, a) },
		"delete": func(a []string) int { return c.nsChange("delete", (*client.Client).DeleteNamespace, a) },
		"get":    c.nsGet,
		"list":   c.nsList,
	})
}

func (c *cli) nsChange(verb string, start func(cl *client.Client, ctx context.Context, ns, nonce string) (uint64, error), args []string) int {
	e := c.command("ns "+verb, "NAME [--wait] [--nonce N]", nsAdvice)
	wait, nonce := e.waitFlag(), e.nonceFlag()
	pos, code, ok := e.parse(args, 1, "namespace NAME")
	if !ok {
		return code
	}
	if err := checkName("namespace", pos[0]); err != nil {
		return e.fail(err)
	}
	return e.start(verb+" namespace "+pos[0], *wait, func(cl *client.Client) (uint64, error) {
		return start(cl, c.ctx, pos[0], *nonce)
	})
}

// namespacesJSON is the --json document of ns list.
type namespacesJSON struct {
	Namespaces []string  `json:"namespaces"`
	Read       *readJSON `json:"read,omitempty"`
}

func (c *cli) nsList(args []string) int {
	return c.staleRead("ns list", nsAdvice, args, func(cl *client.Client, rf *readFlags) (any, func(), error) {
		names, err := cl.ListNamespaces(c.ctx, rf.opts()...)
		return namespacesJSON{Namespaces: append([]string{}, names...), Read: toReadJSON(rf.served)}, func() {
			for _, n := range names {
				fmt.Fprintln(c.stdout, n)
			}
			c.printServed(rf.served)
		}, err
	})
}

// namespaceJSON is the --json document of ns get.
type namespaceJSON struct {
	Name string    `json:"name"`
	Read *readJSON `json:"read,omitempty"`
}

func (c *cli) nsGet(args []string) int {
	e := c.command("ns get", "NAME [--stale]", nsAdvice)
	rf := addReadFlags(e.fs)
	pos, code, ok := e.parse(args, 1, "namespace NAME")
	if !ok {
		return code
	}
	if err := checkName("namespace", pos[0]); err != nil {
		return e.fail(err)
	}
	return e.read(func(cl *client.Client) (any, func(), error) {
		ns, err := cl.GetNamespace(c.ctx, pos[0], rf.opts()...)
		return namespaceJSON{Name: ns.GetName(), Read: toReadJSON(ns.GetRead())}, func() {
			fmt.Fprintln(c.stdout, ns.GetName())
			c.printServed(ns.GetRead())
		}, err
	})
}
