// Package compat holds no code: its tests read the files each released
// version of Baton wrote (testdata/<version>, made by golden.sh with that
// release's binary) with the current code, format by format, and start a
// current master on a released version's data directory, and compare the
// current wire schemas with each release's (testdata/<version>/wire.binpb,
// made by wire.sh from the release commit). A format the current code
// misreads then fails here, not in an operator's upgrade.
// See testdata/README.md for what the files hold and how a release adds
// its own.
package compat
