package domain_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// A table list of one namespace given the page token of another
// namespace's table is refused, as a region list given a token of
// another table is: resuming "after" a key outside the namespace either
// starts the list over or skips all of it, silently.
func TestListTablesTokenOfAnotherNamespace(t *testing.T) {
	c, _ := listCluster(t)
	a := c.Leader().Admin()
	for _, tc := range []struct {
		name, namespace, after string
	}{
		{"earlier namespace's table", "ns1", "default:a"},
		{"later namespace's table", "default", "ns1:c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := a.ListTables(listCtx(t), &adminpb.ListTablesRequest{
				Namespace: tc.namespace, PageToken: adminpb.EncodePageToken(adminpb.TablePageToken, tc.after),
			})
			if status.Code(err) != codes.InvalidArgument {
				var got []string
				for _, tb := range resp.GetTables() {
					got = append(got, tb.GetNamespace()+":"+tb.GetName())
				}
				t.Fatalf("namespace %s after %s: tables %v, err %v; want INVALID_ARGUMENT", tc.namespace, tc.after, got, err)
			}
		})
	}
}
