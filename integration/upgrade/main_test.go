package upgrade

import (
	"flag"
	"os"
	"testing"

	"github.com/baton-dev/baton/integration/harness"
)

// nodeBin is the current tree's baton binary, built once by TestMain (or
// given as BATON_NODE_BIN); the released ones are built by the tests
// (harness.BuildRelease).
var nodeBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(harness.RunWithBinary(m, "baton-upgrade-bin-", &nodeBin))
}
