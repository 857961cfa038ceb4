package cluster

import (
	"errors"
	"testing"

	"github.com/baton-dev/baton/internal/version"
)

// What a master reads of the replicated version records: no report is
// 0.1.0's, the zero Build (version unknown, no level: format 1); a record
// that cannot be read is the zero Build too, with the error, so that
// nothing newer is written on its say-so; a level newer than this
// binary's is kept as it is.
func TestReadVersionRecords(t *testing.T) {
	for _, tc := range []struct {
		name   string
		kv     map[string]string
		report version.Build
		format version.Format
		bad    bool
	}{
		{name: "absent", report: version.Build{}, format: version.Format1},
		{name: "current", kv: map[string]string{
			VersionKey("m1"): string(version.EncodeReport(version.Current("0.2.0"))),
			ClusterFormatKey: string(version.EncodeClusterFormat(version.Format2)),
		}, report: version.Current("0.2.0"), format: version.Format2},
		{name: "future", kv: map[string]string{
			VersionKey("m1"): string(version.EncodeReport(version.Build{Version: "7.0.0", MaxFormat: 7})),
			ClusterFormatKey: string(version.EncodeClusterFormat(7)),
		}, report: version.Build{Version: "7.0.0", MaxFormat: 7}, format: 7},
		{name: "corrupt", kv: map[string]string{VersionKey("m1"): "\x00\xff", ClusterFormatKey: "{\"format\":"},
			report: version.Build{}, format: version.Format1, bad: true},
	} {
		get := func(k string) ([]byte, bool) { v, ok := tc.kv[k]; return []byte(v), ok }
		b, err := ReadReport(get, "m1")
		if b != tc.report || (err != nil) != tc.bad || (tc.bad && !errors.Is(err, version.ErrBadRecord)) {
			t.Errorf("%s: ReadReport = %+v, %v", tc.name, b, err)
		}
		f, err := ReadClusterFormat(get)
		if f != tc.format || (err != nil) != tc.bad {
			t.Errorf("%s: ReadClusterFormat = %d, %v", tc.name, f, err)
		}
	}
}
