// Package layers writes down Baton's floors (docs/architecture.md) as data,
// so that a test can hold the import graph to them: a package may import
// packages on lower floors only. Keeping the rule in code, not in a
// reviewer's head, is what stops a convenient upward import (the domain
// reaching for an API type, a dispatcher for the cluster's generated code)
// from creeping back in.
package layers

import "strings"

// Floors lists Baton's packages from the ground up; a package may import
// those on lower floors only (never one on its own floor, so each floor's
// rooms stay independent of each other). A path ending in "/..." covers
// the packages below it.
var Floors = [][]string{
	{"proto/...", "internal/clock", "internal/defaults", "internal/freeport", "internal/benchstat", "internal/testwait", "internal/testcheck", "internal/layers", "internal/fsutil", "internal/tracectx", "internal/otelenv", "internal/promkit", "internal/syncbuf", "internal/memstat", "internal/doccheck", "internal/enumname", "internal/textcut", "internal/locked", "internal/grpcstop", "internal/version"},
	{"store", "scheduler", "cluster/client", "cluster/filecare", "cluster/snapdir", "security", "internal/rpcfault", "internal/promkit/scrapetest", "internal/reqlimit", "internal/testnet", "integration/harness/process"},
	{"procedure"},
	{"raftfsm", "dispatch", "cluster/lease", "cluster/diag", "cluster/regionserver", "cluster/catalog", "procedure/proceduretest", "examples/provisionproc"},
	{"cluster", "cluster/access"},
	{"cluster/domain"},
	{"cluster/admin", "cluster/console"},
	{"cluster/clustertest", "integration/harness", "cmd/node/bench"},
	{"cmd/...", "integration", "integration/...", "examples/...", "scripts/...", "docs/...", "internal/compat"},
}

// Ground are packages on floor 0 that every package may import, those of
// floor 0 included: declarations with no behaviour of their own. The one
// today is the method options the protos declare their RPCs' rules with,
// which every generated package beside a .proto imports.
var Ground = []string{"proto/optionspb"}

// FloorOf returns the floor of the package at path (relative to the module
// root, "" for the root), or -1 if no floor names it. The most specific
// entry wins, so "integration/harness" sits below "integration/...".
func FloorOf(path string) int {
	best, bestLen := -1, -1
	for floor, entries := range Floors {
		for _, e := range entries {
			if prefix, ok := strings.CutSuffix(e, "/..."); ok {
				if (path == prefix || strings.HasPrefix(path, prefix+"/")) && len(prefix) > bestLen {
					best, bestLen = floor, len(prefix)
				}
				continue
			}
			if path == e && len(e) > bestLen {
				best, bestLen = floor, len(e)+1 // an exact name beats a prefix of the same length
			}
		}
	}
	return best
}
